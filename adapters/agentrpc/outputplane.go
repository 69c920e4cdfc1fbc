package agentrpc

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
)

// The output data plane: for an agent that registered with
// output_data_plane (and heard output_data_plane in the ack), a command's
// output does not travel in OutputChunk messages on the Connect stream (a
// protobuf message, a Connect envelope, a copy and a hand-off each per
// chunk) but as the raw body of one more HTTP/2 stream on the same
// connection per command stream: the agent POSTs the bytes of stream
// "stdout", "stderr" or "pty" of command id to OutputPath+id+"/"+stream,
// from the offset HeaderOutputOffset names on. The Connect stream keeps
// the control: started, the result, the session reports and the
// acknowledgements.
//
// - Placement and duplicates: the bytes are placed by offset like an
//   OutputChunk's (command.deliverData): what the server has already is
//   dropped, a hole before them is a gap (Lost).
// - Acknowledgements: OutputAck on the Connect stream as before, sent as
//   the data stream's bytes are handled (stored, for a session), by the
//   offset they reached, coalesced (ackcoalesce.go) and at once at the
//   data stream's end. The agent keeps what it sent until acknowledged
//   and sends it again on its next connection, so a server killed -9
//   loses nothing it acknowledged later.
// - Order between the planes: a result carries where each stream whose
//   output went on the data plane ends (CommandResult.output_ends); the
//   command is finished only once its output reached them, or after
//   outputEndWait without progress (finishAfterOutput).
// - Refusals: the agent's id and secret are checked, the stream must be
//   for the agent's live connection (HeaderOutputConnection), and the
//   command one of that agent's (another agent's and an unknown one are
//   404 alike). Until the connection's report is handled a stream waits
//   (its window fills and paces the agent), as OutputChunk messages of
//   commands the server did not know yet were held: the report is what
//   lets a restarted server adopt them.
// - Limits: each stream has HTTP/2's window (streamWindow); a connection
//   holds at most maxOutputStreams of them; the agent opens fewer
//   (agentd's own bound) and sends the output of more on the Connect
//   stream.
// - Drain: the agent ends its data streams when the server drains its
//   Connect stream, and the server waits (drainTimeout) for them before its
//   last acknowledgements; a data stream never outlives its connection.

// OutputPath is the output data route's prefix; command id and stream follow.
const OutputPath = agentwire.OutputPath

const (
	// outputReadChunk is the most bytes of a data stream handed on at once.
	outputReadChunk = 256 << 10
	// maxOutputStreams bounds the open output data streams of one connection.
	maxOutputStreams = 128
	// outputReportWait bounds how long a data stream waits for the
	// connection's report before it is refused (the agent connects again).
	outputReportWait = 30 * time.Second
)

// readBufs are the data streams' read buffers: a fresh one per stream
// (a command's) cost page faults on every exec.
var readBufs = sync.Pool{New: func() any { b := make([]byte, outputReadChunk); return &b }}

// outputEndWait bounds how long a result waits for output that makes no
// progress (a variable for tests).
var outputEndWait = 10 * time.Second

// dataStreams counts a connection's open output data streams.
type dataStreams struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0, made by wait
}

func (d *dataStreams) take(limit int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n >= limit {
		return false
	}
	d.n++
	return true
}

func (d *dataStreams) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n--
	if d.n == 0 && d.idle != nil {
		close(d.idle)
		d.idle = nil
	}
}

// wait waits until no data stream is open, or until timeout.
func (d *dataStreams) wait(timeout time.Duration) {
	d.mu.Lock()
	if d.n == 0 {
		d.mu.Unlock()
		return
	}
	if d.idle == nil {
		d.idle = make(chan struct{})
	}
	ch := d.idle
	d.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// markReported lets the data streams waiting for the connection's report go on.
func (c *conn) markReported() {
	c.reportedOnce.Do(func() { close(c.reportedCh) })
}

// serveOutput is the output data route: an agent's POST of one command
// stream's bytes.
func (s *Service) serveOutput(w http.ResponseWriter, r *http.Request) {
	hoptrace.Mark("mgmt.output_in")
	o, ok := s.admitOutput(w, r, "")
	if !ok {
		return
	}
	hoptrace.Mark("mgmt.output_admitted")
	defer o.c.dataStreams.release()
	// A data stream never outlives its connection: its end unblocks the read.
	defer o.c.closeAtEnd(r.Body)()
	if s.readOutput(o, r.Body) {
		w.WriteHeader(http.StatusNoContent)
	}
}

// outputStream is an output data stream let in: whose, and from where.
type outputStream struct {
	c      *conn
	cmd    *command
	id     string
	stream sandboxv1.OutputStream
	off    uint64
}

// admitOutput checks an output data stream (a POST, or a GET upgrading to
// upgrade when not empty) and answers its refusal: the agent's id and
// secret (401, 503 while they cannot be checked), the stream and its offset (400), the upgrade (426), the
// agent's live connection (409), the connection's bound (429), its report
// (waited for), and the command, one of that agent's (404). Once admitted,
// the stream counts in the connection's dataStreams until the caller
// releases it.
func (s *Service) admitOutput(w http.ResponseWriter, r *http.Request, upgrade string) (outputStream, bool) {
	agentID, ok := s.signedIn(w, r)
	if !ok {
		return outputStream{}, false
	}
	stream := agentwire.OutputStreamNamed(r.PathValue("stream"))
	off, err := strconv.ParseUint(r.Header.Get(agentwire.HeaderOutputOffset), 10, 64)
	if stream == sandboxv1.OutputStream_OUTPUT_STREAM_UNSPECIFIED || err != nil {
		http.Error(w, "an output stream is stdout, stderr or pty, from the offset "+agentwire.HeaderOutputOffset+" names", http.StatusBadRequest)
		return outputStream{}, false
	}
	if upgrade != "" && !upgradingTo(w, r, upgrade) {
		return outputStream{}, false
	}
	s.mu.Lock()
	c := s.conns[agentID]
	s.mu.Unlock()
	if c == nil || !c.outputDataPlane || r.Header.Get(agentwire.HeaderOutputConnection) != strconv.FormatUint(c.gen, 10) {
		http.Error(w, "not this agent's live connection", http.StatusConflict)
		return outputStream{}, false
	}
	if !c.dataStreams.take(maxOutputStreams) {
		s.log.Warn("refused: too many output data streams on one connection", "agent_id", agentID, "limit", maxOutputStreams)
		http.Error(w, "too many output data streams", http.StatusTooManyRequests)
		return outputStream{}, false
	}
	admitted := false
	defer func() {
		if !admitted {
			c.dataStreams.release()
		}
	}()
	wait := time.NewTimer(outputReportWait)
	defer wait.Stop()
	select {
	case <-c.reportedCh:
	case <-c.closed:
		http.Error(w, "connection gone", http.StatusConflict)
		return outputStream{}, false
	case <-wait.C:
		http.Error(w, "the connection's report did not come", http.StatusServiceUnavailable)
		return outputStream{}, false
	case <-r.Context().Done():
		return outputStream{}, false
	}
	id := r.PathValue("id")
	cmd := s.commandOf(agentID, id)
	if cmd == nil {
		// Another agent's command, or one nobody has (any more): the agent
		// lets its output go, as the server acknowledged such chunks.
		http.Error(w, "no such command for this agent", http.StatusNotFound)
		return outputStream{}, false
	}
	admitted = true
	return outputStream{c: c, cmd: cmd, id: id, stream: stream, off: off}, true
}

// closeAtEnd closes body when c ends (a data stream never outlives its
// connection), until the returned stop is called.
func (c *conn) closeAtEnd(body io.Closer) (stop func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-c.closed:
			_ = body.Close()
		case <-done:
		}
	}()
	return func() { close(done) }
}

// readOutput places o's bytes as they come from body and acknowledges
// them; true at body's clean end, false when it was cut (the agent sends
// again what was not acknowledged).
func (s *Service) readOutput(o outputStream, body io.Reader) bool {
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	buf := *bp
	off := o.off
	first := true
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if first {
				first = false
				hoptrace.Mark("mgmt.output_read")
			}
			// The handler may keep the bytes (a buffer, a log queue).
			data := make([]byte, n)
			copy(data, buf[:n])
			o.cmd.deliverData(o.stream, off, data)
			off += uint64(n)
			o.c.noteAck(o.id, o.stream, off, n, false)
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			o.c.flushAcks() // the stream's end: acknowledged at once
			return true
		default:
			o.c.flushAcks()
			return false
		}
	}
}

// outputReached reports whether the command's output reached ends, and
// returns a channel closed at its next delivery.
func (c *command) outputReached(ends []*sandboxv1.OutputEnd) (bool, <-chan struct{}) {
	c.deliverMu.Lock()
	defer c.deliverMu.Unlock()
	for _, e := range ends {
		if c.next[agentwire.StreamFromProto(e.GetStream())] < e.GetOffset() {
			if c.progress == nil {
				c.progress = make(chan struct{})
			}
			return false, c.progress
		}
	}
	return true, nil
}

// finishAfterOutput finishes cmd with res once its output reached the
// ends the result names (at once when it names none: its output came on
// the Connect stream ahead of it), or after outputEndWait without
// progress; before (may be nil) runs first.
func (s *Service) finishAfterOutput(cmd *command, res *sandboxv1.CommandResult, before func()) {
	end := func() {
		if before != nil {
			before()
		}
		s.finish(cmd, agentwire.Result(res))
	}
	ends := res.GetOutputEnds()
	if done, _ := cmd.outputReached(ends); done {
		end()
		return
	}
	go func() {
		idle := time.NewTimer(outputEndWait)
		defer idle.Stop()
		for {
			done, progress := cmd.outputReached(ends)
			if done {
				break
			}
			select {
			case <-progress:
				idle.Reset(outputEndWait)
				continue
			case <-idle.C:
				s.log.Warn("a command's output did not reach the end its result names; finishing it without", "agent_id", cmd.agentID, "command_id", cmd.id)
			}
			break
		}
		end()
	}()
}

// deliverData hands a command stream's bytes at off to the caller, as
// deliver does an OutputChunk's.
func (c *command) deliverData(s sandboxv1.OutputStream, off uint64, data []byte) {
	c.deliver(&sandboxv1.OutputChunk{StreamId: c.id, Stream: s, Data: data, Offset: off})
}
