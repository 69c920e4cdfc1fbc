package mission

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

func TestSuspend(t *testing.T) {
	h := newHarness(t)
	// Oldest first: assigned, running, hitl, completed, failed. (The clock
	// is not advanced: the service's HITL timer runs on the real clock.)
	ma := h.dispatch("assigned")
	ca := h.cmd(ma.SessionID)
	_, cr := h.run("running")
	_, ch := h.run("waiting")
	h.waitHITL("waiting", ch, "Proceed? [y/N] ", 1)
	md, cd := h.run("done")
	h.complete("done", cd)
	h.waitEnded(md.SessionID)
	mf, cf := h.run("failed")
	cf.Finish(ports.CommandResult{ExitCode: 1})
	h.waitEvent("failed", "mission.failed")
	h.waitEnded(mf.SessionID)

	mark := len(h.log.snapshot())
	doneBefore, failedBefore := h.mission("done"), h.mission("failed")
	if err := h.svc.Suspend(context.Background()); err != nil {
		t.Fatalf("Suspend: %v", err)
	}

	after := h.log.snapshot()[mark:]
	var puts, appends []string
	lastPut, firstAppend := -1, len(after)
	for i, e := range after {
		switch e.Kind {
		case "put":
			puts = append(puts, e.MissionID)
			lastPut = i
		case "append":
			appends = append(appends, e.MissionID)
			firstAppend = min(firstAppend, i)
		}
	}
	want := []string{"assigned", "running", "waiting"}
	if !reflect.DeepEqual(appends, want) {
		t.Fatalf("suspended events for %v, want %v (oldest first)", appends, want)
	}
	if len(puts) != 3 || lastPut > firstAppend {
		t.Fatalf("Puts %v (last at %d) not all before the events (first at %d)", puts, lastPut, firstAppend)
	}
	seen := map[string]bool{}
	for _, id := range want {
		m := h.mission(id)
		st, _ := h.store.Get(id)
		if m.State != ports.MissionSuspended || st.State != ports.MissionSuspended {
			t.Errorf("%s: state %q, stored %q, want suspended", id, m.State, st.State)
		}
		if st.CheckpointID == "" || seen[st.CheckpointID] {
			t.Errorf("%s: checkpoint %q (empty or shared)", id, st.CheckpointID)
		}
		seen[st.CheckpointID] = true
		evs := h.outbox.of(id)
		ev := evs[len(evs)-1]
		wantData := map[string]any{"state": "suspended", "checkpoint_id": st.CheckpointID, "reason": "mgmt_server_shutdown"}
		if ev.Type != "mission.suspended" || !reflect.DeepEqual(ev.Data, wantData) {
			t.Errorf("%s: last event %s %v, want mission.suspended %v", id, ev.Type, ev.Data, wantData)
		}
	}
	if got := h.mission("done"); !reflect.DeepEqual(got, doneBefore) {
		t.Errorf("completed mission changed by Suspend: %+v", got)
	}
	if got := h.mission("failed"); !reflect.DeepEqual(got, failedBefore) {
		t.Errorf("failed mission changed by Suspend: %+v", got)
	}

	// The sessions go on; the service no longer takes missions or follows results.
	if _, err := h.svc.Dispatch(context.Background(), request("late")); err == nil || !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("Dispatch after Suspend: %v, want ErrStoreUnavailable", err)
	}
	if _, err := h.svc.Mission("late"); !errors.Is(err, ports.ErrMissionNotFound) {
		t.Fatalf("a mission was accepted after Suspend")
	}
	for _, c := range []*portsfake.Command{ca, cr, ch} {
		if kills(c) != 0 {
			t.Fatalf("Suspend killed session %s", c.ID())
		}
	}
	n := len(h.log.snapshot())
	if err := h.svc.Suspend(context.Background()); err != nil {
		t.Fatalf("second Suspend: %v", err)
	}
	if got := len(h.log.snapshot()); got != n {
		t.Fatalf("second Suspend stored or emitted %d more operations", got-n)
	}
	h.checkOrder()
}

func TestSuspendStoreFailureEmitsNothing(t *testing.T) {
	h := newHarness(t)
	h.run("m1")
	h.store.SetPutErr(errDisk)
	if err := h.svc.Suspend(context.Background()); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("Suspend = %v, want ErrStoreUnavailable", err)
	}
	if n := h.outbox.count("m1", "mission.suspended"); n != 0 {
		t.Fatalf("mission.suspended emitted although not stored")
	}
	h.checkOrder()
}

// A dispatch already past its checks when the shutdown begins must not leave
// an assigned mission that Suspend never saw: it is refused, or suspended too.
func TestSuspendDuringInFlightDispatch(t *testing.T) {
	h := newHarness(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	h.store.SetBeforePut(func(ms []ports.Mission) {
		if ms[0].ID == "m1" && ms[0].State == ports.MissionAssigned {
			close(entered)
			<-release
		}
	})
	type result struct {
		m   ports.Mission
		err error
	}
	dispatched := make(chan result, 1)
	go func() {
		m, err := h.svc.Dispatch(context.Background(), request("m1"))
		dispatched <- result{m, err}
	}()
	<-entered
	suspended := make(chan error, 1)
	go func() { suspended <- h.svc.Suspend(context.Background()) }()
	waitFor(t, func() bool {
		h.svc.mu.Lock()
		defer h.svc.mu.Unlock()
		return h.svc.suspended
	}, "Suspend to begin")
	close(release)

	r := testkit.Receive(t, waitTimeout, dispatched, "Dispatch did not return")
	if err := testkit.Receive(t, waitTimeout, suspended, "Suspend did not return"); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	if r.err != nil {
		return // refused: fine
	}
	st, _ := h.store.Get("m1")
	if st.State != ports.MissionSuspended || h.outbox.count("m1", "mission.suspended") != 1 {
		t.Errorf("mission accepted during shutdown is stored %q with events %v after Suspend returned: "+
			"it is never suspended (and its session starts after the shutdown)", st.State, h.outbox.types("m1"))
	}
}

// An operator kills a session while Suspend commits: the stored state must
// not end older than the last event, and nothing follows a terminal event.
func TestKillDuringSuspendKeepsStoreAndEventsInStep(t *testing.T) {
	h := newHarness(t)
	m, _ := h.run("m1")
	entered := make(chan struct{})
	release := make(chan struct{})
	h.store.SetBeforePut(func(ms []ports.Mission) {
		if ms[0].State == ports.MissionSuspended {
			close(entered)
			<-release
		}
	})
	suspended := make(chan error, 1)
	go func() { suspended <- h.svc.Suspend(context.Background()) }()
	<-entered
	killed := make(chan error, 1)
	go func() {
		_, err := h.svc.KillSession(context.Background(), m.SessionID)
		killed <- err
	}()
	// Let the kill run to its end if it can; a service that makes it wait for
	// the suspension to be committed is fine too.
	select {
	case <-killed:
		killed <- nil
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-suspended; err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	<-killed

	types := h.outbox.types("m1")
	for i, typ := range types[:len(types)-1] {
		if typ == "mission.aborted" || typ == "mission.completed" || typ == "mission.failed" {
			t.Errorf("events = %v: %s after the terminal %s", types, types[i+1], typ)
		}
	}
	st, _ := h.store.Get("m1")
	if last := types[len(types)-1]; string(st.LastEvent) != last || st.State != h.mission("m1").State {
		t.Errorf("stored state %q (last event %s), in memory %q, last emitted %s", st.State, st.LastEvent, h.mission("m1").State, last)
	}
}

func TestRecoverReattachesUnfinishedMissions(t *testing.T) {
	h := newHarness(t)
	base := time.Now().Add(-time.Hour)
	code := 0
	h.store.Seed(
		ports.Mission{ID: "run", Objective: "make", RequestHash: "h1", State: ports.MissionRunning, AgentID: "agent-2", SessionID: "s-run",
			AgentRuntime: "shell", CreatedAt: base, StartedAt: base, LastEvent: "mission.started"},
		ports.Mission{ID: "asg", Objective: "make", RequestHash: "h2", State: ports.MissionAssigned, AgentID: "agent-1", SessionID: "s-asg",
			CreatedAt: base.Add(time.Second), LastEvent: "mission.assigned"},
		ports.Mission{ID: "sus", Objective: "make", RequestHash: "h3", State: ports.MissionSuspended, AgentID: "agent-3", SessionID: "s-sus",
			CheckpointID: "ck-sus", CreatedAt: base.Add(2 * time.Second), StartedAt: base, LastEvent: "mission.suspended"},
		ports.Mission{ID: "end", Objective: "make", RequestHash: "h4", State: ports.MissionCompleted, AgentID: "agent-1", SessionID: "s-end",
			ExitCode: &code, CreatedAt: base.Add(3 * time.Second), LastEvent: "mission.completed"},
	)
	h.restart()

	got := map[string]string{}
	for _, a := range h.link.Attaches() {
		got[a.CommandID] = a.AgentID
	}
	if want := map[string]string{"s-run": "agent-2", "s-asg": "agent-1", "s-sus": "agent-3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("attached %v, want %v", got, want)
	}
	var ids []string
	for _, m := range h.svc.Missions("") {
		ids = append(ids, m.ID)
	}
	if !reflect.DeepEqual(ids, []string{"run", "asg", "sus", "end"}) {
		t.Fatalf("Missions = %v", ids)
	}
	if m, err := h.svc.Dispatch(context.Background(), ports.DispatchRequest{MissionID: "run", RequestHash: "h1", Objective: "make"}); err != nil || m.SessionID != "s-run" {
		t.Fatalf("re-dispatch of a recovered mission: %+v, %v", m, err)
	}

	// The running one's process reports back and completes.
	cr := h.link.Command("s-run")
	emit(cr, "built\r\n")
	ev := h.complete("run", cr)
	if ev.Data["summary"] != "built\n" {
		t.Fatalf("completed data = %v", ev.Data)
	}
	if h.outbox.count("run", "mission.started") != 0 {
		t.Fatalf("a recovered running mission announced mission.started again")
	}

	// The assigned one starts only now, then fails.
	ca := h.link.Command("s-asg")
	ca.ReportStarted()
	ev = h.waitEvent("asg", "mission.started")
	if ev.Data["pty_session_id"] != "s-asg" {
		t.Fatalf("started data = %v", ev.Data)
	}
	ca.Finish(ports.CommandResult{ExitCode: 2})
	ev = h.waitEvent("asg", "mission.failed")
	if ev.Data["reason"] != "non_zero_exit" || ev.Data["exit_code"] != 2 {
		t.Fatalf("failed data = %v", ev.Data)
	}

	// The suspended one completes while suspended.
	cs := h.link.Command("s-sus")
	cs.ReportStarted()
	h.complete("sus", cs)
	if got := h.waitState("sus", ports.MissionCompleted); exitCode(got) != 0 {
		t.Fatalf("exit %v", exitCode(got))
	}
	if st, _ := h.store.Get("sus"); st.State != ports.MissionCompleted {
		t.Fatalf("stored %q", st.State)
	}
	if got := h.mission("end"); got.State != ports.MissionCompleted {
		t.Fatalf("terminal mission changed: %q", got.State)
	}
	h.checkOrder()
}

func TestRecoverLoadError(t *testing.T) {
	h := newHarness(t)
	h.store.SetLoadErr(errDisk)
	if err := h.svc.Recover(); !errors.Is(err, errDisk) {
		t.Fatalf("Recover = %v, want the load error", err)
	}
}

func TestRecoverOpenHITLCanBeAnswered(t *testing.T) {
	h := newHarness(t)
	now := time.Now()
	h.store.Seed(ports.Mission{ID: "m1", Objective: "make", RequestHash: "h", State: ports.MissionHITLRequired, AgentID: "agent-1",
		SessionID: "s-1", CreatedAt: now, LastEvent: "mission.hitl_required",
		HITL: &ports.HITLRequest{ID: "hitl-1", Prompt: "Proceed? [y/N]", Context: "ctx", CreatedAt: now}})
	h.restart()
	open := h.svc.OpenHITL()
	if len(open) != 1 || open[0].ID != "hitl-1" || open[0].SessionID != "s-1" {
		t.Fatalf("OpenHITL = %+v", open)
	}
	m, err := h.svc.RespondHITL(context.Background(), "hitl-1", "yes")
	if err != nil || m.State != ports.MissionRunning {
		t.Fatalf("RespondHITL = %q, %v", m.State, err)
	}
	if got := h.link.Command("s-1").StdinWrites(); !reflect.DeepEqual(got, []string{"yes\n"}) {
		t.Fatalf("stdin = %q", got)
	}
	h.waitEvent("m1", "mission.resumed")
}

func TestResyncAfterRestart(t *testing.T) {
	h := newHarness(t)
	base := time.Now().Add(-time.Hour)
	code := 0
	h.store.Seed(
		ports.Mission{ID: "zeta", RequestHash: "h", Objective: "x", State: ports.MissionSuspended, AgentID: "agent-1", SessionID: "s-zeta",
			CheckpointID: "ck-zeta", CreatedAt: base, LastEvent: "mission.suspended"},
		ports.Mission{ID: "alpha", RequestHash: "h", Objective: "x", State: ports.MissionRunning, AgentID: "agent-1", SessionID: "s-alpha",
			CreatedAt: base.Add(time.Second), LastEvent: "mission.progress"},
		ports.Mission{ID: "mid", RequestHash: "h", Objective: "x", State: ports.MissionHITLRequired, AgentID: "agent-1", SessionID: "s-mid",
			CreatedAt: base.Add(2 * time.Second), LastEvent: "mission.hitl_required",
			HITL: &ports.HITLRequest{ID: "hitl-mid", Prompt: "Proceed? [y/N]", Context: "before", CreatedAt: base}},
		ports.Mission{ID: "done", RequestHash: "h", Objective: "x", State: ports.MissionCompleted, AgentID: "agent-1", SessionID: "s-done",
			ExitCode: &code, CreatedAt: base.Add(-time.Second), LastEvent: "mission.completed"},
	)
	h.restart()
	before := len(h.outbox.Events())

	resync, pairs, err := h.svc.Resync(context.Background())
	if err != nil {
		t.Fatalf("Resync: %v", err)
	}
	// Oldest first, without the completed one.
	checkResync(t, resync, "zeta", "alpha", "mid")
	checkPairs(t, pairs,
		"zeta mission.reconnected", "zeta mission.resumed",
		"alpha mission.reconnected", "alpha mission.resumed",
		"mid mission.reconnected", "mid mission.resumed", "mid mission.hitl_required",
	)
	if pairs[0].Data["checkpoint_id"] != "ck-zeta" {
		t.Fatalf("reconnected of zeta = %v, want its checkpoint", pairs[0].Data)
	}
	resumed := map[string]any{"state": "running", "resumed_from": "suspended"}
	for _, i := range []int{1, 3, 5} {
		if !reflect.DeepEqual(pairs[i].Data, resumed) {
			t.Fatalf("pair %d data = %v", i, pairs[i].Data)
		}
	}
	if d := pairs[6].Data; d["hitl_id"] != "hitl-mid" || d["prompt"] != "Proceed? [y/N]" || d["context"] != "before" {
		t.Fatalf("hitl_required again = %v", d)
	}

	// Stored before Resync returned.
	if st, _ := h.store.Get("zeta"); st.State != ports.MissionRunning {
		t.Fatalf("zeta stored %q, want running", st.State)
	}
	alphaCk, _ := pairs[2].Data["checkpoint_id"].(string)
	if st, _ := h.store.Get("alpha"); alphaCk == "" || st.CheckpointID != alphaCk || st.State != ports.MissionRunning {
		t.Fatalf("alpha stored %q checkpoint %q, announced %q", st.State, st.CheckpointID, alphaCk)
	}
	if st, _ := h.store.Get("mid"); st.State != ports.MissionHITLRequired || st.HITL == nil {
		t.Fatalf("mid stored %q HITL %+v, want still waiting", st.State, st.HITL)
	}
	if got := h.mission("zeta"); got.State != ports.MissionRunning {
		t.Fatalf("zeta in memory %q", got.State)
	}
	if got := h.mission("mid"); got.State != ports.MissionHITLRequired {
		t.Fatalf("mid in memory %q", got.State)
	}
	if open := h.svc.OpenHITL(); len(open) != 1 || open[0].ID != "hitl-mid" {
		t.Fatalf("OpenHITL = %+v", open)
	}
	if n := len(h.outbox.Events()); n != before {
		t.Fatalf("Resync appended %d events to the outbox; its frames are returned, not queued", n-before)
	}

	// Again (a second reconnect): the same ids, the same checkpoints.
	_, pairs2, err := h.svc.Resync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pairs2) != len(pairs) || pairs2[2].Data["checkpoint_id"] != alphaCk || pairs2[0].Data["checkpoint_id"] != "ck-zeta" {
		t.Fatalf("second resync pairs = %v", pairs2)
	}

	// The resumed mission goes on to its real end.
	c := h.link.Command("s-zeta")
	emit(c, "finished\r\n")
	h.complete("zeta", c)
}

func TestResyncStoreFailure(t *testing.T) {
	h := newHarness(t)
	h.store.Seed(ports.Mission{ID: "m1", RequestHash: "h", State: ports.MissionSuspended, AgentID: "agent-1", SessionID: "s-1",
		CheckpointID: "ck", CreatedAt: time.Now(), LastEvent: "mission.suspended"})
	h.restart()
	h.store.SetPutErr(errDisk)
	if _, _, err := h.svc.Resync(context.Background()); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("Resync = %v, want ErrStoreUnavailable", err)
	}
	if got := h.mission("m1"); got.State != ports.MissionSuspended {
		t.Fatalf("state %q after a failed Resync, want suspended", got.State)
	}
	h.store.SetPutErr(nil)
	if _, _, err := h.svc.Resync(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.waitState("m1", ports.MissionRunning)
}

func TestResyncWithLiveMissions(t *testing.T) {
	// A reconnect of the executor stream while missions run.
	h := newHarness(t)
	_, c1 := h.run("m1")
	_, c2 := h.run("m2")
	hitlID := h.waitHITL("m2", c2, "Proceed? [y/N] ", 1).Data["hitl_id"].(string)
	resync, pairs, err := h.svc.Resync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkResync(t, resync, "m1", "m2")
	checkPairs(t, pairs, "m1 mission.reconnected", "m1 mission.resumed", "m2 mission.reconnected", "m2 mission.resumed", "m2 mission.hitl_required")
	if pairs[4].Data["hitl_id"] != hitlID {
		t.Fatalf("hitl_required again = %v", pairs[4].Data)
	}
	if got := h.mission("m2"); got.State != ports.MissionHITLRequired {
		t.Fatalf("m2 %q, want hitl_required", got.State)
	}
	if _, err := h.svc.RespondHITL(context.Background(), hitlID, "y"); err != nil {
		t.Fatalf("answer after resync: %v", err)
	}
	h.complete("m1", c1)
	h.checkOrder()
}

// A mission waiting for a human when agentic-mgmt stops is suspended with its
// question unanswered. After the restart its process still waits on that
// prompt (whose output is gone), so the request must stay answerable.
func TestHITLSurvivesSuspendAndRestart(t *testing.T) {
	h := newHarness(t)
	_, c, hitlID := h.ask("m1", "Proceed? [y/N] ")
	if err := h.svc.Suspend(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.restart()
	_, pairs, err := h.svc.Resync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range pairs {
		types = append(types, string(e.Type))
	}
	if got := h.mission("m1"); got.State != ports.MissionHITLRequired {
		t.Errorf("after restart and resync: state %q, HITL %+v, pairs %v; want hitl_required with %s announced again",
			got.State, got.HITL, types, hitlID)
	}
	if open := h.svc.OpenHITL(); len(open) != 1 || open[0].ID != hitlID {
		t.Errorf("OpenHITL = %+v, want %s", open, hitlID)
	}
	if _, err := h.svc.RespondHITL(context.Background(), hitlID, "y"); err != nil {
		t.Errorf("answer after restart: %v", err)
	} else if got := h.link.Command(c.ID()).StdinWrites(); !reflect.DeepEqual(got, []string{"y\n"}) {
		t.Errorf("stdin = %q", got)
	}
}

// A crash between storing a state and queueing its event: the next start
// queues that event again, once, and leaves alone what the outbox still
// holds and what changed long before the stop.
func TestRecoverRequeuesAnEventLostBetweenStoreAndOutbox(t *testing.T) {
	h := newHarness(t)
	stop := time.Now().Add(-time.Minute).UTC()
	code := 3
	lost := ports.Mission{ID: "lost", Objective: "x", RequestHash: "h1", State: ports.MissionFailed, AgentID: "agent-1", SessionID: "s-1",
		ExitCode: &code, CreatedAt: stop.Add(-time.Second), EndedAt: stop,
		LastEvent: "mission.failed", LastEventAt: stop, LastEventData: map[string]any{"state": "failed", "reason": "non_zero_exit", "exit_code": 3.0}}
	held := ports.Mission{ID: "held", Objective: "x", RequestHash: "h2", State: ports.MissionCompleted, AgentID: "agent-1", SessionID: "s-2",
		CreatedAt: stop.Add(-time.Second), EndedAt: stop.Add(-time.Second),
		LastEvent: "mission.completed", LastEventAt: stop.Add(-time.Second), LastEventData: map[string]any{"state": "done"}}
	old := ports.Mission{ID: "old", Objective: "x", RequestHash: "h3", State: ports.MissionCompleted, AgentID: "agent-1", SessionID: "s-3",
		CreatedAt: stop.Add(-time.Hour), EndedAt: stop.Add(-time.Hour),
		LastEvent: "mission.completed", LastEventAt: stop.Add(-time.Hour), LastEventData: map[string]any{"state": "done"}}
	h.store.Seed(lost, held, old)
	if _, err := h.outbox.Append(context.Background(), ports.Event{Type: "mission.completed", MissionID: "held", TS: held.LastEventAt, Data: held.LastEventData}); err != nil {
		t.Fatal(err)
	}
	h.restart()
	if n := h.outbox.count("lost", "mission.failed"); n != 1 {
		t.Fatalf("the lost mission.failed queued %d times, want 1", n)
	}
	ev := h.outbox.of("lost")[0]
	if !ev.TS.Equal(stop) || ev.Data["exit_code"] != 3.0 || ev.Data["reason"] != "non_zero_exit" {
		t.Fatalf("requeued event %+v", ev)
	}
	if n := h.outbox.count("held", "mission.completed"); n != 1 {
		t.Fatalf("an event still in the outbox was queued again (%d copies)", n)
	}
	if n := len(h.outbox.of("old")); n != 0 {
		t.Fatalf("an event from long before the stop was queued again (%d)", n)
	}
}
