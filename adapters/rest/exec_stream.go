package rest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/agentic-sandbox/agentic-sandbox/core/agent"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// ndjson is the media type of a streamed exec (openapi.yaml, execCommand).
const ndjson = "application/x-ndjson"

// execStreamKey marks, in an execCommand request's context, a caller that
// asked for the output streamed as NDJSON.
type execStreamKey struct{}

// withExecStream is a strict middleware: the strict handler does not see
// the request's headers, so the choice of answer goes in the context.
func withExecStream(f restapi.StrictHandlerFunc, operationID string) restapi.StrictHandlerFunc {
	if operationID != "ExecCommand" {
		return f
	}
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, request any) (any, error) {
		if wantsNDJSON(r.Header.Values("Accept")) {
			ctx = context.WithValue(ctx, execStreamKey{}, true)
		}
		return f(ctx, w, r, request)
	}
}

func streamWanted(ctx context.Context) bool {
	v, _ := ctx.Value(execStreamKey{}).(bool)
	return v
}

// wantsNDJSON says an Accept header asks for application/x-ndjson with no
// preference (q) for application/json over it.
func wantsNDJSON(accept []string) bool {
	var qN, qJ float64
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
			case "application/json":
				qJ = max(qJ, q)
			}
		}
	}
	return qN > 0 && qN >= qJ
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
		// The link may reuse its buffer once add returns.
		s.queue = append(s.queue, ports.OutputChunk{Stream: ch.Stream, Data: append([]byte(nil), data...)})
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take returns the queued chunks, in order, and whether output was dropped.
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
	s.closed, s.queue = true, nil
}

// execStream is the NDJSON answer of an exec whose command has started.
type execStream struct {
	s       *Server
	ctx     context.Context
	cmd     ports.Command
	agentID string
	out     *streamer
}

// VisitExecCommandResponse writes the chunks as they come, flushing after
// each batch the link delivered, then the exit status line. The caller
// going away kills the command, as in the JSON form.
func (e execStream) VisitExecCommandResponse(w http.ResponseWriter) error {
	defer e.out.close()
	log := e.s.log.With("agent", e.agentID, "command_id", e.cmd.ID())
	h := w.Header()
	h.Set("Content-Type", ndjson)
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
	var buf []byte
	done := e.cmd.Done()
	for {
		select {
		case <-e.out.wake:
		case <-done:
			done = nil
		case <-e.ctx.Done():
			return gone(e.ctx.Err())
		}
		chunks, truncated := e.out.take()
		if len(chunks) > 0 {
			buf = buf[:0]
			for _, ch := range chunks {
				buf = appendChunkLine(buf, ch)
			}
			if _, err := w.Write(buf); err != nil {
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
		if agent.Lost(res) {
			log.WarnContext(e.ctx, "rest: exec lost with its agent", "reason", res.Error)
			lerr := lostError("command "+strconv.Quote(e.cmd.ID()), res)
			end.Code, end.Error = &lerr.body.Code, &lerr.body.Error
		} else {
			log.InfoContext(e.ctx, "rest: exec ended", "exit_code", res.ExitCode, "timed_out", res.TimedOut, "duration", res.Duration, "streamed", true)
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
		line, err := json.Marshal(end)
		if err != nil {
			return &streamBroken{err}
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return &streamBroken{err}
		}
		return nil
	}
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
