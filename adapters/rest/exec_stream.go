package rest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/agentic-sandbox/agentic-sandbox/core/agent"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The media types of a streamed exec (openapi.yaml, execCommand).
const (
	ndjson         = "application/x-ndjson"
	multipartMixed = "multipart/mixed"
)

// execStreamKey holds, in an execCommand request's context, the streamed
// form its caller asked for (ndjson or multipartMixed).
type execStreamKey struct{}

// withExecStream is a strict middleware: the strict handler does not see
// the request's headers, so the choice of answer goes in the context.
func withExecStream(f restapi.StrictHandlerFunc, operationID string) restapi.StrictHandlerFunc {
	if operationID != "ExecCommand" {
		return f
	}
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, request any) (any, error) {
		if form := streamForm(r.Header.Values("Accept")); form != "" {
			ctx = context.WithValue(ctx, execStreamKey{}, form)
		}
		return f(ctx, w, r, request)
	}
}

// streamWanted is the streamed form asked for, "" for the JSON answer.
func streamWanted(ctx context.Context) string {
	v, _ := ctx.Value(execStreamKey{}).(string)
	return v
}

// streamForm is the streamed form an Accept header prefers: the one of
// multipart/mixed and application/x-ndjson with the higher q (multipart on
// a tie: raw bytes cost least), if that q is above 0 and not below
// application/json's; else "" (the JSON answer).
func streamForm(accept []string) string {
	var qN, qM, qJ float64
	for _, line := range accept {
		for _, part := range strings.Split(line, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			q := 1.0
			if v, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					q = f
				}
			}
			switch mt {
			case ndjson:
				qN = max(qN, q)
			case multipartMixed:
				qM = max(qM, q)
			case "application/json":
				qJ = max(qJ, q)
			}
		}
	}
	switch {
	case qM > 0 && qM >= qN && qM >= qJ:
		return multipartMixed
	case qN > 0 && qN >= qJ:
		return ndjson
	}
	return ""
}

// streamer queues an exec's output between the agent link's receive loop
// (add must return quickly) and the answer's writer. It keeps the first max
// bytes per stream, as the JSON form's collector does, so it never holds
// more than that form would.
type streamer struct {
	mu        sync.Mutex
	max       int
	sent      [2]int
	queue     []ports.OutputChunk
	truncated bool
	closed    bool
	wake      chan struct{}
}

func newStreamer(maxOut int) *streamer {
	return &streamer{max: maxOut, wake: make(chan struct{}, 1)}
}

func (s *streamer) add(ch ports.OutputChunk) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	i := 0
	if ch.Stream == ports.StreamStderr {
		i = 1
	}
	data := ch.Data
	if room := s.max - s.sent[i]; len(data) > room {
		s.truncated = true
		data = data[:max(room, 0)]
	}
	if len(data) > 0 {
		s.sent[i] += len(data)
		// The link may reuse its buffer once add returns: the bytes are
		// copied, into the last queued chunk of the same stream while it
		// has room (fewer, larger writes), else into a pooled buffer
		// (execanswer.go) the writer gives back.
		if n := len(s.queue); n > 0 && s.queue[n-1].Stream == ch.Stream && cap(s.queue[n-1].Data)-len(s.queue[n-1].Data) >= len(data) {
			s.queue[n-1].Data = append(s.queue[n-1].Data, data...)
		} else {
			b := getOutBuf(max(len(data), streamBufMin))
			s.queue = append(s.queue, ports.OutputChunk{Stream: ch.Stream, Data: append(b, data...)})
		}
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// streamBufMin is the smallest buffer a queued chunk gets, so that small
// chunks coming close together join.
const streamBufMin = 32 << 10

// take returns the queued chunks, in order, and whether output was dropped.
// Their buffers are the caller's to give back (putOutBuf).
func (s *streamer) take() ([]ports.OutputChunk, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue = nil
	return q, s.truncated
}

// close drops what comes later: the link keeps the command (and this
// streamer, through its callback) for late lookups.
func (s *streamer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.queue {
		putOutBuf(ch.Data)
	}
	s.closed, s.queue = true, nil
}

// execStream is the streamed answer (NDJSON or multipart) of an exec whose
// command has started.
type execStream struct {
	s       *Server
	ctx     context.Context
	cmd     ports.Command
	agentID string
	out     *streamer
	form    string // ndjson or multipartMixed
}

// streamEncoding writes a streamed form: a batch of chunks, and the end.
type streamEncoding interface {
	contentType() string
	chunks(w http.ResponseWriter, chunks []ports.OutputChunk) error
	end(w http.ResponseWriter, end restapi.ExecStreamEnd) error
}

// VisitExecCommandResponse writes the chunks as they come, flushing after
// each batch the link delivered, then the exit status. The caller going
// away kills the command, as in the JSON form.
func (e execStream) VisitExecCommandResponse(w http.ResponseWriter) error {
	defer e.out.close()
	var enc streamEncoding = &ndjsonEncoding{}
	if e.form == multipartMixed {
		enc = newMultipartEncoding()
	}
	log := e.s.log.With("agent", e.agentID, "command_id", e.cmd.ID())
	h := w.Header()
	h.Set("Content-Type", enc.contentType())
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	gone := func(err error) error {
		e.s.kill(e.ctx, e.cmd)
		log.InfoContext(e.ctx, "rest: exec caller went away; command killed", "err", err)
		// The status went out: aborting is how the answer says it is cut.
		return &streamBroken{err}
	}
	if err := rc.Flush(); err != nil {
		return gone(err)
	}
	done := e.cmd.Done()
	for {
		select {
		case <-e.out.wake:
		case <-done:
			done = nil
			hoptrace.Mark("mgmt.exec_woken")
		case <-e.ctx.Done():
			return gone(e.ctx.Err())
		}
		chunks, truncated := e.out.take()
		if len(chunks) > 0 {
			err := enc.chunks(w, chunks)
			for _, ch := range chunks {
				putOutBuf(ch.Data)
			}
			if err != nil {
				return gone(err)
			}
			if err := rc.Flush(); err != nil {
				return gone(err)
			}
		}
		if done != nil {
			continue
		}
		// Output comes before the end: all of it is written.
		res := e.cmd.Result()
		end := restapi.ExecStreamEnd{CommandId: e.cmd.ID(), AgentId: e.agentID}
		var ended func()
		if agent.Lost(res) {
			log.WarnContext(e.ctx, "rest: exec lost with its agent", "reason", res.Error)
			lerr := lostError("command "+strconv.Quote(e.cmd.ID()), res)
			end.Code, end.Error = &lerr.body.Code, &lerr.body.Error
		} else {
			ended = func() {
				log.InfoContext(e.ctx, "rest: exec ended", "exit_code", res.ExitCode, "timed_out", res.TimedOut, "duration", res.Duration, "streamed", e.form)
			}
			code, ms, success := res.ExitCode, res.Duration.Milliseconds(), res.Success()
			end.ExitCode, end.DurationMs, end.TimedOut, end.Success, end.Truncated = &code, &ms, &res.TimedOut, &success, &truncated
			if res.Signal != 0 {
				sig := res.Signal
				end.Signal = &sig
			}
			if res.Error != "" {
				msg := res.Error
				end.Error = &msg
			}
		}
		// The end flushed before the log line: a client that stops
		// reading at the end has it sooner.
		if err := enc.end(w, end); err != nil {
			return &streamBroken{err}
		}
		hoptrace.Mark("mgmt.exec_answered")
		if err := rc.Flush(); err != nil {
			return &streamBroken{err}
		}
		if ended != nil {
			ended()
		}
		return nil
	}
}

// ndjsonEncoding is Accept: application/x-ndjson: a JSON line per chunk,
// then the ExecStreamEnd line.
type ndjsonEncoding struct{ buf []byte }

func (*ndjsonEncoding) contentType() string { return ndjson }

func (n *ndjsonEncoding) chunks(w http.ResponseWriter, chunks []ports.OutputChunk) error {
	n.buf = n.buf[:0]
	for _, ch := range chunks {
		n.buf = appendChunkLine(n.buf, ch)
	}
	_, err := w.Write(n.buf)
	return err
}

func (*ndjsonEncoding) end(w http.ResponseWriter, end restapi.ExecStreamEnd) error {
	line, err := json.Marshal(end)
	if err != nil {
		return err
	}
	_, err = w.Write(append(line, '\n'))
	return err
}

// multipartEncoding is Accept: multipart/mixed: each run of a stream's
// bytes a part of their own, raw (no escaping, no base64), named by its
// Content-Disposition; then a last part "end", the ExecStreamEnd as JSON,
// and the closing delimiter. The boundary is random (multipart.Writer's,
// 240 bits): a command cannot know it to print it.
type multipartEncoding struct {
	boundary string
	started  bool
	hdr      []byte
}

func newMultipartEncoding() *multipartEncoding {
	return &multipartEncoding{boundary: multipart.NewWriter(nil).Boundary()}
}

func (m *multipartEncoding) contentType() string {
	return multipartMixed + "; boundary=" + m.boundary
}

// partHeader is the delimiter and the headers that open a part.
func (m *multipartEncoding) partHeader(name, ctype string) []byte {
	m.hdr = m.hdr[:0]
	if m.started {
		// The CRLF before a delimiter is the delimiter's, not the part's.
		m.hdr = append(m.hdr, "\r\n"...)
	}
	m.started = true
	m.hdr = append(m.hdr, "--"...)
	m.hdr = append(m.hdr, m.boundary...)
	m.hdr = append(m.hdr, "\r\nContent-Type: "...)
	m.hdr = append(m.hdr, ctype...)
	m.hdr = append(m.hdr, "\r\nContent-Disposition: inline; name=\""...)
	m.hdr = append(m.hdr, name...)
	return append(m.hdr, "\"\r\n\r\n"...)
}

func (m *multipartEncoding) chunks(w http.ResponseWriter, chunks []ports.OutputChunk) error {
	for i, ch := range chunks {
		// Chunks of the same stream in a row share a part.
		if i == 0 || chunks[i-1].Stream != ch.Stream {
			name := "stdout"
			if ch.Stream == ports.StreamStderr {
				name = "stderr"
			}
			if _, err := w.Write(m.partHeader(name, "application/octet-stream")); err != nil {
				return err
			}
		}
		if _, err := w.Write(ch.Data); err != nil {
			return err
		}
	}
	return nil
}

func (m *multipartEncoding) end(w http.ResponseWriter, end restapi.ExecStreamEnd) error {
	body, err := json.Marshal(end)
	if err != nil {
		return err
	}
	b := append(m.partHeader("end", "application/json"), body...)
	b = append(b, "\r\n--"...)
	b = append(b, m.boundary...)
	b = append(b, "--\r\n"...)
	_, err = w.Write(b)
	return err
}

// appendChunkLine appends a chunk's NDJSON line: its bytes as a JSON string
// when they are valid UTF-8 (readable, escaped in one pass), else as base64.
func appendChunkLine(b []byte, ch ports.OutputChunk) []byte {
	stream := "stdout"
	if ch.Stream == ports.StreamStderr {
		stream = "stderr"
	}
	b = append(b, `{"stream":"`...)
	b = append(b, stream...)
	if utf8.Valid(ch.Data) {
		b = append(b, `","data":"`...)
		b = appendJSONText(b, ch.Data)
	} else {
		b = append(b, `","data_b64":"`...)
		b = base64.StdEncoding.AppendEncode(b, ch.Data)
	}
	return append(b, "\"}\n"...)
}

// appendJSONText appends valid UTF-8 as the inside of a JSON string: only
// the quote, the backslash and control characters need escaping.
func appendJSONText(b, s []byte) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i, c := range s {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	return append(b, s[start:]...)
}
