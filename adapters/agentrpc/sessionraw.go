package agentrpc

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
)

// A PTY session's bytes on a connection of their own
// (Registration.session_raw, agentwire's SessionRawProtocol): instead of
// POSTing a PTY stream's output on its link's HTTP/2 connection, the agent
// opens a connection for it and upgrades a GET of the same route. It is
// let in exactly as that POST (admitOutput: sign-in 401, someone else's or
// an unknown command 404, the live connection, the connection's bound of
// output streams, its report), then its bytes are placed and acknowledged
// as the POST body's (readOutput), read by this handler straight from the
// socket. The other way the connection carries the session's input, which
// WriteStdin writes on it itself, framed with its offset and epoch: the
// keystroke crosses no HTTP/2 serve loop, Connect send loop or transport
// read loop (docs/benchmarks.md, the keystroke path hop by hop). The input's
// acknowledgements, window and resend stay the Connect stream's (stdin.go).
//
// The agent ends its output by half-closing; the server answers with
// SessionFrameEnd once it placed everything, after the input sent before
// it, and closes. Any other end is a cut: the agent connects again and
// sends what was not acknowledged. A session connection never outlives the
// agent's link connection, and its input never overtakes input sent before
// on another path (stdinPipe.sessionRawFor).

// sessionRaw is one session connection's side for input.
type sessionRaw struct {
	c  *conn // the link connection it belongs to
	mu sync.Mutex
	nc net.Conn
	// ended: the end frame is written or a write failed; input goes on
	// the Connect stream.
	ended bool
	frame []byte
}

var errSessionRawEnded = errors.New("session connection ended")

// send writes one input frame.
func (r *sessionRaw) send(in agentwire.SessionInput) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return errSessionRawEnded
	}
	r.frame = agentwire.AppendSessionInput(r.frame[:0], in)
	if _, err := r.nc.Write(r.frame); err != nil {
		r.ended = true
		return err
	}
	return nil
}

// end writes the end frame after every input frame written so far.
func (r *sessionRaw) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ended {
		r.ended = true
		_, _ = r.nc.Write([]byte{agentwire.SessionFrameEnd})
	}
}

// serveSessionRaw takes an agent's connection for one PTY stream.
func (s *Service) serveSessionRaw(w http.ResponseWriter, r *http.Request) {
	o, ok := s.admitOutput(w, r, agentwire.SessionRawProtocol)
	if !ok {
		return
	}
	defer o.c.dataStreams.release()
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "cannot take the connection over", http.StatusInternalServerError)
		return
	}
	defer nc.Close()
	// The listener's header and idle bounds are for requests; a session's
	// connection lasts as long as the agent's link connection.
	_ = nc.SetDeadline(time.Time{})
	defer o.c.closeAtEnd(nc)()
	if _, err := io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+agentwire.SessionRawProtocol+"\r\n\r\n"); err != nil {
		return
	}
	raw := &sessionRaw{c: o.c, nc: nc}
	if o.stream == sandboxv1.OutputStream_OUTPUT_STREAM_PTY {
		o.cmd.stdin.attachRaw(raw)
		defer o.cmd.stdin.detachRaw(raw)
	}
	if s.readOutput(o, brw.Reader) {
		o.cmd.stdin.detachRaw(raw) // input sent from now on goes on the stream
		raw.end()
	}
}
