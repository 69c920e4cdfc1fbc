// Package mission is the mission lifecycle of the AIWG executor contract:
// the states and the one place that decides each transition, the event each
// transition emits, dispatch routing and the resync rules. It is pure: time
// and ids come in as arguments.
package mission

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// ProtocolVersion is the executor contract version spoken here.
const ProtocolVersion = "1.0.0"

// ProgressInterval is the least time between two mission.progress events of a mission.
const ProgressInterval = 5 * time.Second

// Failure reasons (snake_case, in mission.failed data).
const (
	ReasonNonZeroExit     = "non_zero_exit"
	ReasonSessionStart    = "session_start_failed"
	ReasonWakeFailed      = "wake_failed" // the agent's hibernated environment could not be woken
	ReasonSessionLost     = "session_lost"
	ReasonTimedOut        = "timed_out"
	ReasonNotStarted      = "not_started_before_restart"
	ReasonShutdown        = "mgmt_server_shutdown"
	AbortedByOperator     = "operator"
	ResumedFromHITL       = "hitl_required"
	ResumedFromSuspended  = "suspended"
	progressPhase         = "execution"
	completedStateWording = "done"
)

// ErrIllegalTransition is returned for a transition the state machine forbids.
var ErrIllegalTransition = errors.New("illegal mission transition")

// transitions lists every allowed move; everything else is illegal.
var transitions = map[ports.MissionState][]ports.MissionState{
	ports.MissionAssigned:     {ports.MissionRunning, ports.MissionFailed, ports.MissionAborted, ports.MissionSuspended},
	ports.MissionRunning:      {ports.MissionHITLRequired, ports.MissionSuspended, ports.MissionCompleted, ports.MissionFailed, ports.MissionAborted},
	ports.MissionHITLRequired: {ports.MissionRunning, ports.MissionSuspended, ports.MissionCompleted, ports.MissionFailed, ports.MissionAborted},
	ports.MissionSuspended:    {ports.MissionRunning, ports.MissionCompleted, ports.MissionFailed, ports.MissionAborted},
}

// CanTransition reports whether from → to is allowed.
func CanTransition(from, to ports.MissionState) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

func move(m *ports.Mission, to ports.MissionState, now time.Time) error {
	if !CanTransition(m.State, to) {
		return fmt.Errorf("%w: %s → %s (mission %s)", ErrIllegalTransition, m.State, to, m.ID)
	}
	m.State = to
	m.UpdatedAt = now
	if to.Terminal() {
		m.EndedAt = now
		m.HITL = nil
	}
	return nil
}

func event(m *ports.Mission, typ ports.EventType, now time.Time, data map[string]any) ports.Event {
	m.LastEvent, m.LastEventAt, m.LastEventData = typ, now, data
	if typ != ports.EventProgress {
		note := ""
		for _, k := range []string{"reason", "prompt", "resumed_from", "state"} {
			if v, ok := data[k].(string); ok && v != "" {
				note = v
				break
			}
		}
		// A fresh slice: a record handed out must not change under its reader.
		tl := append(make([]ports.TimelineEntry, 0, len(m.Timeline)+1), m.Timeline...)
		tl = append(tl, ports.TimelineEntry{Event: typ, At: now, Note: note})
		if len(tl) > ports.MaxTimeline {
			tl = tl[len(tl)-ports.MaxTimeline:]
		}
		m.Timeline = tl
	}
	return ports.Event{Type: typ, MissionID: m.ID, TS: now, Data: data}
}

// LastEventOf rebuilds the last event emitted for m from its record.
func LastEventOf(m ports.Mission) (ports.Event, bool) {
	if m.LastEvent == "" || m.LastEventAt.IsZero() {
		return ports.Event{}, false // a record from before events were kept with the state
	}
	return ports.Event{Type: m.LastEvent, MissionID: m.ID, TS: m.LastEventAt, Data: m.LastEventData}, true
}

// Assign creates the mission for an accepted dispatch routed to agentID.
func Assign(d ports.DispatchRequest, agentID string, now, estimatedStart time.Time) (ports.Mission, ports.Event) {
	m := ports.Mission{
		ID:             d.MissionID,
		AIWGSessionID:  d.AIWGSessionID,
		Objective:      d.Objective,
		Completion:     d.Completion,
		LongRunning:    d.LongRunning,
		Filter:         d.Filter,
		Metadata:       d.Metadata,
		RequestHash:    d.RequestHash,
		State:          ports.MissionAssigned,
		AgentID:        agentID,
		EstimatedStart: estimatedStart,
		CreatedAt:      now,
		UpdatedAt:      now,
	}
	ev := event(&m, ports.EventAssigned, now, map[string]any{"state": string(ports.MissionAssigned), "estimated_start": ports.FormatTimestamp(estimatedStart)})
	return m, ev
}

// Start records that the objective's process runs on the agent.
func Start(m ports.Mission, agentRuntime, sessionID string, now time.Time) (ports.Mission, ports.Event, error) {
	if m.State != ports.MissionAssigned {
		return m, ports.Event{}, fmt.Errorf("%w: start of mission %s in state %s", ErrIllegalTransition, m.ID, m.State)
	}
	if err := move(&m, ports.MissionRunning, now); err != nil {
		return m, ports.Event{}, err
	}
	m.AgentRuntime = agentRuntime
	m.SessionID = sessionID
	m.StartedAt = now
	return m, event(&m, ports.EventStarted, now, map[string]any{"state": string(ports.MissionRunning), "agent_runtime": agentRuntime, "pty_session_id": sessionID}), nil
}

// Progress emits mission.progress for new output, at most once per
// ProgressInterval, only while running. ok is false when nothing is due.
func Progress(m ports.Mission, lastLine, summary string, now time.Time) (ports.Mission, ports.Event, bool) {
	if m.State != ports.MissionRunning || (!m.LastProgressAt.IsZero() && now.Sub(m.LastProgressAt) < ProgressInterval) {
		return m, ports.Event{}, false
	}
	m.Iteration++
	m.LastProgressAt = now
	m.Summary = summary
	m.UpdatedAt = now
	return m, event(&m, ports.EventProgress, now, map[string]any{"phase": progressPhase, "summary": lastLine, "iteration": m.Iteration}), true
}

// RequireHITL records that the session waits for a human.
func RequireHITL(m ports.Mission, req ports.HITLRequest, now time.Time) (ports.Mission, ports.Event, error) {
	if err := move(&m, ports.MissionHITLRequired, now); err != nil {
		return m, ports.Event{}, err
	}
	req.CreatedAt = now
	m.HITL = &req
	return m, hitlEvent(&m, now), nil
}

func hitlEvent(m *ports.Mission, now time.Time) ports.Event {
	// Exactly the contract's fields, a permission question too: its prompt
	// names the tool and how to answer, its context is the tool's input.
	return event(m, ports.EventHITLRequired, now, map[string]any{"hitl_id": m.HITL.ID, "prompt": m.HITL.Prompt, "context": m.HITL.Context})
}

// PermissionAnswer reads an answer to a permission question: allow when it
// starts with allow, yes, y, approve(d) or ok; anything else denies. What
// follows the first word (after ':' or space) is the message for claude.
func PermissionAnswer(text string) (allow bool, message string) {
	t := strings.TrimSpace(text)
	word, rest, _ := strings.Cut(t, " ")
	word = strings.TrimRight(strings.ToLower(word), ":.,!")
	switch word {
	case "allow", "allowed", "yes", "y", "approve", "approved", "ok":
		return true, strings.TrimSpace(rest)
	case "deny", "denied", "no", "n", "reject":
		return false, strings.TrimSpace(rest)
	}
	return false, t
}

// AnswerHITL records that the answer to hitlID was written to the session.
func AnswerHITL(m ports.Mission, hitlID string, now time.Time) (ports.Mission, ports.Event, error) {
	if m.State != ports.MissionHITLRequired || m.HITL == nil || m.HITL.ID != hitlID {
		return m, ports.Event{}, fmt.Errorf("%w: mission %s has no open HITL request %s", ErrIllegalTransition, m.ID, hitlID)
	}
	if err := move(&m, ports.MissionRunning, now); err != nil {
		return m, ports.Event{}, err
	}
	m.HITL = nil
	return m, event(&m, ports.EventResumed, now, map[string]any{"state": string(ports.MissionRunning), "resumed_from": ResumedFromHITL}), nil
}

// Suspend records a shutdown of agentic-mgmt; the process goes on.
func Suspend(m ports.Mission, checkpointID string, now time.Time) (ports.Mission, ports.Event, error) {
	if err := move(&m, ports.MissionSuspended, now); err != nil {
		return m, ports.Event{}, err
	}
	m.CheckpointID = checkpointID
	return m, event(&m, ports.EventSuspended, now, map[string]any{"state": string(ports.MissionSuspended), "checkpoint_id": checkpointID, "reason": ReasonShutdown}), nil
}

// Finish records how the objective's process ended. A zero exit completes
// the mission; anything else fails it with the objective's own exit code.
func Finish(m ports.Mission, r ports.CommandResult, summary string, now time.Time) (ports.Mission, ports.Event, error) {
	if m.State == ports.MissionAssigned {
		// The process never started (missing shell, bad working dir, …).
		msg := r.Error
		if msg == "" {
			msg = fmt.Sprintf("session ended before it started (exit %d)", r.ExitCode)
		}
		return Fail(m, ReasonSessionStart, msg, nil, summary, now)
	}
	if r.Success() {
		if err := move(&m, ports.MissionCompleted, now); err != nil {
			return m, ports.Event{}, err
		}
		code := 0
		m.ExitCode = &code
		m.Summary = summary
		return m, event(&m, ports.EventCompleted, now, map[string]any{"state": completedStateWording, "exit_code": 0, "summary": summary}), nil
	}
	code := r.ExitCode
	reason, msg := ReasonNonZeroExit, fmt.Sprintf("objective exited with code %d", code)
	switch {
	case r.TimedOut:
		reason, msg = ReasonTimedOut, "objective timed out"
	case r.Error != "" && code < 0:
		reason, msg = ReasonSessionLost, r.Error
	case r.Error != "":
		msg = r.Error
	case r.Signal != 0:
		msg = fmt.Sprintf("objective killed by signal %d", r.Signal)
	}
	var exit *int
	if code >= 0 {
		exit = &code
	}
	return Fail(m, reason, msg, exit, summary, now)
}

// Fail ends the mission as failed for reason.
func Fail(m ports.Mission, reason, msg string, exitCode *int, summary string, now time.Time) (ports.Mission, ports.Event, error) {
	if err := move(&m, ports.MissionFailed, now); err != nil {
		return m, ports.Event{}, err
	}
	m.Reason, m.Error, m.ExitCode, m.Summary = reason, msg, exitCode, summary
	data := map[string]any{"state": string(ports.MissionFailed), "reason": reason, "error": msg}
	if exitCode != nil {
		data["exit_code"] = *exitCode
	}
	if summary != "" {
		data["summary"] = summary
	}
	return m, event(&m, ports.EventFailed, now, data), nil
}

// Abort ends the mission because an operator killed its session.
func Abort(m ports.Mission, reason string, now time.Time) (ports.Mission, ports.Event, error) {
	if err := move(&m, ports.MissionAborted, now); err != nil {
		return m, ports.Event{}, err
	}
	m.Reason = reason
	return m, event(&m, ports.EventAborted, now, map[string]any{"state": string(ports.MissionAborted), "aborted_by": AbortedByOperator, "reason": reason}), nil
}

// Owned returns the non-terminal missions, oldest first: what the executor
// still owns and reports in executor.resync.
func Owned(missions []ports.Mission) []ports.Mission {
	var out []ports.Mission
	for _, m := range missions {
		if !m.State.Terminal() {
			out = append(out, m)
		}
	}
	sortByCreation(out)
	return out
}

// Resync computes what a new executor stream hears first: executor.resync
// with the owned mission ids, then per owned mission mission.reconnected and
// mission.resumed (only reconnected for a mission not started yet, which is
// not running). Suspended missions go back to running (returned in
// changed, to be stored before the events are sent); a mission waiting for a
// human keeps waiting and its hitl_required is announced again after the pair.
func Resync(missions []ports.Mission, newCheckpoint func() string, now time.Time) (resync ports.Event, pairs []ports.Event, changed []ports.Mission) {
	owned := Owned(missions)
	ids := make([]string, 0, len(owned))
	for _, m := range owned {
		ids = append(ids, m.ID)
	}
	resync = ports.Event{Type: ports.EventResync, TS: now, Data: map[string]any{"owned_mission_ids": ids, "protocol_version": ProtocolVersion}}
	for _, m := range owned {
		orig := m
		if m.CheckpointID == "" {
			m.CheckpointID = newCheckpoint()
		}
		pairs = append(pairs, event(&m, ports.EventReconnected, now, map[string]any{"checkpoint_id": m.CheckpointID}))
		if m.State == ports.MissionAssigned {
			// Not started yet: saying it runs would be untrue (it may never).
			if m.CheckpointID != orig.CheckpointID || m.LastEvent != orig.LastEvent {
				m.UpdatedAt = now
				changed = append(changed, m)
			}
			continue
		}
		pairs = append(pairs, event(&m, ports.EventResumed, now, map[string]any{"state": string(ports.MissionRunning), "resumed_from": ResumedFromSuspended}))
		switch m.State {
		case ports.MissionSuspended:
			_ = move(&m, ports.MissionRunning, now) // always allowed from suspended
			if m.HITL != nil {
				// Suspended while waiting for a human: it still waits.
				_ = move(&m, ports.MissionHITLRequired, now)
				pairs = append(pairs, hitlEvent(&m, now))
			}
		case ports.MissionHITLRequired:
			pairs = append(pairs, hitlEvent(&m, now))
		}
		if m.State != orig.State || m.CheckpointID != orig.CheckpointID || m.LastEvent != orig.LastEvent {
			m.UpdatedAt = now
			changed = append(changed, m)
		}
	}
	return resync, pairs, changed
}
