package resttest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Missions is an in-memory ports.Missions. Dispatch routes over an
// AgentDirectory (a Link): an agent_id hint must name an agent whose status
// is ready or busy, otherwise the least loaded ready agent that has every
// requested capability takes the mission. It starts nothing: tests move
// missions along with SetState and RaiseHITL.
type Missions struct {
	agents ports.AgentDirectory

	mu         sync.Mutex
	now        func() time.Time
	missions   map[string]*ports.Mission
	order      []string
	dispatches []ports.DispatchRequest
	answers    []HITLAnswer
	answered   map[string]string // hitl id → mission id
	kills      []string
	next       int

	dispatchErr error
	respondErr  error
	killErr     error
	missionErr  error
}

// HITLAnswer is an answer RespondHITL wrote.
type HITLAnswer struct {
	HITLID, MissionID, SessionID, Text string
}

// NewMissions returns an empty mission service routing over agents.
func NewMissions(agents ports.AgentDirectory) *Missions {
	return &Missions{
		agents:   agents,
		now:      time.Now,
		missions: map[string]*ports.Mission{},
		answered: map[string]string{},
	}
}

var _ ports.Missions = (*Missions)(nil)

// SetNow replaces the clock that stamps new missions.
func (m *Missions) SetNow(now func() time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = now
}

// SetDispatchError makes every Dispatch fail with err (nil: work again).
func (m *Missions) SetDispatchError(err error) { m.set(&m.dispatchErr, err) }

// SetRespondError makes every RespondHITL fail with err.
func (m *Missions) SetRespondError(err error) { m.set(&m.respondErr, err) }

// SetKillError makes every KillSession fail with err.
func (m *Missions) SetKillError(err error) { m.set(&m.killErr, err) }

// SetMissionError makes every Mission lookup fail with err.
func (m *Missions) SetMissionError(err error) { m.set(&m.missionErr, err) }

func (m *Missions) set(dst *error, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	*dst = err
}

// Dispatch implements ports.Missions.
func (m *Missions) Dispatch(_ context.Context, req ports.DispatchRequest) (ports.Mission, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	req.Metadata = slices.Clone(req.Metadata)
	req.Filter.Capabilities = slices.Clone(req.Filter.Capabilities)
	m.dispatches = append(m.dispatches, req)
	if m.dispatchErr != nil {
		return ports.Mission{}, m.dispatchErr
	}
	if old, ok := m.missions[req.MissionID]; ok {
		if old.RequestHash != req.RequestHash {
			return ports.Mission{}, ports.ErrMissionConflict
		}
		return old.Clone(), nil
	}
	agent, err := m.route(req.Filter)
	if err != nil {
		return ports.Mission{}, err
	}
	now := m.now()
	m.next++
	ms := &ports.Mission{
		ID:             req.MissionID,
		Objective:      req.Objective,
		Completion:     req.Completion,
		LongRunning:    req.LongRunning,
		RequestHash:    req.RequestHash,
		AIWGSessionID:  req.AIWGSessionID,
		Filter:         req.Filter,
		Metadata:       req.Metadata,
		State:          ports.MissionAssigned,
		AgentID:        agent.ID,
		SessionID:      fmt.Sprintf("sess-%04d", m.next),
		AgentRuntime:   string(agent.Runtime),
		EstimatedStart: now,
		CreatedAt:      now,
		UpdatedAt:      now,
		LastEvent:      "mission.assigned",
	}
	m.missions[ms.ID] = ms
	m.order = append(m.order, ms.ID)
	return ms.Clone(), nil
}

func (m *Missions) route(f ports.MissionFilter) (ports.AgentInfo, error) {
	if f.AgentID != "" {
		a, ok := m.agents.Agent(f.AgentID)
		if !ok || (a.Status != ports.AgentReady && a.Status != ports.AgentBusy) {
			return ports.AgentInfo{}, fmt.Errorf("agent %q: %w", f.AgentID, ports.ErrAgentNotConnected)
		}
		return a, nil
	}
	var best *ports.AgentInfo
	for _, a := range m.agents.Agents() {
		if a.Status != ports.AgentReady || !hasAll(a.Capabilities, f.Capabilities) {
			continue
		}
		if best == nil || a.RunningCommands < best.RunningCommands {
			best = &a
		}
	}
	if best == nil {
		return ports.AgentInfo{}, ports.ErrNoAgent
	}
	return *best, nil
}

func hasAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// Mission implements ports.Missions.
func (m *Missions) Mission(id string) (ports.Mission, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.missionErr != nil {
		return ports.Mission{}, m.missionErr
	}
	ms, ok := m.missions[id]
	if !ok {
		return ports.Mission{}, ports.ErrMissionNotFound
	}
	return ms.Clone(), nil
}

// Missions implements ports.Missions.
func (m *Missions) Missions(state ports.MissionState) []ports.Mission {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []ports.Mission
	for _, id := range m.order {
		if ms := m.missions[id]; state == "" || ms.State == state {
			out = append(out, ms.Clone())
		}
	}
	return out
}

// OpenHITL implements ports.Missions.
func (m *Missions) OpenHITL() []ports.OpenHITL {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []ports.OpenHITL
	for _, id := range m.order {
		ms := m.missions[id]
		if ms.State == ports.MissionHITLRequired && ms.HITL != nil {
			out = append(out, ports.OpenHITL{HITLRequest: *ms.HITL, MissionID: ms.ID, AgentID: ms.AgentID, SessionID: ms.SessionID})
		}
	}
	return out
}

// RespondHITL implements ports.Missions: it records the answer and sets
// the mission running.
func (m *Missions) RespondHITL(_ context.Context, hitlID, text string) (ports.Mission, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.respondErr != nil {
		return ports.Mission{}, m.respondErr
	}
	if _, ok := m.answered[hitlID]; ok {
		return ports.Mission{}, ports.ErrHITLNotOpen
	}
	for _, id := range m.order {
		ms := m.missions[id]
		if ms.HITL == nil || ms.HITL.ID != hitlID {
			continue
		}
		if ms.State != ports.MissionHITLRequired {
			return ports.Mission{}, ports.ErrHITLNotOpen
		}
		m.answers = append(m.answers, HITLAnswer{HITLID: hitlID, MissionID: ms.ID, SessionID: ms.SessionID, Text: text})
		m.answered[hitlID] = ms.ID
		ms.HITL = nil
		ms.State = ports.MissionRunning
		ms.UpdatedAt = m.now()
		ms.LastEvent = "mission.resumed"
		return ms.Clone(), nil
	}
	return ports.Mission{}, ports.ErrHITLNotFound
}

// KillSession implements ports.Missions for the sessions of its missions;
// any other session is ErrSessionNotFound.
func (m *Missions) KillSession(_ context.Context, sessionID string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.killErr != nil {
		return "", m.killErr
	}
	for _, id := range m.order {
		ms := m.missions[id]
		if ms.SessionID != sessionID {
			continue
		}
		if ms.State.Terminal() {
			return "", ports.ErrCommandEnded
		}
		now := m.now()
		ms.State, ms.Reason, ms.EndedAt, ms.UpdatedAt = ports.MissionAborted, "operator", now, now
		ms.LastEvent = "mission.aborted"
		m.kills = append(m.kills, sessionID)
		return ms.ID, nil
	}
	return "", ports.ErrSessionNotFound
}

// Put stores a mission as it is (insert or replace).
func (m *Missions) Put(ms ports.Mission) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.missions[ms.ID]; !ok {
		m.order = append(m.order, ms.ID)
	}
	c := ms.Clone()
	m.missions[ms.ID] = &c
}

// SetState moves a mission to state.
func (m *Missions) SetState(id string, state ports.MissionState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ms, ok := m.missions[id]; ok {
		ms.State = state
	}
}

// RaiseHITL makes a mission wait for a human with h.
func (m *Missions) RaiseHITL(missionID string, h ports.HITLRequest) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ms, ok := m.missions[missionID]; ok {
		ms.State = ports.MissionHITLRequired
		ms.HITL = &h
		ms.LastEvent = "mission.hitl_required"
	}
}

// Dispatches returns every dispatch request received, in order.
func (m *Missions) Dispatches() []ports.DispatchRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.dispatches)
}

// Answers returns every HITL answer written, in order.
func (m *Missions) Answers() []HITLAnswer {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.answers)
}

// Kills returns the sessions killed through KillSession, in order.
func (m *Missions) Kills() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.kills)
}
