package rest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// dispatchRoute is the mux pattern of dispatchMission. It is the one /api
// route that aiwg serve calls, with the executor token instead of the
// operator token, and the one whose body may carry fields this server does
// not know (aiwg serve may add some).
const dispatchRoute = "POST /api/v1/sessions/{session_id}/dispatch"

const (
	maxMissionIDLen     = 256
	maxAIWGSessionIDLen = 256
)

// dispatchGate runs the checks of a dispatch that come before its body, in
// the order openapi.yaml gives: integration configured (503), executor
// registered (503), executor bearer token (401).
func (s *Server) dispatchGate(r *http.Request) (*http.Request, *apiError) {
	x := s.d.Executor
	if x == nil || !x.Configured() {
		return r, newError(http.StatusServiceUnavailable, "integration_disabled",
			"the aiwg integration is not configured on this server (AIWG_SERVE_ENDPOINT is unset)")
	}
	if s.d.Missions == nil {
		return r, newError(http.StatusServiceUnavailable, "integration_disabled",
			"the mission service is not running on this server")
	}
	if !x.Registered() {
		return r, newError(http.StatusServiceUnavailable, "executor_not_registered",
			"this executor has not completed its registration with aiwg serve yet; retry shortly")
	}
	tok, ok := bearer(r)
	if !ok || tok == "" {
		return r, dispatchUnauthorized()
	}
	if x.VerifyToken(tok) {
		return r, nil
	}
	// A named token whose role may dispatch (an executor's) does too; the
	// operator token does not, as before named tokens.
	if s.d.Tokens == nil {
		return r, dispatchUnauthorized()
	}
	t, ok := s.d.Tokens.Verify(tok, s.clock.Now())
	if !ok {
		return r, dispatchUnauthorized()
	}
	c := caller{Name: t.Name, Role: t.Role, TokenID: t.ID, Labels: t.Labels}
	noteCaller(r, c)
	if apiErr := s.permit(c, dispatchRoute); apiErr != nil {
		return r, apiErr
	}
	return r.WithContext(withCaller(r.Context(), c)), nil
}

func dispatchUnauthorized() *apiError {
	return newError(http.StatusUnauthorized, "unauthorized",
		"missing or wrong bearer token: dispatch takes 'Authorization: Bearer <token issued at executor registration>' or a named token of a role that may dispatch")
}

// dispatchKey carries the decoded dispatch from checkBody to DispatchMission.
type dispatchKey struct{}

// checkDispatchBody reads and validates a dispatch body. The decoded request
// goes to the handler through the context, and the generated decoder gets
// only the known fields re-encoded, so that it cannot trip over what this
// server accepts and it does not know (extra fields, metadata numbers beyond
// float64).
func checkDispatchBody(w http.ResponseWriter, r *http.Request, next http.Handler) {
	b, apiErr := readBody(r.Body)
	if apiErr != nil {
		_ = apiErr.write(w)
		return
	}
	req, known, apiErr := parseDispatch(b, r.PathValue("session_id"))
	if apiErr != nil {
		_ = apiErr.write(w)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), dispatchKey{}, req))
	r.Body = io.NopCloser(bytes.NewReader(known))
	next.ServeHTTP(w, r)
}

// readBody reads a whole body: 413 beyond MaxBodyBytes, 400 when empty.
func readBody(body io.Reader) ([]byte, *apiError) {
	b, err := io.ReadAll(body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, newError(http.StatusRequestEntityTooLarge, "body_too_large", "request body is larger than %d bytes", MaxBodyBytes)
		}
		return nil, badRequest("reading the request body: %v", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, newError(http.StatusBadRequest, "invalid_json", "the request body is empty; send a JSON object")
	}
	return b, nil
}

// parseDispatch decodes and validates a DispatchRequest body. Unknown
// members are accepted (at the top level and in executor_filter); known
// members must have their type, or be null where they are optional.
// It returns the request for the use case and the known fields as JSON for
// the generated decoder.
func parseDispatch(b []byte, sessionID string) (ports.DispatchRequest, []byte, *apiError) {
	var req ports.DispatchRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return req, nil, jsonSyntaxError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, nil, newError(http.StatusBadRequest, "invalid_json", "unexpected data after the JSON object")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return req, nil, newError(http.StatusBadRequest, "invalid_json", "the request body must be a JSON object, not %s", kindOf(v))
	}

	var apiErr *apiError
	if req.MissionID, apiErr = requiredString(obj, "mission_id", maxMissionIDLen); apiErr != nil {
		return req, nil, apiErr
	}
	if req.Objective, apiErr = requiredString(obj, "objective", 0); apiErr != nil {
		return req, nil, apiErr
	}
	completion, apiErr := optional[string](obj, "completion", "")
	if apiErr != nil {
		return req, nil, apiErr
	}
	if completion != nil {
		req.Completion = *completion
	}
	longRunning, apiErr := optional[bool](obj, "long_running", "")
	if apiErr != nil {
		return req, nil, apiErr
	}
	req.LongRunning = longRunning != nil && *longRunning
	filter, apiErr := optional[map[string]any](obj, "executor_filter", "")
	if apiErr != nil {
		return req, nil, apiErr
	}
	var known restapi.DispatchRequest
	if filter != nil {
		f := *filter
		execID, apiErr := optional[string](f, "executor_id", "executor_filter.")
		if apiErr != nil {
			return req, nil, apiErr
		}
		agentID, apiErr := optional[string](f, "agent_id", "executor_filter.")
		if apiErr != nil {
			return req, nil, apiErr
		}
		caps, apiErr := optional[[]any](f, "capabilities", "executor_filter.")
		if apiErr != nil {
			return req, nil, apiErr
		}
		known.ExecutorFilter = &struct {
			AgentId      *string   `json:"agent_id,omitempty"`
			Capabilities *[]string `json:"capabilities,omitempty"`
			ExecutorId   *string   `json:"executor_id,omitempty"`
		}{AgentId: agentID, ExecutorId: execID}
		if execID != nil {
			req.Filter.ExecutorID = *execID
		}
		if agentID != nil {
			req.Filter.AgentID = *agentID
		}
		if caps != nil {
			list := make([]string, 0, len(*caps))
			for i, c := range *caps {
				s, ok := c.(string)
				if !ok {
					return req, nil, badRequest("field executor_filter.capabilities[%d]: expected a string, got %s", i, kindOf(c))
				}
				list = append(list, s)
			}
			req.Filter.Capabilities = list
			known.ExecutorFilter.Capabilities = &list
		}
	}
	if _, apiErr := optional[map[string]any](obj, "metadata", ""); apiErr != nil {
		return req, nil, apiErr
	}
	// The metadata as sent, compacted: member order, numbers and escapes
	// are kept, so what aiwg serve sent is what it gets back.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return req, nil, newError(http.StatusBadRequest, "invalid_json", "malformed JSON: %v", err)
	}
	if m := fields["metadata"]; len(m) > 0 && !bytes.Equal(m, []byte("null")) {
		var buf bytes.Buffer
		if err := json.Compact(&buf, m); err != nil {
			return req, nil, badRequest("field metadata: %v", err)
		}
		req.Metadata = buf.Bytes()
	}

	if sessionID == "" {
		return req, nil, badRequest("parameter session_id: must not be empty")
	}
	if utf8.RuneCountInString(sessionID) > maxAIWGSessionIDLen {
		return req, nil, badRequest("parameter session_id: longer than %d characters", maxAIWGSessionIDLen)
	}
	req.AIWGSessionID = sessionID
	req.RequestHash = requestHash(v, sessionID)

	known.MissionId, known.Objective = req.MissionID, req.Objective
	known.Completion, known.LongRunning = completion, longRunning
	kb, err := json.Marshal(known)
	if err != nil {
		return req, nil, badRequest("%v", err)
	}
	return req, kb, nil
}

// requestHash identifies a dispatch: sha256 over the canonical JSON of the
// decoded body (object members sorted by name, numbers as written, no
// insignificant white space), a NUL byte, and the path's session id, in hex.
// The same logical body sent with other spacing or member order hashes the
// same; anything else (another value, an added member, null instead of
// absent, 1.0 instead of 1) is another body.
func requestHash(body any, sessionID string) string {
	canon, err := json.Marshal(body)
	if err != nil {
		// Cannot happen for a value the decoder produced; an unmatchable
		// hash keeps a repeat from being mistaken for the same request.
		canon = []byte(err.Error())
	}
	h := sha256.New()
	h.Write(canon)
	h.Write([]byte{0})
	h.Write([]byte(sessionID))
	return hex.EncodeToString(h.Sum(nil))
}

// requiredString reads a required, non-empty string member (maxLen in
// characters, 0 = unlimited) without NUL bytes.
func requiredString(obj map[string]any, name string, maxLen int) (string, *apiError) {
	v, ok := obj[name]
	if !ok || v == nil {
		return "", badRequest("field %s: required", name)
	}
	s, ok := v.(string)
	if !ok {
		return "", badRequest("field %s: expected a string, got %s", name, kindOf(v))
	}
	if s == "" {
		return "", badRequest("field %s: must not be empty", name)
	}
	if maxLen > 0 && utf8.RuneCountInString(s) > maxLen {
		return "", badRequest("field %s: longer than %d characters", name, maxLen)
	}
	if strings.ContainsRune(s, 0) {
		return "", badRequest("field %s: must not contain NUL bytes", name)
	}
	return s, nil
}

// optional reads an optional member that may be absent or null.
func optional[T any](obj map[string]any, name, prefix string) (*T, *apiError) {
	v, ok := obj[name]
	if !ok || v == nil {
		return nil, nil
	}
	t, ok := v.(T)
	if !ok {
		var zero T
		return nil, badRequest("field %s%s: expected %s, got %s", prefix, name, kindOf(zero), kindOf(v))
	}
	return &t, nil
}

// kindOf names the JSON kind of a decoded value (UseNumber decoding).
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// jsonSyntaxError explains why a body is not one JSON value.
func jsonSyntaxError(err error) *apiError {
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		return newError(http.StatusBadRequest, "invalid_json", "malformed JSON at byte %d: %v", syn.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newError(http.StatusBadRequest, "invalid_json", "malformed JSON: the body ends too early")
	default:
		return newError(http.StatusBadRequest, "invalid_json", "malformed JSON: %v", err)
	}
}

// dispatchAccepted is the 202 of a dispatch. The generated type would
// render estimated_start with nanoseconds; aiwg serve gets exactly
// milliseconds, like every other timestamp it receives.
type dispatchAccepted struct {
	MissionID      string `json:"mission_id"`
	ExecutorID     string `json:"executor_id"`
	Status         string `json:"status"`
	EstimatedStart string `json:"estimated_start"`
}

func (d dispatchAccepted) VisitDispatchMissionResponse(w http.ResponseWriter) error {
	return writeJSON(w, http.StatusAccepted, d)
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err := buf.WriteTo(w)
	return err
}

// DispatchMission accepts a mission from aiwg serve. The gate (503, 401) and
// the body (413, 400) were checked before; the use case decides the rest.
func (s *Server) DispatchMission(ctx context.Context, r restapi.DispatchMissionRequestObject) (restapi.DispatchMissionResponseObject, error) {
	req, ok := ctx.Value(dispatchKey{}).(ports.DispatchRequest)
	if !ok {
		// Not reached through checkBody: decode what the generated decoder got.
		b, err := json.Marshal(r.Body)
		if err != nil || r.Body == nil {
			return nil, badRequest("the request body is required")
		}
		var apiErr *apiError
		if req, _, apiErr = parseDispatch(b, r.SessionId); apiErr != nil {
			return nil, apiErr
		}
	}
	if s.d.Missions == nil || s.d.Executor == nil {
		return nil, newError(http.StatusServiceUnavailable, "integration_disabled", "the mission service is not running on this server")
	}
	m, err := s.d.Missions.Dispatch(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, dispatchError(err, req, s)
	}
	est := m.EstimatedStart
	if est.IsZero() {
		est = m.CreatedAt
	}
	s.log.InfoContext(ctx, "rest: mission dispatched", "mission_id", m.ID, "aiwg_session_id", req.AIWGSessionID, "agent", m.AgentID, "state", m.State)
	return dispatchAccepted{
		MissionID:  m.ID,
		ExecutorID: s.d.Executor.ExecutorID(),
		// The state at acceptance, also for a repeated dispatch of a
		// mission that has moved on since: the answer is the same.
		Status:         string(ports.MissionAssigned),
		EstimatedStart: ports.FormatTimestamp(est),
	}, nil
}

func dispatchError(err error, req ports.DispatchRequest, s *Server) *apiError {
	subject := fmt.Sprintf("mission %q", clip(req.MissionID))
	switch {
	case errors.Is(err, ports.ErrMissionConflict):
		return newError(http.StatusConflict, "mission_conflict", "%s: already dispatched with a different body", subject)
	case errors.Is(err, ports.ErrAgentNotConnected), errors.Is(err, ports.ErrAgentNotFound):
		return newError(http.StatusNotFound, "agent_not_connected",
			"%s: executor_filter.agent_id %q names no agent that is connected or asleep", subject, clip(req.Filter.AgentID))
	case errors.Is(err, ports.ErrNoAgent):
		return newError(http.StatusServiceUnavailable, "no_agent", "%s: no connected, ready agent matches the executor_filter; retry later", subject)
	case errors.Is(err, ports.ErrStoreUnavailable):
		return newError(http.StatusServiceUnavailable, "store_unavailable", "%s: the mission store cannot persist now; retry later", subject)
	case errors.Is(err, ports.ErrIntegrationDisabled):
		return newError(http.StatusServiceUnavailable, "integration_disabled", "the aiwg integration is not configured on this server")
	case errors.Is(err, ports.ErrExecutorUnregistered):
		return newError(http.StatusServiceUnavailable, "executor_not_registered", "this executor has not completed its registration with aiwg serve yet; retry shortly")
	default:
		s.log.Error("rest: dispatch failed", "mission_id", req.MissionID, "err", err)
		return newError(http.StatusServiceUnavailable, "internal_error", "%s: could not be accepted now; retry later", subject)
	}
}
