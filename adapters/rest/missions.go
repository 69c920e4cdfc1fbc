package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/core/task"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

const maxHITLTextLen = 65536

// ListMissions lists the missions on record, oldest first, optionally in
// one state. Without a mission service there are none.
func (s *Server) ListMissions(ctx context.Context, req restapi.ListMissionsRequestObject) (restapi.ListMissionsResponseObject, error) {
	var state ports.MissionState
	if p := req.Params.State; p != nil {
		if !p.Valid() {
			return nil, badRequest("parameter state: unknown state %q (one of %s)", clip(string(*p)), strings.Join(missionStates(), ", "))
		}
		state = ports.MissionState(*p)
	}
	out := restapi.MissionList{Missions: []restapi.Mission{}}
	if s.d.Missions == nil {
		return restapi.ListMissions200JSONResponse(out), nil
	}
	var ms []ports.Mission
	for _, m := range s.d.Missions.Missions(state) {
		if (state == "" || m.State == state) && s.agentInScope(ctx, m.AgentID) {
			ms = append(ms, m)
		}
	}
	// Oldest first, whatever the use case does with equal creation times.
	ms, next, apiErr := page(ms, func(m ports.Mission) string { return timeKey(m.CreatedAt, m.ID) }, req.Params.Limit, req.Params.Cursor)
	if apiErr != nil {
		return nil, apiErr
	}
	for _, m := range ms {
		out.Missions = append(out.Missions, s.toMission(m))
	}
	out.NextCursor = next
	return restapi.ListMissions200JSONResponse(out), nil
}

func missionStates() []string {
	return []string{
		string(ports.MissionAssigned), string(ports.MissionRunning), string(ports.MissionHITLRequired),
		string(ports.MissionSuspended), string(ports.MissionCompleted), string(ports.MissionFailed), string(ports.MissionAborted),
	}
}

// GetMission returns one mission, archived or not.
func (s *Server) GetMission(_ context.Context, req restapi.GetMissionRequestObject) (restapi.GetMissionResponseObject, error) {
	subject := fmt.Sprintf("mission %q", clip(req.MissionId))
	if s.d.Missions == nil || utf8.RuneCountInString(req.MissionId) > maxMissionIDLen {
		return nil, missionNotFound(subject)
	}
	m, err := s.d.Missions.Mission(req.MissionId)
	switch {
	case err == nil:
		return restapi.GetMission200JSONResponse(s.toMission(m)), nil
	case errors.Is(err, ports.ErrMissionNotFound):
		return nil, missionNotFound(subject)
	case errors.Is(err, ports.ErrStoreUnavailable):
		// The archive could not be read: the mission may exist.
		return nil, newError(http.StatusServiceUnavailable, "store_unavailable", "%s: the mission store cannot be read now; retry later", subject)
	default:
		return nil, err
	}
}

func missionNotFound(subject string) *apiError {
	return newError(http.StatusNotFound, "mission_not_found", "%s: mission not found (GET /api/v1/missions lists the missions on record)", subject)
}

// ListHITL lists the open HITL requests, oldest first.
func (s *Server) ListHITL(ctx context.Context, req restapi.ListHITLRequestObject) (restapi.ListHITLResponseObject, error) {
	out := restapi.HITLList{Requests: []restapi.HITLRequest{}}
	if s.d.Missions != nil {
		for _, h := range inScope(ctx, s.d.Missions.OpenHITL(), func(h ports.OpenHITL) bool { return s.agentInScope(ctx, h.AgentID) }) {
			out.Requests = append(out.Requests, toHITL(h.HITLRequest, h.MissionID, h.AgentID, h.SessionID))
		}
	}
	if s.d.Tasks != nil {
		for _, h := range inScope(ctx, s.d.Tasks.OpenHITL(), func(h task.HITL) bool { return s.taskInScope(scopeOf(ctx), h.TaskID) }) {
			out.Requests = append(out.Requests, taskHITL(h))
		}
	}
	reqs, next, apiErr := page(out.Requests, func(h restapi.HITLRequest) string { return timeKey(h.CreatedAt, h.HitlId) }, req.Params.Limit, req.Params.Cursor)
	if apiErr != nil {
		return nil, apiErr
	}
	return restapi.ListHITL200JSONResponse(restapi.HITLList{Requests: reqs, NextCursor: next}), nil
}

// RespondHITL writes the answer to the waiting session.
func (s *Server) RespondHITL(ctx context.Context, req restapi.RespondHITLRequestObject) (restapi.RespondHITLResponseObject, error) {
	subject := fmt.Sprintf("HITL request %q", clip(req.HitlId))
	if req.Body == nil {
		return nil, badRequest("the request body is required")
	}
	if n := utf8.RuneCountInString(req.Body.Text); n > maxHITLTextLen {
		return nil, badRequest("field text: longer than %d characters", maxHITLTextLen)
	}
	if len(req.HitlId) > maxIDLen {
		return nil, hitlNotFound(subject)
	}
	if answered, apiErr, ok := s.answerTaskHITL(ctx, req, subject); ok {
		if apiErr != nil {
			return nil, apiErr
		}
		return answered, nil
	}
	if s.d.Missions == nil {
		return nil, hitlNotFound(subject)
	}
	text := req.Body.Text
	if d := req.Body.Decision; d != nil {
		// A mission's permission question answered with a decision: the
		// same words an answer over the executor stream uses.
		if *d != "allow" && *d != "deny" {
			return nil, badRequest("%s: decision must be allow or deny", subject)
		}
		text = strings.TrimSpace(string(*d) + " " + text)
	}
	m, err := s.d.Missions.RespondHITL(ctx, req.HitlId, text)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		switch {
		case errors.Is(err, ports.ErrHITLNotFound):
			return nil, hitlNotFound(subject)
		case errors.Is(err, ports.ErrHITLNotOpen):
			return nil, newError(http.StatusConflict, "hitl_not_open", "%s: already answered, or its mission has ended", subject)
		case errors.Is(err, ports.ErrMissionNotFound), errors.Is(err, ports.ErrSessionNotFound),
			errors.Is(err, ports.ErrCommandNotFound), errors.Is(err, ports.ErrCommandEnded):
			// The request outlived its session: it cannot be answered any more.
			return nil, newError(http.StatusConflict, "hitl_not_open", "%s: its session has ended", subject)
		case errors.Is(err, ports.ErrStoreUnavailable):
			return nil, newError(http.StatusServiceUnavailable, "store_unavailable", "%s: the mission store cannot persist now; retry later", subject)
		default:
			// Agent errors: not connected is 409 (retry once it reconnects),
			// gone and others are 502.
			return nil, portError(err, subject)
		}
	}
	s.log.InfoContext(ctx, "rest: HITL answered by operator", "hitl_id", req.HitlId, "mission_id", m.ID)
	state := restapi.MissionState(m.State)
	return restapi.RespondHITL200JSONResponse{HitlId: req.HitlId, MissionId: &m.ID, State: &state}, nil
}

func hitlNotFound(subject string) *apiError {
	return newError(http.StatusNotFound, "hitl_not_found", "%s: not found (GET /api/v1/hitl lists the open requests)", subject)
}

// KillSession kills a session: a mission's (which ends aborted) or any
// command this server can reach.
func (s *Server) KillSession(ctx context.Context, req restapi.KillSessionRequestObject) (restapi.KillSessionResponseObject, error) {
	id := req.SessionId
	subject := fmt.Sprintf("session %q", clip(id))
	if len(id) > maxIDLen {
		return nil, sessionNotFound(subject)
	}
	if s.d.Missions != nil {
		missionID, err := s.d.Missions.KillSession(ctx, id)
		switch {
		case err == nil:
			s.log.InfoContext(ctx, "rest: session killed by operator", "session_id", id, "mission_id", missionID)
			out := restapi.KillSession202JSONResponse{SessionId: id, Status: "kill_sent"}
			if missionID != "" {
				out.MissionId = ptr(missionID)
			}
			return out, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case !errors.Is(err, ports.ErrSessionNotFound) && !errors.Is(err, ports.ErrCommandNotFound):
			return nil, sessionError(err, subject)
		}
		// Not a mission's session.
	}
	if s.d.Sessions != nil {
		if sess, ok := s.d.Sessions.Get(id); ok {
			if sess.State.Ended() {
				return nil, sessionError(ports.ErrCommandEnded, subject)
			}
			if err := s.d.Sessions.Kill(ctx, id); err == nil {
				s.log.InfoContext(ctx, "rest: session killed by operator", "session_id", id)
				return restapi.KillSession202JSONResponse{SessionId: id, Status: "kill_sent"}, nil
			} else if ctx.Err() != nil {
				return nil, ctx.Err()
			} else if !errors.Is(err, session.ErrNotFound) {
				return nil, sessionError(err, subject)
			}
		}
	}
	// Maybe a command of this API.
	e, cmd, apiErr := s.lookup(id)
	if apiErr != nil {
		return nil, sessionNotFound(subject)
	}
	if ended(e, cmd) {
		return nil, sessionError(ports.ErrCommandEnded, subject)
	}
	if err := cmd.Kill(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, sessionError(err, subject)
	}
	s.log.InfoContext(ctx, "rest: session killed by operator", "session_id", id)
	return restapi.KillSession202JSONResponse{SessionId: id, Status: "kill_sent"}, nil
}

func sessionNotFound(subject string) *apiError {
	return newError(http.StatusNotFound, "session_not_found", "%s: session not found", subject)
}

// sessionError maps a kill failure onto the statuses killSession declares.
func sessionError(err error, subject string) *apiError {
	switch {
	case errors.Is(err, ports.ErrSessionNotFound), errors.Is(err, ports.ErrCommandNotFound):
		return sessionNotFound(subject)
	case errors.Is(err, ports.ErrCommandEnded), errors.Is(err, ports.ErrCommandLost):
		return newError(http.StatusConflict, "command_ended", "%s: has already ended", subject)
	case errors.Is(err, ports.ErrAgentNotFound):
		return newError(http.StatusBadGateway, "agent_gone", "%s: its agent is no longer known", subject)
	default:
		return portError(err, subject)
	}
}

// GetAIWGStatus shows the aiwg serve integration; never a token.
func (s *Server) GetAIWGStatus(context.Context, restapi.GetAIWGStatusRequestObject) (restapi.GetAIWGStatusResponseObject, error) {
	return s.aiwgStatus(http.StatusOK), nil
}

// ReconnectAIWG skips the backoff wait of the aiwg serve connection.
func (s *Server) ReconnectAIWG(context.Context, restapi.ReconnectAIWGRequestObject) (restapi.ReconnectAIWGResponseObject, error) {
	if x := s.d.Executor; x == nil || !x.Configured() {
		return nil, newError(http.StatusServiceUnavailable, "integration_disabled",
			"the aiwg integration is not configured on this server (AIWG_SERVE_ENDPOINT is unset)")
	}
	s.d.Executor.Reconnect()
	s.log.Info("rest: aiwg reconnect requested by operator")
	return s.aiwgStatus(http.StatusAccepted), nil
}

// aiwgStatusBody is AIWGStatus with every member present when the
// integration is configured (executor_register_error null when there is
// none); with it off the body is {"configured": false} alone.
type aiwgStatusBody struct {
	Configured            bool    `json:"configured"`
	Connected             bool    `json:"connected"`
	Endpoint              string  `json:"endpoint"`
	SandboxID             string  `json:"sandbox_id"`
	ExecutorID            string  `json:"executor_id"`
	ExecutorRegisterError *string `json:"executor_register_error"`
}

type aiwgStatusResponse struct {
	status int
	body   any
}

func (r aiwgStatusResponse) VisitGetAIWGStatusResponse(w http.ResponseWriter) error {
	return writeJSON(w, r.status, r.body)
}

func (r aiwgStatusResponse) VisitReconnectAIWGResponse(w http.ResponseWriter) error {
	return writeJSON(w, r.status, r.body)
}

func (s *Server) aiwgStatus(status int) aiwgStatusResponse {
	x := s.d.Executor
	if x == nil || !x.Configured() {
		return aiwgStatusResponse{status, restapi.AIWGStatus{Configured: false}}
	}
	st := x.Status()
	// Built field by field from ExecutorStatus, which holds no token.
	b := aiwgStatusBody{
		Configured: true,
		Connected:  st.Connected,
		Endpoint:   st.Endpoint,
		SandboxID:  st.SandboxID,
		ExecutorID: st.ExecutorID,
	}
	if st.ExecutorRegisterError != "" {
		b.ExecutorRegisterError = ptr(st.ExecutorRegisterError)
	}
	return aiwgStatusResponse{status, b}
}

// toMission renders a mission record; zero times and empty strings are left out.
func (s *Server) toMission(m ports.Mission) restapi.Mission {
	out := restapi.Mission{
		MissionId:      m.ID,
		State:          restapi.MissionState(m.State),
		Objective:      m.Objective,
		Completion:     nonEmpty(m.Completion),
		LongRunning:    ptr(m.LongRunning),
		AiwgSessionId:  nonEmpty(m.AIWGSessionID),
		AgentId:        nonEmpty(m.AgentID),
		PtySessionId:   nonEmpty(m.SessionID),
		AgentRuntime:   nonEmpty(m.AgentRuntime),
		CheckpointId:   nonEmpty(m.CheckpointID),
		Summary:        nonEmpty(m.Summary),
		Reason:         nonEmpty(m.Reason),
		Error:          nonEmpty(m.Error),
		LastEvent:      nonEmpty(string(m.LastEvent)),
		Iteration:      ptr(m.Iteration),
		EstimatedStart: timePtr(m.EstimatedStart),
		CreatedAt:      m.CreatedAt.UTC(),
		UpdatedAt:      m.UpdatedAt.UTC(),
		StartedAt:      timePtr(m.StartedAt),
		EndedAt:        timePtr(m.EndedAt),
	}
	if m.ExitCode != nil {
		out.ExitCode = ptr(*m.ExitCode)
	}
	if len(m.Timeline) > 0 {
		tl := make([]restapi.MissionTimelineEntry, 0, len(m.Timeline))
		for _, e := range m.Timeline {
			tl = append(tl, restapi.MissionTimelineEntry{Event: string(e.Event), At: e.At.UTC(), Note: nonEmpty(e.Note)})
		}
		out.Timeline = &tl
	}
	if m.HITL != nil {
		h := toHITL(*m.HITL, m.ID, m.AgentID, m.SessionID)
		out.Hitl = &h
	}
	if len(m.Metadata) > 0 {
		md, err := decodeMetadata(m.Metadata)
		if err != nil {
			s.log.Warn("rest: mission metadata is not a JSON object; left out", "mission_id", m.ID, "err", err)
		} else {
			out.Metadata = &md
		}
	}
	return out
}

// decodeMetadata decodes stored metadata with numbers kept as written
// (json.Number re-encodes verbatim), so 1e400 or 12345678901234567890
// come back unchanged.
func decodeMetadata(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var md map[string]any
	if err := dec.Decode(&md); err != nil {
		return nil, err
	}
	if md == nil {
		return nil, errors.New("metadata is null")
	}
	return md, nil
}

func toHITL(h ports.HITLRequest, missionID, agentID, sessionID string) restapi.HITLRequest {
	out := restapi.HITLRequest{
		HitlId:    h.ID,
		MissionId: nonEmpty(missionID),
		AgentId:   nonEmpty(agentID),
		SessionId: nonEmpty(sessionID),
		Prompt:    h.Prompt,
		Context:   h.Context,
		CreatedAt: h.CreatedAt.UTC(),
	}
	if p := h.Permission; p != nil {
		out.ToolName, out.ToolInput = &p.ToolName, &p.InputJSON
	}
	return out
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
