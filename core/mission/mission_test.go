package mission

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

var t0 = time.Date(2026, 5, 9, 7, 13, 22, 123456789, time.UTC)

var allStates = []ports.MissionState{
	ports.MissionAssigned, ports.MissionRunning, ports.MissionHITLRequired, ports.MissionSuspended,
	ports.MissionCompleted, ports.MissionFailed, ports.MissionAborted,
}

func in(s ports.MissionState) ports.Mission {
	m := ports.Mission{ID: "m1", State: s, CreatedAt: t0}
	if s == ports.MissionHITLRequired {
		m.HITL = &ports.HITLRequest{ID: "h1", Prompt: "Proceed? [y/N]"}
	}
	return m
}

// TestEveryTransition runs every operation from every state: allowed ones
// land in the right state with the right event, the others are refused and
// change nothing.
func TestEveryTransition(t *testing.T) {
	now := t0.Add(time.Second)
	ops := []struct {
		name  string
		to    ports.MissionState
		event ports.EventType
		from  []ports.MissionState // states it is allowed from
		do    func(ports.Mission) (ports.Mission, ports.Event, error)
	}{
		{"start", ports.MissionRunning, ports.EventStarted, []ports.MissionState{ports.MissionAssigned},
			func(m ports.Mission) (ports.Mission, ports.Event, error) { return Start(m, "host", "s1", now) }},
		{"require hitl", ports.MissionHITLRequired, ports.EventHITLRequired, []ports.MissionState{ports.MissionRunning},
			func(m ports.Mission) (ports.Mission, ports.Event, error) {
				return RequireHITL(m, ports.HITLRequest{ID: "h2", Prompt: "ok?"}, now)
			}},
		{"answer hitl", ports.MissionRunning, ports.EventResumed, []ports.MissionState{ports.MissionHITLRequired},
			func(m ports.Mission) (ports.Mission, ports.Event, error) { return AnswerHITL(m, "h1", now) }},
		{"suspend", ports.MissionSuspended, ports.EventSuspended, []ports.MissionState{ports.MissionAssigned, ports.MissionRunning, ports.MissionHITLRequired},
			func(m ports.Mission) (ports.Mission, ports.Event, error) { return Suspend(m, "c1", now) }},
		{"finish ok", ports.MissionCompleted, ports.EventCompleted, []ports.MissionState{ports.MissionRunning, ports.MissionHITLRequired, ports.MissionSuspended},
			func(m ports.Mission) (ports.Mission, ports.Event, error) {
				if m.State == ports.MissionAssigned {
					return m, ports.Event{}, ErrIllegalTransition // covered by "finish before start"
				}
				return Finish(m, ports.CommandResult{ExitCode: 0}, "done", now)
			}},
		{"finish non-zero", ports.MissionFailed, ports.EventFailed, []ports.MissionState{ports.MissionAssigned, ports.MissionRunning, ports.MissionHITLRequired, ports.MissionSuspended},
			func(m ports.Mission) (ports.Mission, ports.Event, error) {
				return Finish(m, ports.CommandResult{ExitCode: 3}, "", now)
			}},
		{"fail", ports.MissionFailed, ports.EventFailed, []ports.MissionState{ports.MissionAssigned, ports.MissionRunning, ports.MissionHITLRequired, ports.MissionSuspended},
			func(m ports.Mission) (ports.Mission, ports.Event, error) {
				return Fail(m, ReasonSessionLost, "gone", nil, "", now)
			}},
		{"abort", ports.MissionAborted, ports.EventAborted, []ports.MissionState{ports.MissionAssigned, ports.MissionRunning, ports.MissionHITLRequired, ports.MissionSuspended},
			func(m ports.Mission) (ports.Mission, ports.Event, error) { return Abort(m, "killed", now) }},
	}
	for _, op := range ops {
		for _, from := range allStates {
			allowed := false
			for _, f := range op.from {
				allowed = allowed || f == from
			}
			t.Run(op.name+" from "+string(from), func(t *testing.T) {
				before := in(from)
				got, ev, err := op.do(before)
				if !allowed {
					if !errors.Is(err, ErrIllegalTransition) {
						t.Fatalf("want ErrIllegalTransition, got %v (state %s)", err, got.State)
					}
					if !reflect.DeepEqual(got, before) && got.State != before.State {
						t.Fatalf("refused transition changed the mission: %+v", got)
					}
					return
				}
				if err != nil {
					t.Fatalf("allowed transition refused: %v", err)
				}
				if got.State != op.to || ev.Type != op.event || ev.MissionID != "m1" || !ev.TS.Equal(now) || got.LastEvent != op.event {
					t.Fatalf("got state %s event %+v", got.State, ev)
				}
				if op.to.Terminal() && (!got.EndedAt.Equal(now) || got.HITL != nil) {
					t.Fatalf("terminal mission: ended %v hitl %+v", got.EndedAt, got.HITL)
				}
			})
		}
	}
}

func TestCanTransitionTable(t *testing.T) {
	for _, from := range allStates {
		for _, to := range allStates {
			got := CanTransition(from, to)
			if from.Terminal() && got {
				t.Errorf("%s → %s allowed out of a terminal state", from, to)
			}
			if from == to && got {
				t.Errorf("%s → %s self-transition allowed", from, to)
			}
		}
	}
	for _, tc := range []struct {
		from, to ports.MissionState
		want     bool
	}{
		{ports.MissionAssigned, ports.MissionRunning, true},
		{ports.MissionAssigned, ports.MissionFailed, true},
		{ports.MissionAssigned, ports.MissionCompleted, false},
		{ports.MissionAssigned, ports.MissionHITLRequired, false},
		{ports.MissionRunning, ports.MissionHITLRequired, true},
		{ports.MissionHITLRequired, ports.MissionRunning, true},
		{ports.MissionRunning, ports.MissionSuspended, true},
		{ports.MissionSuspended, ports.MissionRunning, true},
		{ports.MissionSuspended, ports.MissionHITLRequired, false},
		{ports.MissionRunning, ports.MissionAssigned, false},
	} {
		if got := CanTransition(tc.from, tc.to); got != tc.want {
			t.Errorf("%s → %s = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

func TestEventData(t *testing.T) {
	est := t0.Add(50 * time.Millisecond)
	m, ev := Assign(ports.DispatchRequest{MissionID: "m1", Objective: "true", RequestHash: "h"}, "host-01", t0, est)
	want := map[string]any{"state": "assigned", "estimated_start": "2026-05-09T07:13:22.173Z"}
	if ev.Type != ports.EventAssigned || !reflect.DeepEqual(ev.Data, want) || m.State != ports.MissionAssigned || m.AgentID != "host-01" {
		t.Fatalf("assign: %+v %+v", m, ev)
	}
	m, ev, _ = Start(m, "host", "cmd-1", t0)
	if !reflect.DeepEqual(ev.Data, map[string]any{"state": "running", "agent_runtime": "host", "pty_session_id": "cmd-1"}) || m.SessionID != "cmd-1" {
		t.Fatalf("start: %+v", ev.Data)
	}
	m2, ev, _ := Finish(m, ports.CommandResult{ExitCode: 0}, "all good", t0)
	if !reflect.DeepEqual(ev.Data, map[string]any{"state": "done", "exit_code": 0, "summary": "all good"}) || *m2.ExitCode != 0 {
		t.Fatalf("completed: %+v", ev.Data)
	}
	_, ev, _ = Finish(m, ports.CommandResult{ExitCode: 7}, "tail", t0)
	if !reflect.DeepEqual(ev.Data, map[string]any{"state": "failed", "reason": "non_zero_exit", "error": "objective exited with code 7", "exit_code": 7, "summary": "tail"}) {
		t.Fatalf("failed: %+v", ev.Data)
	}
	_, ev, _ = Finish(m, ports.CommandResult{ExitCode: 143, TimedOut: true, Signal: 15}, "", t0)
	if ev.Data["reason"] != ReasonTimedOut || ev.Data["exit_code"] != 143 {
		t.Fatalf("timeout: %+v", ev.Data)
	}
	_, ev, _ = Finish(m, ports.CommandResult{ExitCode: -1, Error: "agent disconnected"}, "", t0)
	if ev.Data["reason"] != ReasonSessionLost || ev.Data["exit_code"] != nil {
		t.Fatalf("lost: %+v", ev.Data)
	}
	_, ev, _ = Finish(in(ports.MissionAssigned), ports.CommandResult{ExitCode: 127, Error: "command not found"}, "", t0)
	if ev.Data["reason"] != ReasonSessionStart || ev.Data["error"] != "command not found" {
		t.Fatalf("start failure: %+v", ev.Data)
	}
	_, ev, _ = Suspend(m, "ck-1", t0)
	if !reflect.DeepEqual(ev.Data, map[string]any{"state": "suspended", "checkpoint_id": "ck-1", "reason": "mgmt_server_shutdown"}) {
		t.Fatalf("suspend: %+v", ev.Data)
	}
	_, ev, _ = Abort(m, "operator killed the session", t0)
	if !reflect.DeepEqual(ev.Data, map[string]any{"state": "aborted", "aborted_by": "operator", "reason": "operator killed the session"}) {
		t.Fatalf("abort: %+v", ev.Data)
	}
	h, ev, _ := RequireHITL(m, ports.HITLRequest{ID: "h9", Prompt: "Continue? [y/N]", Context: "ctx"}, t0)
	if !reflect.DeepEqual(ev.Data, map[string]any{"hitl_id": "h9", "prompt": "Continue? [y/N]", "context": "ctx"}) {
		t.Fatalf("hitl: %+v", ev.Data)
	}
	if _, _, err := AnswerHITL(h, "other", t0); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("answer with the wrong hitl id: %v", err)
	}
	r, ev, _ := AnswerHITL(h, "h9", t0)
	if !reflect.DeepEqual(ev.Data, map[string]any{"state": "running", "resumed_from": "hitl_required"}) || r.HITL != nil {
		t.Fatalf("resume: %+v", ev.Data)
	}
}

func TestProgressRateLimit(t *testing.T) {
	m := in(ports.MissionRunning)
	m, ev, ok := Progress(m, "step 1", "…step 1", t0)
	if !ok || ev.Data["iteration"] != 1 || ev.Data["summary"] != "step 1" || ev.Data["phase"] != "execution" {
		t.Fatalf("first progress: %v %+v", ok, ev)
	}
	if _, _, ok := Progress(m, "step 2", "", t0.Add(4999*time.Millisecond)); ok {
		t.Fatal("second progress within 5 s")
	}
	_, ev, ok = Progress(m, "step 3", "", t0.Add(5*time.Second))
	if !ok || ev.Data["iteration"] != 2 {
		t.Fatalf("progress after 5 s: %v %+v", ok, ev)
	}
	for _, s := range []ports.MissionState{ports.MissionAssigned, ports.MissionHITLRequired, ports.MissionSuspended, ports.MissionCompleted} {
		if _, _, ok := Progress(in(s), "x", "", t0); ok {
			t.Errorf("progress emitted while %s", s)
		}
	}
}

func TestFormatTS(t *testing.T) {
	for _, tc := range []struct {
		in   time.Time
		want string
	}{
		{t0, "2026-05-09T07:13:22.123Z"},
		{time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "2026-01-02T03:04:05.000Z"},
		{time.Date(2026, 1, 2, 3, 4, 5, 120000000, time.FixedZone("x", 3600)), "2026-01-02T02:04:05.120Z"},
	} {
		if got := ports.FormatTimestamp(tc.in); got != tc.want {
			t.Errorf("FormatTS(%v) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestResync(t *testing.T) {
	ms := []ports.Mission{
		{ID: "done", State: ports.MissionCompleted, CreatedAt: t0},
		{ID: "b-susp", State: ports.MissionSuspended, CheckpointID: "ck-b", CreatedAt: t0.Add(2 * time.Second)},
		{ID: "a-run", State: ports.MissionRunning, CreatedAt: t0.Add(time.Second)},
		{ID: "c-hitl", State: ports.MissionHITLRequired, HITL: &ports.HITLRequest{ID: "h1", Prompt: "ok?"}, CheckpointID: "ck-c", CreatedAt: t0.Add(3 * time.Second)},
		{ID: "aborted", State: ports.MissionAborted, CreatedAt: t0},
	}
	n := 0
	resync, pairs, changed := Resync(ms, func() string { n++; return "ck-new" }, t0)
	checkResync(t, resync, "a-run", "b-susp", "c-hitl")
	checkPairs(t, pairs,
		"a-run mission.reconnected", "a-run mission.resumed",
		"b-susp mission.reconnected", "b-susp mission.resumed",
		"c-hitl mission.reconnected", "c-hitl mission.resumed", "c-hitl mission.hitl_required",
	)
	if pairs[0].Data["checkpoint_id"] != "ck-new" || pairs[2].Data["checkpoint_id"] != "ck-b" || n != 1 {
		t.Fatalf("checkpoints: %v %v (%d new)", pairs[0].Data, pairs[2].Data, n)
	}
	if !reflect.DeepEqual(pairs[1].Data, map[string]any{"state": "running", "resumed_from": "suspended"}) {
		t.Fatalf("resumed data %v", pairs[1].Data)
	}
	states := map[string]ports.MissionState{}
	for _, m := range changed {
		states[m.ID] = m.State
	}
	if states["b-susp"] != ports.MissionRunning || states["c-hitl"] != ports.MissionHITLRequired || states["a-run"] != ports.MissionRunning || len(changed) != 3 {
		t.Fatalf("changed: %+v", states)
	}
	// Nothing owned: an empty list, never null.
	resync, pairs, changed = Resync(ms[:1], nil, t0)
	if ids, ok := resync.Data["owned_mission_ids"].([]string); !ok || ids == nil || len(ids) != 0 || len(pairs) != 0 || len(changed) != 0 {
		t.Fatalf("empty resync: %+v %v %v", resync.Data, pairs, changed)
	}
}

func TestRoute(t *testing.T) {
	agents := []Candidate{
		{ID: "host-02", Status: "ready", Runtime: "host", Arch: "amd64", Load: 0},
		{ID: "host-01", Status: "busy", Runtime: "host", Arch: "amd64", Load: 2},
		{ID: "vm-01", Status: "ready", Runtime: "vm", Arch: "amd64", Capabilities: []string{"claude"}, Load: 1},
		{ID: "stale-01", Status: "stale", Runtime: "host", Load: 0},
		{ID: "gone-01", Status: "disconnected", Runtime: "host", Load: 0},
		{ID: "new-01", Status: "starting", Runtime: "host", Load: 0},
	}
	for _, tc := range []struct {
		name   string
		filter ports.MissionFilter
		want   string
		err    error
	}{
		{"least loaded first", ports.MissionFilter{}, "host-02", nil},
		{"hint wins over load", ports.MissionFilter{AgentID: "host-01"}, "host-01", nil},
		{"hint to a stale agent", ports.MissionFilter{AgentID: "stale-01"}, "", ErrAgentNotConnected},
		{"hint to a disconnected agent", ports.MissionFilter{AgentID: "gone-01"}, "", ErrAgentNotConnected},
		{"hint to an unknown agent", ports.MissionFilter{AgentID: "nobody"}, "", ErrAgentNotConnected},
		{"capability: vm", ports.MissionFilter{Capabilities: []string{"isolation:vm"}}, "vm-01", nil},
		{"capability: claude", ports.MissionFilter{Capabilities: []string{"runtime:claude-code", "hitl"}}, "vm-01", nil},
		{"capability: platform", ports.MissionFilter{Capabilities: []string{"platform:linux/x64", "isolation:host"}}, "host-02", nil},
		{"capability nobody has", ports.MissionFilter{Capabilities: []string{"isolation:container"}}, "", ErrNoAgent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Route(tc.filter, agents)
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Fatalf("Route = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
	if _, err := Route(ports.MissionFilter{}, nil); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("no agents: %v", err)
	}
	// Agents whose environment sleeps: taken when named, and without a name
	// only when no awake agent fits (a wake costs the mission a restore).
	sleepy := append(slices.Clone(agents),
		Candidate{ID: "sleepy-vm", Status: "disconnected", Runtime: "vm", Arch: "amd64", Asleep: true},
		Candidate{ID: "sleepy-box", Status: "disconnected", Runtime: "container", Arch: "amd64", Capabilities: []string{"claude"}, Asleep: true},
		Candidate{ID: "sleepy-box2", Status: "disconnected", Runtime: "container", Arch: "amd64", Capabilities: []string{"claude"}, Load: 1, Asleep: true},
	)
	for _, tc := range []struct {
		name   string
		agents []Candidate
		filter ports.MissionFilter
		want   string
		err    error
	}{
		{"named asleep agent is woken", sleepy, ports.MissionFilter{AgentID: "sleepy-vm"}, "sleepy-vm", nil},
		{"named asleep agent, no other agent", sleepy[len(sleepy)-2:], ports.MissionFilter{AgentID: "sleepy-box"}, "sleepy-box", nil},
		{"awake agents first", sleepy, ports.MissionFilter{}, "host-02", nil},
		{"awake busy agent before an asleep idle one", sleepy, ports.MissionFilter{Capabilities: []string{"isolation:vm"}}, "vm-01", nil},
		{"asleep only when no awake agent fits", sleepy, ports.MissionFilter{Capabilities: []string{"isolation:container"}}, "sleepy-box", nil},
		{"asleep and awake both missing the capability", sleepy, ports.MissionFilter{Capabilities: []string{"isolation:kubernetes"}}, "", ErrNoAgent},
		{"only asleep agents", sleepy[len(sleepy)-3:], ports.MissionFilter{}, "sleepy-box", nil},
		{"disconnected and not asleep stays refused", sleepy, ports.MissionFilter{AgentID: "gone-01"}, "", ErrAgentNotConnected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Route(tc.filter, tc.agents)
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Fatalf("Route = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
	// Ties on load go by id, so routing is deterministic.
	got, _ := Route(ports.MissionFilter{}, []Candidate{{ID: "b", Status: "ready"}, {ID: "a", Status: "ready"}})
	if got != "a" {
		t.Fatalf("tie: %s", got)
	}
}

func TestExecutorCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name       string
		isolations []ports.RuntimeKind
		claude     bool
		agents     []Candidate
		want       []string
	}{
		{"nothing configured", nil, false, nil, []string{"hitl", "platform:linux/x64", "resumable"}},
		{"host supervisor", []ports.RuntimeKind{ports.KindHost}, false, nil, []string{"hitl", "isolation:host", "platform:linux/x64", "resumable"}},
		{"claude on the host", []ports.RuntimeKind{ports.KindHost}, true, nil, []string{"hitl", "isolation:host", "platform:linux/x64", "resumable", "runtime:claude-code"}},
		{"docker and libvirt reachable", []ports.RuntimeKind{ports.KindContainer, ports.KindVM}, false, nil, []string{"hitl", "isolation:container", "isolation:vm", "platform:linux/x64", "resumable"}},
		{"a connected vm agent with claude", nil, false, []Candidate{{ID: "vm-1", Status: "ready", Runtime: "vm", Capabilities: []string{"claude"}}},
			[]string{"hitl", "isolation:vm", "platform:linux/x64", "resumable", "runtime:claude-code"}},
		{"a disconnected container agent counts for nothing", nil, false, []Candidate{{ID: "c-1", Status: "disconnected", Runtime: "container"}},
			[]string{"hitl", "platform:linux/x64", "resumable"}},
		{"an asleep container agent counts: a mission wakes it", nil, false, []Candidate{{ID: "c-1", Status: "disconnected", Runtime: "container", Asleep: true}},
			[]string{"hitl", "isolation:container", "platform:linux/x64", "resumable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExecutorCapabilities("amd64", tc.isolations, tc.claude, tc.agents); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if got := ExecutorCapabilities("arm64", nil, false, nil); !reflect.DeepEqual(got, []string{"hitl", "platform:linux/arm64", "resumable"}) {
		t.Fatalf("arm64: %v", got)
	}
}

// A question open when agentic-mgmt stopped is still open after resync.
func TestResyncKeepsAQuestionOpenAcrossRestart(t *testing.T) {
	m := ports.Mission{ID: "q", State: ports.MissionSuspended, CheckpointID: "ck", CreatedAt: t0,
		HITL: &ports.HITLRequest{ID: "h1", Prompt: "Proceed? [y/N]"}}
	_, pairs, changed := Resync([]ports.Mission{m}, nil, t0)
	checkPairs(t, pairs, "q mission.reconnected", "q mission.resumed", "q mission.hitl_required")
	if len(changed) != 1 || changed[0].State != ports.MissionHITLRequired || changed[0].HITL == nil || pairs[2].Data["hitl_id"] != "h1" {
		t.Fatalf("changed %+v, hitl event %+v", changed, pairs[2].Data)
	}
}

func TestResyncOfAMissionNotStartedYet(t *testing.T) {
	m := ports.Mission{ID: "a", State: ports.MissionAssigned, CreatedAt: t0}
	resync, pairs, changed := Resync([]ports.Mission{m}, func() string { return "ck" }, t0)
	checkResync(t, resync, "a")
	if len(pairs) != 1 || pairs[0].Type != ports.EventReconnected {
		t.Fatalf("pairs %+v: an assigned mission must not be announced as running", pairs)
	}
	if len(changed) != 1 || changed[0].State != ports.MissionAssigned || changed[0].CheckpointID != "ck" {
		t.Fatalf("changed %+v", changed)
	}
}
