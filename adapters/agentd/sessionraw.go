package agentd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
)

// A PTY session's bytes on a connection of their own (agentwire's
// SessionRawProtocol): where the server said session_raw and the agent can
// open connections of its own (not a serial link), a PTY stream's output
// data stream is not an HTTP/2 stream of the link but one plain TCP (TLS
// off loopback) connection, upgraded like a raw tunnel. Its output goes on
// it as raw bytes, written by this goroutine from the stream's queue; the
// session's input comes back on it in frames, read by one goroutine that
// queues them for the PTY's writer as the receive loop does a StdinChunk.
// No HTTP/2 framing or goroutine hand-off of the link on either way, which
// is what bounded the keystroke's two crossings (docs/benchmarks.md).
// Everything else is the output data plane's: the outbox retains what it
// sent until OutputAck, a refusal (404) lets the output go, a cut ends
// the link's connection, a drain ends it cleanly (the agent half-closes,
// the server answers with its end frame once it took everything).

// sessionRawBuf is how much of a session's queued output goes in one write.
const sessionRawBuf = 64 << 10

// sessionRawCapable: the agent can open session connections of its own.
func (a *Agent) sessionRawCapable() bool {
	return a.rawDial != nil && !a.cfg.NoSessionRaw && !a.cfg.NoOutputDataPlane
}

// postRaw runs w's data stream on a connection of its own until it ends.
func (p *outputPlane) postRaw(w *outputWriter) {
	path := agentwire.OutputPath + url.PathEscape(w.key.id) + "/" + agentwire.OutputStreamName(w.key.stream)
	conn, br, resp, err := p.a.rawUpgrade(p.ctx, path, agentwire.SessionRawProtocol,
		agentwire.HeaderOutputOffset, strconv.FormatUint(w.start, 10), agentwire.HeaderOutputConnection, p.conn)
	if err != nil {
		if p.ctx.Err() == nil {
			p.fail(fmt.Errorf("session connection: %w", err))
		}
		return
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		_ = conn.Close()
		p.ended(w, resp.StatusCode, resp.Status)
		return
	}
	_ = conn.SetDeadline(time.Time{})
	// A session connection never outlives the link's connection.
	stop := context.AfterFunc(p.ctx, func() { _ = conn.Close() })
	defer stop()
	ended := make(chan bool, 1)
	go func() {
		clean := p.a.sessionInput(w.key.id, br)
		if !clean {
			w.abort() // cut: the writer stops waiting for more output
		}
		ended <- clean
	}()
	werr := writeSessionOutput(conn, w)
	if werr != nil {
		_ = conn.Close() // the input's reader ends too
	}
	clean := <-ended
	_ = conn.Close()
	if werr == nil && clean {
		p.ended(w, http.StatusNoContent, "")
		return
	}
	if werr == nil {
		werr = errors.New("no end from the server")
	}
	if p.ctx.Err() == nil {
		p.fail(fmt.Errorf("session connection cut: %w", werr))
	}
}

// writeSessionOutput writes w's bytes to conn as they are handed over and
// half-closes it after the clean end.
func writeSessionOutput(conn net.Conn, w *outputWriter) error {
	buf := make([]byte, sessionRawBuf)
	for {
		n, err := w.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			if cw, ok := conn.(interface{ CloseWrite() error }); ok {
				return cw.CloseWrite()
			}
			return errors.New("this connection cannot half-close")
		case err != nil:
			return err
		}
	}
}

// sessionInput queues command id's input frames as they come, until the
// server's end frame (true) or the connection's end (false).
func (a *Agent) sessionInput(id string, br *bufio.Reader) bool {
	for {
		in, end, err := agentwire.ReadSessionFrame(br)
		if err != nil {
			return false
		}
		if end {
			return true
		}
		run := a.lookup(id)
		if run == nil || run.proc == nil {
			continue // as the receive loop does for a command it has not
		}
		off := in.Offset
		a.stdinChunk(run, &sandboxv1.StdinChunk{CommandId: id, Data: in.Data, Eof: in.EOF, Offset: &off, InputEpoch: in.Epoch})
	}
}
