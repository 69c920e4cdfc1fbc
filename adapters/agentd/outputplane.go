package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
)

// The output data plane (agentrpc's outputplane.go): on a connection whose
// server said output_data_plane, the send loop hands each command
// stream's output, in the outbox's order, to that stream's data stream —
// the raw body of a POST to agentwire.OutputPath+id+"/"+stream on the
// link's own HTTP/2 connection (a VM's serial link multiplexes it like
// the Connect stream) — instead of sending OutputChunk messages. The
// outbox does not change: what the plane takes is sent, retained until
// the server's OutputAck covers it (the server acknowledges as it places
// the bytes), paces the producers by the same bound, and goes again on
// the next connection. So:
//
//   - a result (and a connect report's finished command) names where each
//     stream that went on the data plane on this connection ends
//     (CommandResult.output_ends): the server finishes the command once
//     its output got there;
//   - a stream's end-of-output chunk closes its data stream (a clean end)
//     instead of going on the Connect stream, where its acknowledgement
//     could cover bytes still on their way;
//   - a data stream the server refuses with 404 (a command it does not
//     have) lets that stream's output go, as the server acknowledged such
//     chunks; any other failure ends the connection: the next one sends
//     again from the first unacknowledged offset;
//   - at a drain, the data streams end cleanly after what was handed to
//     them, before the Connect stream's side does;
//   - a connection holds at most maxOutputStreams data streams; the output
//     of more streams goes on the Connect stream as before;
//   - a connection's data streams start once its connect report is sent:
//     the server holds them until it handled that report, and what they
//     carry must not fill the connection's window ahead of it.

// maxOutputStreams bounds one connection's output data streams (the
// server's own bound is higher; HTTP/2 allows 250 streams at once).
const maxOutputStreams = 64

// outKey names one output stream of one command.
type outKey struct {
	id     string
	stream sandboxv1.OutputStream
}

// outputPlane is one connection's output data streams.
type outputPlane struct {
	a    *Agent
	ctx  context.Context
	conn string // the connection's id (RegistrationAck config)
	// raw: a PTY stream goes on a connection of its own, which also
	// brings its input (sessionraw.go).
	raw bool

	mu      sync.Mutex
	writers map[outKey]*outputWriter
	control map[outKey]bool // over the bound: on the Connect stream
	refused map[outKey]bool // the server has no such command: dropped
	wg      sync.WaitGroup
	// Until the connect report is sent, data streams wait (held): a
	// stream waits at the server for that report, and streams sent first
	// could fill the connection's window ahead of it.
	released bool
	held     []*outputWriter

	failed chan error // a data stream broke: the connection ends
}

func (a *Agent) newOutputPlane(ctx context.Context, connID string) *outputPlane {
	return &outputPlane{a: a, ctx: ctx, conn: connID, writers: map[outKey]*outputWriter{},
		control: map[outKey]bool{}, refused: map[outKey]bool{}, failed: make(chan error, 1)}
}

// route is what the send loop does with a message of the outbox.
type route int

const (
	routeSend    route = iota // send it on the Connect stream (msg may be replaced)
	routeTaken                // the data plane took it: pop it (retained until acknowledged)
	routeDropped              // nothing to send: pop it and let it go
)

// take routes m: output to its data stream, a result or report with the
// ends of the streams that went on the data plane. For routeSend, the
// message to send is returned (a copy when the plane annotated it).
func (p *outputPlane) take(m *sandboxv1.ConnectRequest) (route, *sandboxv1.ConnectRequest) {
	if p == nil {
		return routeSend, m
	}
	switch pl := m.GetPayload().(type) {
	case *sandboxv1.ConnectRequest_Output:
		return p.output(pl.Output), m
	case *sandboxv1.ConnectRequest_CommandResult:
		res := p.ends(pl.CommandResult, true)
		if res == pl.CommandResult {
			return routeSend, m
		}
		return routeSend, &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_CommandResult{CommandResult: res}}
	case *sandboxv1.ConnectRequest_SessionReport:
		rep := pl.SessionReport
		var out *sandboxv1.SessionReport
		for i, si := range rep.GetSessions() {
			res := si.GetResult()
			if res == nil {
				continue
			}
			if r := p.ends(res, false); r != res {
				if out == nil {
					out = &sandboxv1.SessionReport{RequestId: rep.GetRequestId(), Sessions: append([]*sandboxv1.SessionInfo(nil), rep.GetSessions()...)}
				}
				c := proto.Clone(si).(*sandboxv1.SessionInfo)
				c.Result = r
				out.Sessions[i] = c
			}
		}
		if out == nil {
			return routeSend, m
		}
		return routeSend, &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_SessionReport{SessionReport: out}}
	}
	return routeSend, m
}

// output hands o to its stream's data stream.
func (p *outputPlane) output(o *sandboxv1.OutputChunk) route {
	k := outKey{o.GetStreamId(), o.GetStream()}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.refused[k]:
		return routeDropped
	case p.control[k]:
		return routeSend
	}
	w := p.writers[k]
	if len(o.GetData()) == 0 {
		if o.GetEof() && w != nil {
			w.close()
		}
		// An end with no data stream on this connection: the server had
		// the stream's bytes before it (acknowledged), or they went on the
		// Connect stream.
		return routeDropped
	}
	off, data := o.GetOffset(), o.GetData()
	if w != nil && !w.append(off, data) {
		// Not where its data stream is (it cannot be, in the outbox's
		// order): that stream ends, another starts at off.
		w.close()
		w = nil
	}
	if w == nil {
		if len(p.writers) >= maxOutputStreams {
			p.control[k] = true
			return routeSend
		}
		w = newOutputWriter(k, off)
		w.append(off, data)
		p.writers[k] = w
		hoptrace.Mark("agent.plane_new")
		if p.released {
			p.wg.Add(1)
			go p.post(w)
		} else {
			p.held = append(p.held, w)
		}
	}
	return routeTaken
}

// sent is told of each message sent on the Connect stream: the connect
// report lets the data streams go.
func (p *outputPlane) sent(m *sandboxv1.ConnectRequest) {
	if p == nil || !strings.HasPrefix(m.GetSessionReport().GetRequestId(), "connect:") {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return
	}
	p.released = true
	for _, w := range p.held {
		p.wg.Add(1)
		go p.post(w)
	}
	p.held = nil
}

// ends returns res with the ends of its command's streams that went on
// the data plane on this connection (res itself when none did); with
// last, those data streams end: the command's output is all handed over.
func (p *outputPlane) ends(res *sandboxv1.CommandResult, last bool) *sandboxv1.CommandResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ends []*sandboxv1.OutputEnd
	for k, w := range p.writers {
		if k.id != res.GetCommandId() {
			continue
		}
		ends = append(ends, &sandboxv1.OutputEnd{Stream: k.stream, Offset: w.endOffset()})
		if last {
			w.close()
		}
	}
	if len(ends) == 0 {
		return res
	}
	c := proto.Clone(res).(*sandboxv1.CommandResult)
	c.OutputEnds = ends
	return c
}

// post runs w's data stream until it ends.
func (p *outputPlane) post(w *outputWriter) {
	hoptrace.Mark("agent.post_run")
	defer p.wg.Done()
	defer w.abort()
	if p.raw && w.key.stream == sandboxv1.OutputStream_OUTPUT_STREAM_PTY {
		p.postRaw(w)
		return
	}
	target := p.a.serverBase + agentwire.OutputPath + url.PathEscape(w.key.id) + "/" + agentwire.OutputStreamName(w.key.stream)
	req, err := http.NewRequestWithContext(p.ctx, http.MethodPost, target, w)
	if err != nil {
		p.fail(err)
		return
	}
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set(agentwire.HeaderOutputOffset, strconv.FormatUint(w.start, 10))
	req.Header.Set(agentwire.HeaderOutputConnection, p.conn)
	p.a.signIn(req.Header)
	resp, err := p.a.linkHTTP.Do(req) //nolint:gosec // G704: the management server's output route only
	if err != nil {
		if p.ctx.Err() == nil {
			p.fail(fmt.Errorf("output data stream: %w", err))
		}
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	p.ended(w, resp.StatusCode, resp.Status)
}

// ended settles w's data stream by the server's answer: a clean end lets
// it go, 404 lets the command's output go, anything else ends the
// connection (the next one sends again what was not acknowledged).
func (p *outputPlane) ended(w *outputWriter, status int, desc string) {
	switch {
	case status == http.StatusNoContent && w.closedCleanly():
		p.mu.Lock()
		if p.writers[w.key] == w {
			delete(p.writers, w.key)
		}
		p.mu.Unlock()
	case status == http.StatusNotFound:
		// A command the server does not have: its output goes nowhere.
		p.mu.Lock()
		p.refused[w.key] = true
		if p.writers[w.key] == w {
			delete(p.writers, w.key)
		}
		p.mu.Unlock()
		p.a.out.ack(w.key.id, w.key.stream, math.MaxUint64)
	default:
		p.fail(fmt.Errorf("the server ended an output data stream: %s", desc))
	}
}

func (p *outputPlane) fail(err error) {
	select {
	case p.failed <- err:
	default:
	}
}

// finish ends every data stream after what was handed to it, and waits
// (at most timeout) for the server to have taken them: a drain.
func (p *outputPlane) finish(timeout time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	for _, w := range p.writers {
		w.close()
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// stop cuts every data stream (the connection is over); their bytes not
// acknowledged go again on the next one.
func (p *outputPlane) stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	for _, w := range p.writers {
		w.abort()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// outputWriter is one data stream's body: the bytes handed to it, read by
// the HTTP/2 transport as it can send them (flow control paces it, and the
// outbox's bound the producers).
type outputWriter struct {
	key   outKey
	start uint64

	mu      sync.Mutex
	cond    sync.Cond
	queue   [][]byte
	end     uint64 // the offset after the last byte handed over
	closed  bool   // no more: the body ends after the queue
	aborted bool
	eof     bool // the transport read the clean end
	read    bool // the transport read bytes (a hop mark)
}

func newOutputWriter(k outKey, start uint64) *outputWriter {
	w := &outputWriter{key: k, start: start, end: start}
	w.cond.L = &w.mu
	return w
}

// append hands data at off over; false when off is not where the stream
// is (the caller starts another). Bytes it already has are skipped.
func (w *outputWriter) append(off uint64, data []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.aborted || off > w.end {
		return false
	}
	if skip := w.end - off; skip > 0 {
		if skip >= uint64(len(data)) {
			return true
		}
		data = data[skip:]
	}
	w.queue = append(w.queue, data)
	w.end += uint64(len(data))
	w.cond.Signal()
	return true
}

func (w *outputWriter) endOffset() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.end
}

func (w *outputWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cond.Broadcast()
}

func (w *outputWriter) abort() {
	w.mu.Lock()
	w.aborted = true
	w.queue = nil
	w.mu.Unlock()
	w.cond.Broadcast()
}

func (w *outputWriter) closedCleanly() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.eof
}

var errOutputAborted = errors.New("output data stream cut")

// Read gives the transport as much of the queue as fits: one DATA frame
// for what piled up meanwhile.
func (w *outputWriter) Read(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.queue) == 0 && !w.closed && !w.aborted {
		w.cond.Wait()
	}
	if w.aborted {
		return 0, errOutputAborted
	}
	if len(w.queue) == 0 {
		w.eof = true
		return 0, io.EOF
	}
	if !w.read {
		w.read = true
		hoptrace.Mark("agent.body_read")
	}
	n := 0
	for n < len(p) && len(w.queue) > 0 {
		c := copy(p[n:], w.queue[0])
		n += c
		if c == len(w.queue[0]) {
			w.queue[0] = nil
			w.queue = w.queue[1:]
		} else {
			w.queue[0] = w.queue[0][c:]
		}
	}
	return n, nil
}

// Close is the transport's: it has read all it will.
func (w *outputWriter) Close() error {
	w.mu.Lock()
	if !w.eof {
		w.aborted = true
		w.queue = nil
	}
	w.mu.Unlock()
	w.cond.Broadcast()
	return nil
}
