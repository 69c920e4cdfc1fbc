package rest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/agentic-sandbox/agentic-sandbox/core/claudefeed"
	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Sessions is what the REST adapter needs of the session use case
// (core/session.Service implements it).
type Sessions interface {
	// Create starts a session on its agent in a PTY of cols×rows (0: 80×24).
	Create(ctx context.Context, spec session.Spec, cols, rows uint16) (session.Session, error)
	// List returns the sessions of an agent ("" for all), oldest first.
	List(agentID string) []session.Session
	Get(id string) (session.Session, bool)
	// Exited is closed when the session ends (nil for an unknown session).
	Exited(id string) <-chan struct{}
	// Activity returns the feed of a headless session after Seq after; ok
	// is false for a session that is not headless.
	Activity(id string, after int) (events []claudefeed.Event, summary claudefeed.Summary, dropped int, ok bool)
	// Kill ends a live session (session.ErrNotFound for one without a process).
	Kill(ctx context.Context, id string) error
	// Viewers lists who watches a session now, with their roles.
	Viewers(id string) []session.Viewer
}

var ()

func sessionNotFoundErr(id string) *apiError {
	return newError(http.StatusNotFound, "session_not_found", "session %q not found (GET /api/v1/sessions lists them)", clip(id))
}

// session returns a known session, or the 404.
func (s *Server) session(id string) (session.Session, *apiError) {
	if s.d.Sessions == nil || len(id) > maxIDLen {
		return session.Session{}, sessionNotFoundErr(id)
	}
	sess, ok := s.d.Sessions.Get(id)
	if !ok {
		return session.Session{}, sessionNotFoundErr(id)
	}
	return sess, nil
}

func (s *Server) toSession(x session.Session) restapi.Session {
	out := restapi.Session{
		SessionId: x.ID, AgentId: x.AgentID, Name: x.Name, Type: restapi.SessionType(x.Type),
		State: restapi.SessionState(x.State), Command: x.Command, Args: x.Args, CreatedAt: x.CreatedAt.UTC(),
		ExitCode: x.ExitCode,
	}
	if out.Args == nil {
		out.Args = []string{}
	}
	if x.Cwd != "" {
		out.Cwd = ptr(x.Cwd)
	}
	if x.Reason != "" {
		out.Reason = ptr(x.Reason)
	}
	if x.Adopted {
		out.Adopted = ptr(true)
	}
	if !x.StartedAt.IsZero() {
		out.StartedAt = ptr(x.StartedAt.UTC())
	}
	if !x.EndedAt.IsZero() {
		out.EndedAt = ptr(x.EndedAt.UTC())
	}
	if vs := s.d.Sessions.Viewers(x.ID); len(vs) > 0 {
		list := make([]restapi.SessionViewer, 0, len(vs))
		for _, v := range vs {
			list = append(list, restapi.SessionViewer{ViewerId: v.ID, Role: restapi.SessionViewerRole(v.Role)})
		}
		out.Viewers = &list
	}
	return out
}

func (s *Server) sessionList(ctx context.Context, agentID string, state *restapi.SessionState) restapi.SessionList {
	out := restapi.SessionList{Sessions: []restapi.Session{}}
	if s.d.Sessions == nil {
		return out
	}
	for _, x := range s.d.Sessions.List(agentID) {
		if state != nil && string(x.State) != string(*state) || !s.agentInScope(ctx, x.AgentID) {
			continue
		}
		out.Sessions = append(out.Sessions, s.toSession(x))
	}
	return out
}

// ListSessions lists the sessions of every agent, or of one.
func (s *Server) ListSessions(ctx context.Context, req restapi.ListSessionsRequestObject) (restapi.ListSessionsResponseObject, error) {
	agentID := ""
	if req.Params.AgentId != nil {
		agentID = *req.Params.AgentId
		if agentID == "" || len(agentID) > maxIDLen {
			return nil, badRequest("parameter agent_id: 1-%d characters", maxIDLen)
		}
	}
	if st := req.Params.State; st != nil && !session.State(*st).Valid() {
		return nil, badRequest("parameter state: one of starting, running, exited, killed, lost")
	}
	list := s.sessionList(ctx, agentID, req.Params.State)
	sessions, next, apiErr := page(list.Sessions, func(x restapi.Session) string { return timeKey(x.CreatedAt, x.SessionId) }, req.Params.Limit, req.Params.Cursor)
	if apiErr != nil {
		return nil, apiErr
	}
	return restapi.ListSessions200JSONResponse(restapi.SessionList{Sessions: sessions, NextCursor: next}), nil
}

// ListAgentSessions lists the sessions of one agent.
func (s *Server) ListAgentSessions(ctx context.Context, req restapi.ListAgentSessionsRequestObject) (restapi.ListAgentSessionsResponseObject, error) {
	return restapi.ListAgentSessions200JSONResponse(s.sessionList(ctx, req.AgentId, nil)), nil
}

// CreateSession starts a session on an agent.
func (s *Server) CreateSession(ctx context.Context, req restapi.CreateSessionRequestObject) (restapi.CreateSessionResponseObject, error) {
	subject := fmt.Sprintf("agent %q", clip(req.AgentId))
	if s.d.Sessions == nil {
		return nil, newError(http.StatusNotFound, "agent_not_found", "%s: sessions are not enabled on this server", subject)
	}
	b := req.Body
	if b == nil {
		return nil, badRequest("a JSON body is required")
	}
	spec := session.Spec{AgentID: req.AgentId, Command: b.Command, Type: ports.SessionBackground}
	if b.Type != nil {
		spec.Type = ports.SessionType(*b.Type)
	}
	if !spec.Type.Valid() {
		return nil, badRequest("field type: one of interactive, headless, background")
	}
	if b.Name != nil {
		spec.Name = *b.Name
		if err := session.ValidName(spec.Name); err != nil {
			return nil, badRequest("field name: %v", err)
		}
	}
	if spec.Command == "" && spec.Type != ports.SessionInteractive {
		// Only a terminal has a default: the agent's shell.
		return nil, badRequest("field command: required for a %s session (only an interactive session without one runs the agent's shell)", spec.Type)
	}
	spec.Args, spec.Cwd, spec.Env = deref(b.Args), deref(b.Cwd), deref(b.Env)
	spec.PTY = b.Pty == nil || *b.Pty
	var cols, rows uint16
	for _, d := range []struct {
		name string
		v    *int
		dst  *uint16
	}{{"cols", b.Cols, &cols}, {"rows", b.Rows, &rows}} {
		if d.v == nil {
			continue
		}
		if *d.v < 1 || *d.v > 1000 {
			return nil, badRequest("field %s: between 1 and 1000", d.name)
		}
		*d.dst = uint16(*d.v)
	}
	sess, err := s.d.Sessions.Create(ctx, spec, cols, rows)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, createSessionError(err, subject)
	}
	s.log.InfoContext(ctx, "rest: session created", "session_id", sess.ID, "agent_id", sess.AgentID, "type", sess.Type, "name", sess.Name)
	return restapi.CreateSession201JSONResponse(s.toSession(sess)), nil
}

func createSessionError(err error, subject string) *apiError {
	switch {
	case errors.Is(err, session.ErrNameTaken):
		return newError(http.StatusConflict, "session_name_taken", "%s: %v", subject, err)
	case errors.Is(err, session.ErrQuota):
		return newError(http.StatusTooManyRequests, "too_many_sessions", "%s: %v", subject, err)
	case errors.Is(err, session.ErrInvalidName), errors.Is(err, session.ErrInvalidType), errors.Is(err, session.ErrInvalidSpec):
		return badRequest("%v", err)
	default:
		return portError(err, subject)
	}
}

// GetSession shows one session.
func (s *Server) GetSession(_ context.Context, req restapi.GetSessionRequestObject) (restapi.GetSessionResponseObject, error) {
	sess, apiErr := s.session(req.SessionId)
	if apiErr != nil {
		return nil, apiErr
	}
	return restapi.GetSession200JSONResponse(s.toSession(sess)), nil
}

// GetSessionActivity returns the activity feed of a headless session.
func (s *Server) GetSessionActivity(_ context.Context, req restapi.GetSessionActivityRequestObject) (restapi.GetSessionActivityResponseObject, error) {
	sess, apiErr := s.session(req.SessionId)
	if apiErr != nil {
		return nil, apiErr
	}
	after := 0
	if req.Params.After != nil {
		if after = *req.Params.After; after < 0 {
			return nil, badRequest("parameter after: must be a non-negative integer")
		}
	}
	events, sum, dropped, ok := s.d.Sessions.Activity(sess.ID, after)
	if !ok {
		return nil, newError(http.StatusConflict, "not_headless", "session %q is %s, not headless: only headless sessions have an activity feed", clip(sess.ID), sess.Type)
	}
	out := restapi.GetSessionActivity200JSONResponse{Events: make([]restapi.ActivityEvent, 0, len(events)), Dropped: dropped}
	for _, e := range events {
		out.Events = append(out.Events, toActivityEvent(e))
	}
	out.Summary = restapi.ActivitySummary{
		Turns: sum.Turns, ToolCalls: sum.ToolCalls, ToolsUsed: sum.ToolsUsed, Done: sum.Done, Success: sum.Success,
		CostUsd: sum.CostUSD, DurationMs: sum.DurationMS, LastText: optString(sum.LastText), Result: optString(sum.Result),
	}
	if f := finite(sum.CostUSD); f == nil {
		out.Summary.CostUsd = 0
	}
	if out.Summary.ToolsUsed == nil {
		out.Summary.ToolsUsed = map[string]int{}
	}
	return out, nil
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optInt[T int | int64](v T) *T {
	if v == 0 {
		return nil
	}
	return &v
}

func optTrue(b bool) *bool {
	if !b {
		return nil
	}
	return &b
}

func toActivityEvent(e claudefeed.Event) restapi.ActivityEvent {
	out := restapi.ActivityEvent{
		Seq: e.Seq, Kind: restapi.ActivityEventKind(e.Kind),
		SessionId: optString(e.SessionID), Model: optString(e.Model), ParentToolUseId: optString(e.ParentToolUseID),
		Text: optString(e.Text), Truncated: optTrue(e.Truncated), ToolName: optString(e.ToolName),
		ToolUseId: optString(e.ToolUseID), IsError: optTrue(e.IsError), Cwd: optString(e.CWD),
		Subtype: optString(e.Subtype), NumTurns: optInt(e.NumTurns), DurationMs: optInt(e.DurationMS),
		DurationApiMs: optInt(e.DurationAPIMS), Result: optString(e.Result),
	}
	if len(e.ToolInput) > 0 && json.Valid(e.ToolInput) {
		out.ToolInput = json.RawMessage(e.ToolInput)
	}
	if len(e.Tools) > 0 {
		out.Tools = ptr(append([]string(nil), e.Tools...))
	}
	if e.Kind == claudefeed.KindResult || e.CostUSD != 0 {
		out.CostUsd = finite(e.CostUSD)
	}
	return out
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
