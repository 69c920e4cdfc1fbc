package mission

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func TestDispatchRoutesToLeastLoadedReadyAgent(t *testing.T) {
	h := newHarness(t)
	h.dir.Set(
		agentInfo("agent-a", "ready", 3),
		agentInfo("agent-b", "ready", 1),
		agentInfo("agent-c", "disconnected", 0),
		agentInfo("agent-d", "busy", 2),
	)
	m := h.dispatch("m1")
	if m.AgentID != "agent-b" {
		t.Fatalf("routed to %q, want the least loaded ready agent agent-b", m.AgentID)
	}
	c := h.cmd(m.SessionID)
	if c.AgentID() != "agent-b" {
		t.Fatalf("started on %q, want agent-b", c.AgentID())
	}
}

// An agent held for someone (a warm pool's idle member) is no candidate,
// by name or not, however idle it is.
func TestDispatchSkipsReservedAgents(t *testing.T) {
	h := newHarness(t)
	h.dir.Set(agentInfo("member", "ready", 0), agentInfo("agent-b", "ready", 4))
	h.reserved = heldAgents{"member": true}
	h.svc = h.newService()
	if m := h.dispatch("m1"); m.AgentID != "agent-b" {
		t.Fatalf("routed to %q, want agent-b: the idle member is held", m.AgentID)
	}
	// Nor is it advertised: only agent-b's tier and tools are on offer.
	if c := h.svc.Candidates(); len(c) != 1 || c[0].ID != "agent-b" {
		t.Fatalf("candidates %+v", c)
	}
	req := request("m2")
	req.Filter.AgentID = "member"
	if m, err := h.svc.Dispatch(context.Background(), req); err == nil {
		t.Fatalf("naming a held agent routed the mission to %q", m.AgentID)
	}
}

func TestDispatchCapabilityFilter(t *testing.T) {
	h := newHarness(t)
	plain := agentInfo("agent-a", "ready", 0)
	claude := agentInfo("agent-b", "ready", 5)
	claude.Capabilities = []string{"claude"}
	h.dir.Set(plain, claude)
	req := request("m1")
	req.Filter.Capabilities = []string{"runtime:claude-code"}
	m, err := h.svc.Dispatch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if m.AgentID != "agent-b" {
		t.Fatalf("routed to %q, want agent-b, the only one with claude", m.AgentID)
	}
	req = request("m2")
	req.Filter.Capabilities = []string{"isolation:vm"}
	if _, err := h.svc.Dispatch(context.Background(), req); !errors.Is(err, ports.ErrNoAgent) {
		t.Fatalf("no agent with the capability: err = %v, want ErrNoAgent", err)
	}
}

func TestDispatchAgentHint(t *testing.T) {
	h := newHarness(t)
	h.dir.Set(agentInfo("agent-a", "ready", 0), agentInfo("agent-b", "ready", 9), agentInfo("agent-c", "disconnected", 0))

	req := request("m1")
	req.Filter.AgentID = "agent-b"
	m, err := h.svc.Dispatch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if m.AgentID != "agent-b" {
		t.Fatalf("routed to %q, want the hinted agent-b", m.AgentID)
	}
	if got := h.cmd(m.SessionID).AgentID(); got != "agent-b" {
		t.Fatalf("started on %q, want agent-b", got)
	}

	for _, hint := range []string{"agent-c", "agent-missing"} {
		req := request("m-" + hint)
		req.Filter.AgentID = hint
		_, err := h.svc.Dispatch(context.Background(), req)
		if !errors.Is(err, ports.ErrAgentNotConnected) {
			t.Errorf("hint %s: err = %v, want ErrAgentNotConnected", hint, err)
		}
		if _, err := h.svc.Mission(req.MissionID); !errors.Is(err, ports.ErrMissionNotFound) {
			t.Errorf("hint %s: a refused mission is known: %v", hint, err)
		}
	}
	if n := len(h.link.Starts()); n != 1 {
		t.Fatalf("%d sessions started, want 1", n)
	}
}

// A mission may go to an agent whose environment sleeps: named, or when no
// awake agent fits. The launch starts on it through the link (which wakes
// it, core/wakeful); a wake that fails fails the mission as wake_failed.
func TestDispatchToAnAsleepAgent(t *testing.T) {
	h := newHarness(t)
	// box-a sleeps and is still listed; box-b slept before this server
	// started, so the directory has never seen it.
	h.dir.Set(agentInfo("agent-1", "ready", 3), agentInfo("box-a", "disconnected", 0))
	h.asleep = asleepAgents{"box-a": true, "box-b": true}
	h.svc = h.newService()

	if m := h.dispatch("awake-first"); m.AgentID != "agent-1" {
		t.Fatalf("unnamed mission went to %q, want the awake agent-1", m.AgentID)
	}
	for _, name := range []string{"box-a", "box-b"} {
		req := request("to-" + name)
		req.Filter.AgentID = name
		m, err := h.svc.Dispatch(context.Background(), req)
		if err != nil || m.AgentID != name {
			t.Fatalf("mission named %s: %+v, %v", name, m, err)
		}
		if got := h.cmd(m.SessionID).AgentID(); got != name {
			t.Fatalf("started on %q, want %s", got, name)
		}
		h.waitEvent(m.ID, "mission.assigned")
	}
	// No awake agent fits: the asleep one is taken rather than refusing.
	req := request("container")
	req.Filter.Capabilities = []string{"isolation:container"}
	boxA := agentInfo("box-a", "disconnected", 0)
	boxA.Runtime = ports.KindContainer
	h.dir.Set(agentInfo("agent-1", "ready", 3), boxA)
	if m, err := h.svc.Dispatch(context.Background(), req); err != nil || m.AgentID != "box-a" {
		t.Fatalf("container mission: %+v, %v; want box-a, asleep", m, err)
	}

	h.link.SetBeforeStart(func(string, ports.CommandSpec) error {
		return fmt.Errorf("%w: wake: the saved state is gone", ports.ErrWakeFailed)
	})
	req = request("wake-fails")
	req.Filter.AgentID = "box-a"
	if _, err := h.svc.Dispatch(context.Background(), req); err != nil {
		t.Fatalf("a mission to an asleep agent is accepted before its wake: %v", err)
	}
	ev := h.waitEvent("wake-fails", "mission.failed")
	if ev.Data["reason"] != ReasonWakeFailed || !strings.Contains(fmt.Sprint(ev.Data["error"]), "the saved state is gone") {
		t.Fatalf("mission.failed data = %v, want wake_failed with the wake's reason", ev.Data)
	}
	h.wantEvents("wake-fails", "mission.assigned", "mission.failed")
	h.checkOrder()
}

func TestDispatchNoAgent(t *testing.T) {
	h := newHarness(t)
	for _, agents := range [][]ports.AgentInfo{nil, {agentInfo("agent-a", "disconnected", 0), agentInfo("agent-b", "stale", 0)}} {
		h.dir.Set(agents...)
		_, err := h.svc.Dispatch(context.Background(), request("m1"))
		if !errors.Is(err, ports.ErrNoAgent) {
			t.Fatalf("agents %v: err = %v, want ErrNoAgent", agents, err)
		}
	}
	if n := len(h.outbox.Events()); n != 0 {
		t.Fatalf("%d events appended for a refused dispatch", n)
	}
	// Once an agent connects, the same mission is accepted.
	h.dir.Set(agentInfo("agent-a", "ready", 0))
	h.dispatch("m1")
}

func TestDispatchStoresBeforeAssignedEventAndStartsSession(t *testing.T) {
	h := newHarness(t)
	req := request("m1")
	req.Objective = "make test && echo 'ok'"
	req.Completion = "tests pass"
	req.LongRunning = true
	req.Metadata = []byte(`{"k":"v"}`)
	m, err := h.svc.Dispatch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if m.State != ports.MissionAssigned || m.SessionID == "" || m.AgentID != "agent-1" {
		t.Fatalf("dispatch returned state %q session %q agent %q", m.State, m.SessionID, m.AgentID)
	}
	if m.ID != "m1" || m.Objective != req.Objective || m.RequestHash != req.RequestHash || m.AIWGSessionID != "aiwg-1" ||
		m.Completion != "tests pass" || !m.LongRunning || string(m.Metadata) != `{"k":"v"}` {
		t.Fatalf("dispatch did not keep the request: %+v", m)
	}

	// Durable before the answer: the store holds it as assigned, with its session id.
	stored, ok := h.store.Get("m1")
	if !ok || stored.State != ports.MissionAssigned || stored.SessionID != m.SessionID {
		t.Fatalf("store holds %+v (found %v), want assigned with session %s", stored, ok, m.SessionID)
	}
	ev := h.waitEvent("m1", "mission.assigned")
	if ev.Data["state"] != "assigned" || ev.Data["estimated_start"] == nil {
		t.Fatalf("mission.assigned data = %v", ev.Data)
	}

	// The Put comes before the Append, and both before the session starts.
	c := h.cmd(m.SessionID)
	var order []string
	for _, e := range h.log.snapshot() {
		if e.MissionID == "m1" {
			order = append(order, e.Kind+":"+string(e.State)+string(e.Event))
		}
	}
	if want := []string{"put:assigned", "append:mission.assigned", "start:"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("operations = %v, want %v", order, want)
	}

	calls := h.link.Starts()
	if len(calls) != 1 {
		t.Fatalf("%d Start calls, want 1", len(calls))
	}
	sc := calls[0]
	if sc.AgentID != "agent-1" {
		t.Errorf("Start on agent %q", sc.AgentID)
	}
	if sc.Spec.Command != "sh" || !reflect.DeepEqual(sc.Spec.Args, []string{"-c", req.Objective}) {
		t.Errorf("Start runs %q %q, want sh -c <objective>", sc.Spec.Command, sc.Spec.Args)
	}
	if !sc.Spec.PTY {
		t.Error("Start without a PTY")
	}
	if sc.Spec.Env["AIWG_MISSION_ID"] != "m1" {
		t.Errorf("Start env = %v, want AIWG_MISSION_ID=m1", sc.Spec.Env)
	}
	if sc.Spec.Cols == 0 || sc.Spec.Rows == 0 {
		t.Errorf("Start terminal size %dx%d", sc.Spec.Cols, sc.Spec.Rows)
	}
	if !sc.Opts.Detached {
		t.Error("Start not detached: the session would die with the dispatch request")
	}
	if sc.Opts.CommandID != m.SessionID || c.ID() != m.SessionID {
		t.Errorf("CommandID = %q (command %q), want the stored session id %q", sc.Opts.CommandID, c.ID(), m.SessionID)
	}
	if sc.Spec.SessionID != m.SessionID {
		t.Errorf("spec.SessionID = %q, want %q", sc.Spec.SessionID, m.SessionID)
	}
	if sc.Opts.OnOutput == nil || sc.Opts.OnStarted == nil {
		t.Error("Start without OnOutput / OnStarted")
	}
	h.checkOrder()
}

func TestDispatchIdempotent(t *testing.T) {
	h := newHarness(t)
	first := h.dispatch("m1")
	h.cmd(first.SessionID)

	again, err := h.svc.Dispatch(context.Background(), request("m1"))
	if err != nil {
		t.Fatalf("identical re-dispatch: %v", err)
	}
	if again.ID != first.ID || again.SessionID != first.SessionID || again.AgentID != first.AgentID || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("re-dispatch returned %+v, want %+v", again, first)
	}

	conflict := request("m1")
	conflict.Objective = "rm -rf /"
	conflict.RequestHash = "other"
	if _, err := h.svc.Dispatch(context.Background(), conflict); !errors.Is(err, ports.ErrMissionConflict) {
		t.Fatalf("different body: err = %v, want ErrMissionConflict", err)
	}

	if n := len(h.link.Starts()); n != 1 {
		t.Fatalf("%d sessions started, want 1", n)
	}
	if n := len(h.putsOf("m1")); n != 1 {
		t.Fatalf("%d Puts of m1, want 1", n)
	}
	h.wantEvents("m1", "mission.assigned")

	// Still idempotent once the mission runs: the answer is the current record.
	h.cmd(first.SessionID).ReportStarted()
	h.waitState("m1", ports.MissionRunning)
	again, err = h.svc.Dispatch(context.Background(), request("m1"))
	if err != nil || again.State != ports.MissionRunning {
		t.Fatalf("re-dispatch of a running mission: %v, state %q", err, again.State)
	}
}

func TestDispatchIdempotentForArchivedMission(t *testing.T) {
	h := newHarness(t)
	code := 0
	old := ports.Mission{ID: "old", Objective: "echo hi", RequestHash: "hash-old", State: ports.MissionCompleted,
		AgentID: "agent-9", SessionID: "s-old", ExitCode: &code, CreatedAt: time.Unix(1000, 0)}
	h.store.PutArchived(old)

	m, err := h.svc.Dispatch(context.Background(), request("old"))
	if err != nil {
		t.Fatalf("identical re-dispatch of an archived mission: %v", err)
	}
	if m.ID != "old" || m.State != ports.MissionCompleted || m.SessionID != "s-old" {
		t.Fatalf("got %+v, want the archived record", m)
	}
	req := request("old")
	req.RequestHash = "different"
	if _, err := h.svc.Dispatch(context.Background(), req); !errors.Is(err, ports.ErrMissionConflict) {
		t.Fatalf("different body: err = %v, want ErrMissionConflict", err)
	}
	if n := len(h.link.Starts()); n != 0 {
		t.Fatalf("%d sessions started for an archived mission", n)
	}
	if n := h.store.PutCalls(); n != 0 {
		t.Fatalf("%d Puts for an archived mission", n)
	}
	if n := len(h.outbox.Events()); n != 0 {
		t.Fatalf("%d events for an archived mission", n)
	}
}

func TestDispatchConcurrentIdenticalStartsOneSession(t *testing.T) {
	h := newHarness(t)
	// A slow disk widens the window in which the dispatches overlap.
	h.store.SetBeforePut(func([]ports.Mission) { time.Sleep(20 * time.Millisecond) })

	const n = 20
	results := make([]ports.Mission, n)
	errs := make([]error, n)
	together(n, func(i int) {
		results[i], errs[i] = h.svc.Dispatch(context.Background(), request("m1"))
	})
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("dispatch %d: %v", i, errs[i])
		}
		if results[i].SessionID != results[0].SessionID {
			t.Fatalf("dispatch %d got session %q, dispatch 0 %q", i, results[i].SessionID, results[0].SessionID)
		}
	}
	h.cmd(results[0].SessionID)
	// Every Dispatch returned, so any second session would have been stored and announced already.
	if k := len(h.putsOf("m1")); k != 1 {
		t.Fatalf("%d Puts of m1, want 1", k)
	}
	if k := h.outbox.count("m1", "mission.assigned"); k != 1 {
		t.Fatalf("%d mission.assigned events, want 1", k)
	}
	if k := len(h.link.Starts()); k != 1 {
		t.Fatalf("%d sessions started, want 1", k)
	}
}

func TestDispatchConcurrentConflictingBodies(t *testing.T) {
	h := newHarness(t)
	h.store.SetBeforePut(func([]ports.Mission) { time.Sleep(10 * time.Millisecond) })
	errs := make([]error, 10)
	together(len(errs), func(i int) {
		req := request("m1")
		req.RequestHash = []string{"a", "b"}[i%2]
		_, errs[i] = h.svc.Dispatch(context.Background(), req)
	})
	won := h.mission("m1").RequestHash
	for i, err := range errs {
		want := error(nil)
		if []string{"a", "b"}[i%2] != won {
			want = ports.ErrMissionConflict
		}
		if !errors.Is(err, want) && err != want {
			t.Errorf("dispatch %d: err = %v, want %v", i, err, want)
		}
	}
	if k := len(h.putsOf("m1")); k != 1 {
		t.Fatalf("%d Puts of m1, want 1", k)
	}
}

func TestDispatchStoreFailure(t *testing.T) {
	h := newHarness(t)
	h.store.SetPutErr(errDisk)
	_, err := h.svc.Dispatch(context.Background(), request("m1"))
	if !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("err = %v, want ErrStoreUnavailable", err)
	}
	if n := len(h.outbox.Events()); n != 0 {
		t.Fatalf("%d events appended although the mission was not stored", n)
	}
	if n := len(h.link.Starts()); n != 0 {
		t.Fatalf("%d sessions started although the mission was not stored", n)
	}
	if _, err := h.svc.Mission("m1"); !errors.Is(err, ports.ErrMissionNotFound) {
		t.Fatalf("Mission after a failed dispatch: %v, want ErrMissionNotFound", err)
	}
	if ms := h.svc.Missions(""); len(ms) != 0 {
		t.Fatalf("Missions after a failed dispatch: %v", ms)
	}

	// The disk recovers: the same mission_id is accepted now.
	h.store.SetPutErr(nil)
	m := h.dispatch("m1")
	h.cmd(m.SessionID)
	if n := len(h.link.Starts()); n != 1 {
		t.Fatalf("%d sessions started, want 1", n)
	}
	h.checkOrder()
}

func TestDispatchOutboxOrArchiveFailure(t *testing.T) {
	h := newHarness(t)
	h.outbox.SetErr(errors.New("outbox disk full"))
	if _, err := h.svc.Dispatch(context.Background(), request("m1")); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("outbox failure: err = %v, want ErrStoreUnavailable", err)
	}
	if n := len(h.link.Starts()); n != 0 {
		t.Fatalf("%d sessions started although mission.assigned was not recorded", n)
	}
	h.outbox.SetErr(nil)
	h.dispatch("m1")

	h.store.SetArchivedErr(errDisk)
	if _, err := h.svc.Dispatch(context.Background(), request("m2")); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("archive lookup failure: err = %v, want ErrStoreUnavailable", err)
	}
	h.store.SetArchivedErr(nil)
	h.dispatch("m2")
}

// Live views hear of every stored change: a dispatch, and each transition.
func TestEveryStoredChangeIsAnnounced(t *testing.T) {
	h := newHarness(t)
	h.dispatch("m1")
	waitFor(t, func() bool { return h.changes.count(ports.ChangeMissions) >= 2 }, "dispatch (assigned, then the mission listed) announced")
	before := h.changes.count(ports.ChangeMissions)
	m, c := h.run("m2")
	c.Finish(ports.CommandResult{ExitCode: 0})
	waitFor(t, func() bool { return h.changes.count(ports.ChangeMissions) >= before+3 }, "assigned, started and completed of %s announced", m.ID)
	if h.changes.count(ports.ChangeHITL) == 0 {
		t.Fatal("missions' changes do not tell the HITL inbox")
	}
}
