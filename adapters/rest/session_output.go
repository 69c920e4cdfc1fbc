package rest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// sessionOutputRoute is served outside the strict server (a raw byte body or
// an SSE stream), after the generated wrapper has parsed its parameters.
const sessionOutputRoute = "GET /api/v1/sessions/{session_id}/output"

const (
	// maxSessionRead is the default and the limit of one plain read.
	maxSessionRead = 4 << 20
	// sseChunk bounds the bytes of one SSE output frame.
	sseChunk = 64 << 10
	// followWait is how long a plain read with follow=true waits for output.
	followWait = 30 * time.Second
	// ssePing is how often an idle SSE stream sends a comment line.
	ssePing = 15 * time.Second
)

// GetSessionOutput is never reached: sessionOutput serves the route.
func (s *Server) GetSessionOutput(context.Context, restapi.GetSessionOutputRequestObject) (restapi.GetSessionOutputResponseObject, error) {
	return nil, errors.New("GET session output is served outside the strict server")
}

// rawRoutes is a middleware that serves the routes the strict server cannot
// (their parameters are already parsed by the generated wrapper).
func (s *Server) rawRoutes(next http.Handler) http.Handler {
	raw := map[string]http.HandlerFunc{
		sessionOutputRoute: s.sessionOutput,
		createTaskRoute:    s.createTask,
		taskEventsRoute:    s.taskEvents,
		signInRoute:        s.signIn,
		signOutRoute:       s.signOut,
		changesRoute:       s.watchChanges,
		forwardRoute:       s.forwardPort,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if serve, ok := raw[r.Pattern]; ok {
			if streamRoutes[r.Pattern] {
				var release func()
				r, release = s.untilSignedOut(r)
				defer release()
			}
			serve(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func wantsSSE(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "text/event-stream" {
			return true
		}
	}
	return false
}

func (s *Server) sessionOutput(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("session_id")
	sess, apiErr := s.session(id)
	if apiErr != nil {
		_ = apiErr.write(w)
		return
	}
	if s.d.SessionLog == nil {
		_ = sessionNotFoundErr(id).write(w)
		return
	}
	q := r.URL.Query()
	sse := wantsSSE(r)
	first, end := s.d.SessionLog.Bounds(sess.ID)
	from := first
	if v := q.Get("from"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			_ = badRequest("parameter from: must be a non-negative integer").write(w)
			return
		}
		from = n
	} else if v := r.Header.Get("Last-Event-ID"); sse && v != "" {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			from = n
		}
	}
	if from > end {
		_ = newError(http.StatusBadRequest, "offset_beyond_end", "parameter from: %d is past the end of the output (%d)", from, end).write(w)
		return
	}
	max := maxSessionRead
	if v := q.Get("max"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxSessionRead {
			_ = badRequest("parameter max: between 1 and %d", maxSessionRead).write(w)
			return
		}
		max = n
	}
	follow := false
	if v := q.Get("follow"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			_ = badRequest("parameter follow: true or false").write(w)
			return
		}
		follow = b
	}
	if sse {
		s.sessionSSE(w, r, sess.ID, from)
		return
	}
	if follow {
		s.waitOutput(r.Context(), sess.ID, from, followWait)
	}
	data, start, gap, err := s.d.SessionLog.ReadFrom(sess.ID, from, max)
	if err != nil {
		s.outputError(w, r, sess.ID, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Output-Start", itoa(start))
	h.Set("X-Output-End", itoa(start+uint64(len(data))))
	h.Set("X-Output-Gap", strconv.FormatBool(gap))
	if gap {
		h.Set("X-Output-Gap-Reason", s.gapReason(sess.ID, from))
	}
	h.Set("X-Output-Lost", itoa(s.d.SessionLog.Lost(sess.ID)))
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func (s *Server) outputError(w http.ResponseWriter, r *http.Request, id string, err error) {
	switch {
	case errors.Is(err, ports.ErrOffsetBeyondEnd):
		_ = newError(http.StatusBadRequest, "offset_beyond_end", "parameter from: past the end of the output (%d)", s.d.SessionLog.End(id)).write(w)
	case errors.Is(err, ports.ErrSessionNotFound):
		_ = sessionNotFoundErr(id).write(w)
	default:
		s.responseError(w, r, err)
	}
}

// Why bytes are missing from a gap that begins at from: older than the
// first byte held, the log's bound dropped them; else they are a hole of
// bytes that could not be stored (a full disk).
const (
	gapDropped   = "dropped"
	gapNotStored = "not_stored"
)

func (s *Server) gapReason(id string, from uint64) string {
	if first, _ := s.d.SessionLog.Bounds(id); from < first {
		return gapDropped
	}
	return gapNotStored
}

// ended reports whether the session is over (or no longer known).
func (s *Server) ended(id string) bool {
	sess, ok := s.d.Sessions.Get(id)
	return !ok || sess.State.Ended()
}

// waitOutput waits until the log holds bytes past offset, the session ends,
// ctx ends or d passes. The caller reads the log again afterwards.
func (s *Server) waitOutput(ctx context.Context, id string, offset uint64, d time.Duration) {
	if s.ended(id) || s.d.SessionLog.End(id) > offset {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if d > 0 {
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(ctx, d)
		defer c2()
	}
	if ch := s.d.Sessions.Exited(id); ch != nil {
		go func() {
			select {
			case <-ch:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	_ = s.d.SessionLog.Wait(ctx, id, offset)
}

// sseOutput, sseGap and sseExited are the data of the SSE frames.
type sseOutput struct {
	Offset   uint64 `json:"offset"`
	Data     string `json:"data"`
	Encoding string `json:"encoding"`
}

type sseGap struct {
	From   uint64 `json:"from"`
	To     uint64 `json:"to"`
	Reason string `json:"reason"`
	// Lost is the session's bytes not stored so far (reason not_stored).
	Lost uint64 `json:"lost"`
}

type sseExited struct {
	State    string `json:"state"`
	ExitCode *int   `json:"exit_code,omitempty"`
	End      uint64 `json:"end"`
}

func writeSSE(w http.ResponseWriter, event, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if id != "" {
		_, err = fmt.Fprintf(w, "event: %s\nid: %s\ndata: %s\n\n", event, id, b)
	} else {
		_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	}
	return err
}

// startSSE sends the headers of an event stream (never cached, never
// buffered by a proxy) and returns the controller that flushes it.
func startSSE(w http.ResponseWriter) *http.ResponseController {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	return rc
}

// sessionSSE streams the session's output from offset until the session
// ends or the client goes away. Writes block on a slow client, which only
// slows this stream: the log keeps the bytes, or says what it dropped.
func (s *Server) sessionSSE(w http.ResponseWriter, r *http.Request, id string, offset uint64) {
	rc := startSSE(w)
	ctx := r.Context()
	for {
		// Read the end state before the log: output comes before the exit,
		// so a session seen ended here has all its bytes in the log.
		done := s.ended(id)
		data, start, gap, err := s.d.SessionLog.ReadFrom(id, offset, sseChunk)
		if err != nil {
			s.log.DebugContext(r.Context(), "rest: session output stream ends", "session_id", id, "err", err)
			return
		}
		if gap {
			if writeSSE(w, "gap", "", sseGap{From: offset, To: start, Reason: s.gapReason(id, offset), Lost: s.d.SessionLog.Lost(id)}) != nil {
				return
			}
			offset = start
		}
		if !done {
			// A character cut between two reads comes whole with the next.
			data = holdBackPartialRune(data)
		}
		if len(data) > 0 {
			frame := sseOutput{Offset: start, Data: string(data), Encoding: string(restapi.Utf8)}
			if !utf8.Valid(data) {
				frame.Data, frame.Encoding = base64.StdEncoding.EncodeToString(data), string(restapi.Base64)
			}
			offset = start + uint64(len(data))
			if writeSSE(w, "output", itoa(offset), frame) != nil {
				return
			}
		}
		if gap || len(data) > 0 {
			if rc.Flush() != nil {
				return
			}
			continue
		}
		if done {
			sess, _ := s.d.Sessions.Get(id)
			_ = writeSSE(w, "exited", "", sseExited{State: string(sess.State), ExitCode: sess.ExitCode, End: offset})
			_ = rc.Flush()
			return
		}
		if ctx.Err() != nil {
			return
		}
		before := s.d.SessionLog.End(id)
		s.waitOutput(ctx, id, offset, ssePing)
		if ctx.Err() != nil {
			return
		}
		if s.d.SessionLog.End(id) == before && !s.ended(id) {
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}
