package ports

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"time"
)

// MissionState is where a mission is in its lifecycle (the rules are in core/mission).
type MissionState string

const (
	MissionAssigned     MissionState = "assigned"
	MissionRunning      MissionState = "running"
	MissionHITLRequired MissionState = "hitl_required"
	MissionSuspended    MissionState = "suspended"
	MissionCompleted    MissionState = "completed"
	MissionFailed       MissionState = "failed"
	MissionAborted      MissionState = "aborted"
)

// Terminal reports whether no transition leaves s.
func (s MissionState) Terminal() bool {
	return s == MissionCompleted || s == MissionFailed || s == MissionAborted
}

// HITLRequest is a prompt waiting for a human.
type HITLRequest struct {
	ID        string    `json:"id"`
	Prompt    string    `json:"prompt"`
	Context   string    `json:"context"`
	CreatedAt time.Time `json:"created_at"`
	// Permission, when set, is claude asking to use a tool through the
	// permission prompt tool: the answer allows or denies it (not typed
	// into the terminal).
	Permission *PermissionRequest `json:"permission,omitempty"`
}

// Mission is the durable record of one mission (stored in missions.json).
type Mission struct {
	ID          string `json:"mission_id"`
	Objective   string `json:"objective"`
	Completion  string `json:"completion,omitempty"`
	LongRunning bool   `json:"long_running,omitempty"`
	// RequestHash identifies the dispatch body, for idempotent re-dispatch.
	RequestHash string `json:"request_hash"`
	// AIWGSessionID is the {id} of the dispatch path.
	AIWGSessionID string `json:"aiwg_session_id,omitempty"`
	// Filter is the dispatch's executor_filter.
	Filter MissionFilter `json:"executor_filter,omitzero"`
	// Metadata is the dispatch's metadata, kept verbatim (JSON).
	Metadata []byte       `json:"metadata,omitempty"`
	State    MissionState `json:"state"`
	AgentID  string       `json:"agent_id,omitempty"`
	// SessionID is the agent command running the objective (pty_session_id).
	SessionID    string       `json:"session_id,omitempty"`
	AgentRuntime string       `json:"agent_runtime,omitempty"`
	CheckpointID string       `json:"checkpoint_id,omitempty"`
	HITL         *HITLRequest `json:"hitl,omitempty"`
	ExitCode     *int         `json:"exit_code,omitempty"`
	Summary      string       `json:"summary,omitempty"`
	Reason       string       `json:"reason,omitempty"`
	Error        string       `json:"error,omitempty"`
	// Iteration counts mission.progress events.
	Iteration      int       `json:"iteration,omitempty"`
	LastProgressAt time.Time `json:"last_progress_at,omitzero"`
	EstimatedStart time.Time `json:"estimated_start"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	StartedAt      time.Time `json:"started_at,omitzero"`
	EndedAt        time.Time `json:"ended_at,omitzero"`
	// LastEvent is the type of the last event emitted for the mission, with
	// its time and data: stored with the state, so an event lost in a crash
	// between storing the state and queueing the event can be queued again.
	LastEvent     EventType      `json:"last_event,omitempty"`
	LastEventAt   time.Time      `json:"last_event_at,omitzero"`
	LastEventData map[string]any `json:"last_event_data,omitempty"`
	// Timeline is the mission's events but progress, oldest first, at most
	// MaxTimeline (the oldest dropped): what an operator reads of its life.
	Timeline []TimelineEntry `json:"timeline,omitempty"`
}

// Clone copies m with everything it refers to, so that a store's record and
// what its callers hold never change each other.
func (m Mission) Clone() Mission {
	m.Filter.Capabilities = slices.Clone(m.Filter.Capabilities)
	m.Metadata = bytes.Clone(m.Metadata)
	if m.HITL != nil {
		h := *m.HITL
		if h.Permission != nil {
			p := *h.Permission
			h.Permission = &p
		}
		m.HITL = &h
	}
	if m.ExitCode != nil {
		c := *m.ExitCode
		m.ExitCode = &c
	}
	if m.LastEventData != nil {
		m.LastEventData = cloneJSON(m.LastEventData).(map[string]any)
	}
	m.Timeline = slices.Clone(m.Timeline)
	return m
}

// cloneJSON deep-copies the maps and slices of decoded JSON.
func cloneJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := maps.Clone(v)
		for k, e := range out {
			out[k] = cloneJSON(e)
		}
		return out
	case []any:
		out := slices.Clone(v)
		for i, e := range out {
			out[i] = cloneJSON(e)
		}
		return out
	}
	return v
}

// TimelineEntry is one event of a mission's timeline.
type TimelineEntry struct {
	Event EventType `json:"event"`
	At    time.Time `json:"at"`
	// Note is the event's reason, prompt or state, when it has one.
	Note string `json:"note,omitempty"`
}

// MaxTimeline bounds a mission's timeline.
const MaxTimeline = 32

// MissionFilter is a dispatch's executor_filter.
type MissionFilter struct {
	ExecutorID   string   `json:"executor_id,omitempty"`
	Capabilities []string `json:"capabilities,omitempty"`
	AgentID      string   `json:"agent_id,omitempty"`
}

// ErrStoreUnavailable is returned by a store that cannot persist.
var ErrStoreUnavailable = errors.New("mission store unavailable")

// MissionStore persists mission records durably.
type MissionStore interface {
	// Load returns every mission on record that is not archived.
	Load() ([]Mission, error)
	// Put stores the missions (insert or replace by ID) and returns once
	// they are durable on disk. Concurrent Puts may share one disk write.
	Put(ctx context.Context, missions ...Mission) error
	// Archived finds a mission moved to the archive by retention, so a
	// re-dispatch of an old mission_id is still recognised.
	Archived(id string) (Mission, bool, error)
	Close() error
}

// EventType names an event of the executor stream.
type EventType string

// Event types of the executor stream, both ways.
const (
	EventAssigned     EventType = "mission.assigned"
	EventStarted      EventType = "mission.started"
	EventProgress     EventType = "mission.progress"
	EventHITLRequired EventType = "mission.hitl_required"
	EventResumed      EventType = "mission.resumed"
	EventSuspended    EventType = "mission.suspended"
	EventReconnected  EventType = "mission.reconnected"
	EventCompleted    EventType = "mission.completed"
	EventFailed       EventType = "mission.failed"
	EventAborted      EventType = "mission.aborted"
	EventResync       EventType = "executor.resync"
	// EventHITLResponded is the one aiwg serve sends: the answer to a HITL request.
	EventHITLResponded EventType = "mission.hitl_responded"
)

// Event is one event of the executor stream.
type Event struct {
	// Seq orders events; assigned by the outbox.
	Seq       uint64         `json:"seq"`
	Type      EventType      `json:"event"`
	MissionID string         `json:"mission_id,omitempty"`
	TS        time.Time      `json:"ts"`
	Data      map[string]any `json:"data"`
}

// EventOutbox keeps emitted events until they are delivered, across
// restarts: at-least-once, in order.
type EventOutbox interface {
	// Append durably records events in order, assigning their Seq.
	Append(ctx context.Context, events ...Event) ([]Event, error)
	// Pending returns up to max undelivered events with Seq > after, in order.
	// It may offer events whose Append has not returned yet, while their
	// write is flushed: the caller of Append must hold each event durably
	// elsewhere first (the mission service keeps it as its record's last
	// event and queues it again at start if a crash took it).
	Pending(after uint64, max int) ([]Event, error)
	// Ack records that every event up to seq was delivered.
	Ack(seq uint64) error
	// Acked is the highest acknowledged Seq.
	Acked() uint64
	// Notify is signalled (non-blocking, capacity 1) after each Append.
	Notify() <-chan struct{}
	Close() error
}

// DispatchRequest is an authenticated, decoded dispatch from aiwg serve.
type DispatchRequest struct {
	AIWGSessionID string
	MissionID     string
	Objective     string
	Completion    string
	LongRunning   bool
	Filter        MissionFilter
	// Metadata is the request's metadata object, verbatim JSON (nil if absent).
	Metadata []byte
	// RequestHash identifies the request body (canonical JSON + path id):
	// the same mission_id with another hash is a conflict.
	RequestHash string
}

// OpenHITL is an unanswered HITL request and where it waits.
type OpenHITL struct {
	HITLRequest
	MissionID string
	AgentID   string
	SessionID string
}

// Mission use-case errors, mapped to REST statuses by the REST adapter.
var (
	ErrMissionConflict      = errors.New("mission_id already dispatched with a different body")
	ErrNoAgent              = errors.New("no connected agent can take the mission")
	ErrMissionNotFound      = errors.New("mission not found")
	ErrHITLNotFound         = errors.New("HITL request not found")
	ErrHITLNotOpen          = errors.New("HITL request already answered or its mission ended")
	ErrSessionNotFound      = errors.New("session not found")
	ErrIntegrationDisabled  = errors.New("aiwg integration not configured (AIWG_SERVE_ENDPOINT unset)")
	ErrExecutorUnregistered = errors.New("executor not registered with aiwg serve yet")
)

// Missions is the mission use case, as the REST adapter drives it.
type Missions interface {
	// Dispatch accepts a mission (or returns the existing one for a repeated
	// identical dispatch) once it is durably stored; the session starts after.
	// Errors: ErrMissionConflict, ErrAgentNotConnected (the named agent),
	// ErrNoAgent, ErrStoreUnavailable.
	Dispatch(ctx context.Context, req DispatchRequest) (Mission, error)
	// Mission finds a mission, archived or not.
	Mission(id string) (Mission, error)
	// Missions lists live missions oldest first; state "" means all.
	Missions(state MissionState) []Mission
	OpenHITL() []OpenHITL
	// RespondHITL writes text + "\n" to the waiting session and resumes the mission.
	RespondHITL(ctx context.Context, hitlID, text string) (Mission, error)
	// KillSession kills a session; a mission in it ends as aborted. It
	// returns the mission id ("" if the session runs no mission).
	KillSession(ctx context.Context, sessionID string) (missionID string, err error)
}
