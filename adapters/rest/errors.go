package rest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// apiError is an error answer: a status and the JSON body of openapi's Error.
// One type serves every operation, so the mapping of errors to statuses lives
// in one place; the contract tests check each status is one the operation
// declares.
type apiError struct {
	status int
	body   restapi.Error
}

func (e *apiError) Error() string { return e.body.Code + ": " + e.body.Error }

func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, body: restapi.Error{Code: code, Error: fmt.Sprintf(format, args...)}}
}

func badRequest(format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, "invalid_request", format, args...)
}

func (e *apiError) write(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.status)
	return json.NewEncoder(w).Encode(e.body)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	_ = newError(status, code, "%s", msg).write(w)
}

func (e *apiError) VisitListAgentsResponse(w http.ResponseWriter) error   { return e.write(w) }
func (e *apiError) VisitGetAgentResponse(w http.ResponseWriter) error     { return e.write(w) }
func (e *apiError) VisitStartCommandResponse(w http.ResponseWriter) error { return e.write(w) }
func (e *apiError) VisitExecCommandResponse(w http.ResponseWriter) error  { return e.write(w) }
func (e *apiError) VisitKillCommandResponse(w http.ResponseWriter) error  { return e.write(w) }
func (e *apiError) VisitGetCommandResponse(w http.ResponseWriter) error   { return e.write(w) }
func (e *apiError) VisitResizeCommandResponse(w http.ResponseWriter) error {
	return e.write(w)
}
func (e *apiError) VisitSignalCommandResponse(w http.ResponseWriter) error {
	return e.write(w)
}
func (e *apiError) VisitWriteCommandStdinResponse(w http.ResponseWriter) error {
	return e.write(w)
}
func (e *apiError) VisitDispatchMissionResponse(w http.ResponseWriter) error { return e.write(w) }
func (e *apiError) VisitKillSessionResponse(w http.ResponseWriter) error     { return e.write(w) }
func (e *apiError) VisitListMissionsResponse(w http.ResponseWriter) error    { return e.write(w) }
func (e *apiError) VisitGetMissionResponse(w http.ResponseWriter) error      { return e.write(w) }
func (e *apiError) VisitListHITLResponse(w http.ResponseWriter) error        { return e.write(w) }
func (e *apiError) VisitRespondHITLResponse(w http.ResponseWriter) error     { return e.write(w) }
func (e *apiError) VisitGetAIWGStatusResponse(w http.ResponseWriter) error   { return e.write(w) }
func (e *apiError) VisitReconnectAIWGResponse(w http.ResponseWriter) error   { return e.write(w) }

var (
	_ restapi.ListAgentsResponseObject        = (*apiError)(nil)
	_ restapi.GetAgentResponseObject          = (*apiError)(nil)
	_ restapi.StartCommandResponseObject      = (*apiError)(nil)
	_ restapi.ExecCommandResponseObject       = (*apiError)(nil)
	_ restapi.KillCommandResponseObject       = (*apiError)(nil)
	_ restapi.GetCommandResponseObject        = (*apiError)(nil)
	_ restapi.ResizeCommandResponseObject     = (*apiError)(nil)
	_ restapi.SignalCommandResponseObject     = (*apiError)(nil)
	_ restapi.WriteCommandStdinResponseObject = (*apiError)(nil)
	_ restapi.DispatchMissionResponseObject   = (*apiError)(nil)
	_ restapi.KillSessionResponseObject       = (*apiError)(nil)
	_ restapi.ListMissionsResponseObject      = (*apiError)(nil)
	_ restapi.GetMissionResponseObject        = (*apiError)(nil)
	_ restapi.ListHITLResponseObject          = (*apiError)(nil)
	_ restapi.RespondHITLResponseObject       = (*apiError)(nil)
	_ restapi.GetAIWGStatusResponseObject     = (*apiError)(nil)
	_ restapi.ReconnectAIWGResponseObject     = (*apiError)(nil)
	_ restapi.DispatchMissionResponseObject   = dispatchAccepted{}
	_ restapi.GetAIWGStatusResponseObject     = aiwgStatusResponse{}
	_ restapi.ReconnectAIWGResponseObject     = aiwgStatusResponse{}
)

// portError maps an AgentLink error; subject names what it is about
// (`agent "a1"`, `command "c1"`).
func portError(err error, subject string) *apiError {
	switch {
	case errors.Is(err, ports.ErrAgentNotFound):
		return newError(http.StatusNotFound, "agent_not_found", "%s: agent not found (GET /api/v1/agents lists the known agents)", subject)
	case errors.Is(err, ports.ErrAgentNotConnected):
		return newError(http.StatusConflict, "agent_not_connected", "%s: agent is not connected; retry once it has reconnected", subject)
	case errors.Is(err, ports.ErrCommandNotFound):
		return commandNotFound(subject)
	case errors.Is(err, ports.ErrCommandEnded):
		return newError(http.StatusConflict, "command_ended", "%s: the command has already ended", subject)
	case errors.Is(err, ports.ErrAgentGone):
		return newError(http.StatusBadGateway, "agent_gone", "%s: the agent disconnected while the command ran", subject)
	default:
		return newError(http.StatusBadGateway, "agent_error", "%s: %v", subject, err)
	}
}

func commandNotFound(subject string) *apiError {
	return newError(http.StatusNotFound, "command_not_found",
		"%s: command not found (finished commands are forgotten %v after they end)", subject, RetainFinished)
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

// responseError answers a handler error or a response that could not be
// written. A caller that went away gets nothing: there is no one to read it.
func (s *Server) responseError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		s.log.Debug("rest: caller went away", "method", r.Method, "path", r.URL.Path)
		return
	}
	s.log.Error("rest: internal error", "method", r.Method, "path", r.URL.Path, "err", err)
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
