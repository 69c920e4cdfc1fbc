package rest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// apiError is an error answer: a status and the JSON body of openapi's Error.
// Handlers return it as their error ("return nil, err"); responseError
// writes it, for every operation alike. The contract tests check each status
// is one the operation declares.
type apiError struct {
	status int
	body   restapi.Error
	// retryAfter, when set, is sent as Retry-After (seconds).
	retryAfter int
}

func (e *apiError) Error() string { return e.body.Code + ": " + e.body.Error }

// newError is an error answer. It is also the one place a failed wake
// becomes 503 wake_failed, whichever operation's mapper it went through:
// work aimed at a hibernated environment that could not be woken (exec,
// files, sessions, forwards, an explicit wake …) is not the operation's own
// failure, and its environment is now failed with the reason.
func newError(status int, code, format string, args ...any) *apiError {
	for _, a := range args {
		if err, ok := a.(error); ok && errors.Is(err, ports.ErrWakeFailed) {
			status, code = http.StatusServiceUnavailable, codeWakeFailed
			break
		}
	}
	return &apiError{status: status, body: restapi.Error{Code: code, Error: fmt.Sprintf(format, args...)}}
}

// codeWakeFailed is ports.ErrWakeFailed's code.
const codeWakeFailed = "wake_failed"

func badRequest(format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, "invalid_request", format, args...)
}

func (e *apiError) write(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	w.WriteHeader(e.status)
	return json.NewEncoder(w).Encode(e.body)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	_ = newError(status, code, "%s", msg).write(w)
}

var (
	_ restapi.DispatchMissionResponseObject = dispatchAccepted{}
	_ restapi.GetAIWGStatusResponseObject   = aiwgStatusResponse{}
	_ restapi.ReconnectAIWGResponseObject   = aiwgStatusResponse{}
)

// portError maps an AgentLink error; subject names what it is about
// (`agent "a1"`, `command "c1"`).
func portError(err error, subject string) *apiError {
	switch {
	case errors.Is(err, ports.ErrAgentNotFound):
		return agentNotFound(subject)
	case errors.Is(err, ports.ErrAgentNotConnected):
		return newError(http.StatusConflict, "agent_not_connected", "%s: agent is not connected; retry once it has reconnected", subject)
	case errors.Is(err, ports.ErrCommandNotFound):
		return commandNotFound(subject)
	case errors.Is(err, ports.ErrCommandEnded):
		return newError(http.StatusConflict, "command_ended", "%s: the command has already ended", subject)
	case errors.Is(err, ports.ErrAgentHeld):
		return newError(http.StatusConflict, "agent_reserved", "%s: the agent is a warm pool's idle member, held for whoever takes it (create an environment of the pool's spec)", subject)
	case errors.Is(err, ports.ErrStdinBusy):
		return stdinBusy(subject)
	case errors.Is(err, ports.ErrStdinClosed):
		return newError(http.StatusConflict, "stdin_closed", "%s: stdin is closed (by eof, or by the process)", subject)
	case errors.Is(err, ports.ErrAgentGone):
		return newError(http.StatusBadGateway, "agent_gone", "%s: the agent disconnected while the command ran", subject)
	default:
		return newError(http.StatusBadGateway, "agent_error", "%s: %v", subject, err)
	}
}

// stdinBusy refuses input the command's queue cannot take now (429 with
// Retry-After): nothing of it was queued.
func stdinBusy(subject string) *apiError {
	e := newError(http.StatusTooManyRequests, "stdin_busy",
		"%s: the input queue is full (the process has not read what is queued); nothing was written, retry later", subject)
	e.retryAfter = 1
	return e
}

func agentNotFound(subject string) *apiError {
	return newError(http.StatusNotFound, "agent_not_found", "%s: agent not found (GET /api/v1/agents lists the known agents)", subject)
}

func commandNotFound(subject string) *apiError {
	return newError(http.StatusNotFound, "command_not_found",
		"%s: command not found (finished commands are forgotten %v after they end)", subject, RetainFinished)
}

// commandExpired answers a finished command whose result the server let go.
func commandExpired(subject string) *apiError {
	return newError(http.StatusNotFound, "command_expired",
		"%s: the command finished and its result expired (finished commands are kept at most %v, and at most the last %d of them holding at most %d MiB of output; the oldest go first)",
		subject, RetainFinished, RetainFinishedCount, RetainFinishedBytes>>20)
}

// requestError answers a body the generated decoder rejected. checkBody has
// vetted every body already, so this is a fallback that keeps errors JSON.
func (s *Server) requestError(w http.ResponseWriter, _ *http.Request, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body is larger than %d bytes", MaxBodyBytes))
		return
	}
	writeError(w, http.StatusBadRequest, "invalid_json", err.Error())
}

// responseError is the one place a handler's error becomes an answer: a
// download cut after its status went out is aborted; an *apiError (what
// the handlers return for every refusal) is written as is,
// a caller that went away gets nothing (there is no one to read it), and
// anything else is an internal error, logged and not shown.
func (s *Server) responseError(w http.ResponseWriter, r *http.Request, err error) {
	var broken *streamBroken
	if errors.As(err, &broken) {
		s.log.InfoContext(r.Context(), "rest: transfer cut short", "method", r.Method, "path", r.URL.Path, "err", broken.err)
		panic(http.ErrAbortHandler)
	}
	var ae *apiError
	if errors.As(err, &ae) {
		if werr := ae.write(w); werr != nil {
			s.log.DebugContext(r.Context(), "rest: error answer not written", "method", r.Method, "path", r.URL.Path, "err", werr)
		}
		return
	}
	if r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		s.log.DebugContext(r.Context(), "rest: caller went away", "method", r.Method, "path", r.URL.Path)
		return
	}
	if errors.Is(err, ports.ErrWakeFailed) {
		_ = newError(http.StatusServiceUnavailable, codeWakeFailed, "%v", err).write(w)
		return
	}
	s.log.ErrorContext(r.Context(), "rest: internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, http.StatusInternalServerError, "internal_error", "internal server error")
}

// paramError answers a path or query parameter that does not parse.
func (s *Server) paramError(w http.ResponseWriter, _ *http.Request, err error) {
	var bad *restapi.InvalidParamFormatError
	if errors.As(err, &bad) {
		msg := fmt.Sprintf("parameter %s: invalid value", bad.ParamName)
		switch bad.ParamName {
		case "stdout_from", "stderr_from", "wait_ms":
			msg = fmt.Sprintf("parameter %s: must be a non-negative integer", bad.ParamName)
		}
		writeError(w, http.StatusBadRequest, "invalid_request", msg)
		return
	}
	writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
}
