package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
)

// TestContractStreamDropLosesNothing: the executor stream is dropped while
// missions run, and stays down while one of them ends and the other moves
// on. After the reconnect, executor.resync comes first, then everything
// emitted meanwhile, in order, nothing missing.
func TestContractStreamDropLosesNothing(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1})
	goA, waitA := e.gate("drop-a")
	goB1, waitB1 := e.gate("drop-b1")
	goB2, waitB2 := e.gate("drop-b2")
	e.dispatch("m-drop-a", waitA+"; echo A-finished")
	e.dispatch("m-drop-b", waitB1+"; echo B-half; "+waitB2+"; echo B-done")
	e.waitEvent("m-drop-a", evStarted, patience)
	e.waitEvent("m-drop-b", evStarted, patience)

	// Down, and kept down: the handshake is refused until the test says so.
	conns := e.fake.ExecutorConnections()
	e.fake.SetExecutorStreamStatus(503)
	e.fake.DropExecutorStream()
	eventually(t, patience, "status shows the stream down", func() bool { return e.aiwgStatus().body["connected"] == false })
	beforeDown := len(e.fake.Frames())

	touch(t, goA)
	touch(t, goB1)
	eventually(t, patience, "m-drop-a stored as completed while the stream is down", func() bool {
		return e.missionState("m-drop-a") == "completed"
	})
	eventually(t, patience, "m-drop-b made progress while the stream is down", func() bool {
		m, _ := e.mission("m-drop-b")
		return m.Iteration != nil && *m.Iteration >= 1
	})
	if n := e.fake.ExecutorConnections(); n != conns {
		t.Fatalf("the stream came back while refused (%d → %d)", conns, n)
	}
	for _, f := range e.fake.Frames()[beforeDown:] {
		t.Errorf("frame recorded while the stream was down: %s", f.Raw)
	}

	e.fake.SetExecutorStreamStatus(0)
	first := e.waitConnFirst(conns, patience)
	if first.Event != evResync {
		t.Fatalf("first frame after the reconnect is %s: %s", first.Event, first.Raw)
	}
	var owned []string
	for _, v := range first.Data["owned_mission_ids"].([]any) {
		owned = append(owned, v.(string))
	}
	if !slices.Equal(owned, []string{"m-drop-b"}) {
		t.Errorf("resync owned_mission_ids %v, want [m-drop-b] (m-drop-a has ended)", owned)
	}
	endA := e.waitEnd("m-drop-a", patience)
	if endA.Conn <= conns || endA.Event != evCompleted {
		t.Errorf("m-drop-a end %s on connection #%d", endA.Event, endA.Conn)
	}
	e.waitEvent("m-drop-b", evResumed, patience)
	touch(t, goB2)
	endB := e.waitEnd("m-drop-b", patience)
	if endB.Event != evCompleted {
		t.Errorf("m-drop-b ended %s %v", endB.Event, endB.Data)
	}

	// Nothing lost, in order.
	a := e.events("m-drop-a")
	if got := slices.DeleteFunc(evNames(a), func(s string) bool { return s == "progress" }); fmt.Sprint(got) != "[assigned started completed]" || countEv(a, evProgress) > 1 {
		t.Errorf("m-drop-a events %v, want [assigned started (progress) completed]", evNames(a))
	}
	b := e.events("m-drop-b")
	want := []string{"assigned", "started", "progress", "reconnected", "resumed", "completed"}
	got := slices.DeleteFunc(evNames(b), func(s string) bool { return s == "progress" })
	got = slices.Insert(got, 2, "progress")
	if !slices.Equal(got, want) || countEv(b, evProgress) < 1 || indexOf(b, evProgress) != 2 {
		t.Errorf("m-drop-b events %v, want %v (a second progress is allowed after resumed)", evNames(b), want)
	}
	// The events emitted while down arrive after the resync, on the new connection.
	for _, f := range []fakeaiwg.Frame{only1(e.events("m-drop-b"), evProgress), endA} {
		if f.Conn <= conns {
			t.Errorf("%s of %s arrived on connection #%d, before the drop?", f.Event, f.MissionID, f.Conn)
		}
	}
	// Their ts is when they happened, not when they were sent.
	if p := only1(e.events("m-drop-b"), evProgress); p.TS > first.TS {
		t.Errorf("progress emitted while down is stamped %s, after the resync %s", p.TS, first.TS)
	}
}

func only1(fs []fakeaiwg.Frame, ev string) fakeaiwg.Frame {
	if l := onlyEv(fs, ev); len(l) > 0 {
		return l[0]
	}
	return fakeaiwg.Frame{}
}

// TestContractManualReconnect: POST /api/v1/aiwg/reconnect opens a new
// executor connection at once: when connected, and when the client is
// waiting out a long backoff.
func TestContractManualReconnect(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1})

	// Connected: a fresh connection, resync first.
	n := e.fake.ExecutorConnections()
	r := e.reconnect()
	if r.status != 202 || r.body["configured"] != true {
		t.Fatalf("reconnect: %s", r)
	}
	if f := e.waitConnFirst(n, patience); f.Event != evResync {
		t.Errorf("first frame after reconnect: %s", f.Raw)
	}
	if e.fake.ExecutorConnections() != n+1 {
		t.Errorf("connections %d → %d, want one more", n, e.fake.ExecutorConnections())
	}

	// Waiting out a backoff: refuse the stream until the client has failed
	// three times in a row (1 s, 2 s, 4 s waits); its next wait is 6.4–8 s.
	regs := len(e.fake.ExecutorRegistrations())
	e.fake.SetExecutorStreamStatus(503)
	n = e.fake.ExecutorConnections()
	e.fake.DropExecutorStream()
	eventually(t, patience, "three refused reconnects", func() bool { return len(e.fake.ExecutorRegistrations()) >= regs+3 })
	failedAt := time.Now()
	e.fake.SetExecutorStreamStatus(0)
	r = e.reconnect()
	if r.status != 202 {
		t.Fatalf("reconnect: %s", r)
	}
	f := e.waitConnFirst(n, patience)
	if took := time.Since(failedAt); took > 3*time.Second {
		t.Errorf("reconnected %v after POST /api/v1/aiwg/reconnect; the backoff was not skipped", took)
	}
	if f.Event != evResync {
		t.Errorf("first frame after reconnect: %s", f.Raw)
	}
	eventually(t, patience, "status connected", func() bool { return e.aiwgStatus().body["connected"] == true })
}

// TestContractLargeBacklogAfterReconnect: more events pile up while the
// executor stream is down than one read of the outbox returns; after the
// reconnect all of them arrive after the resync, each mission's in order.
func TestContractLargeBacklogAfterReconnect(t *testing.T) {
	t.Parallel()
	const n = 150
	e := newContract(t, copts{agents: 1})
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("m-backlog-%03d", i)
		e.dispatch(ids[i], fmt.Sprintf("sleep 2; echo done-%d", i))
	}
	conns := e.fake.ExecutorConnections()
	e.fake.SetExecutorStreamStatus(503)
	e.fake.DropExecutorStream()
	eventually(t, patience, "stream down", func() bool { return e.aiwgStatus().body["connected"] == false })
	eventually(t, patience, "every mission stored as ended", func() bool {
		for _, id := range ids {
			if e.missionState(id) != "completed" {
				return false
			}
		}
		return true
	})
	e.fake.SetExecutorStreamStatus(0)
	first := e.waitConnFirst(conns, patience)
	if first.Event != evResync {
		t.Fatalf("first frame after the reconnect: %s", first.Raw)
	}
	for _, id := range ids {
		e.waitEnd(id, patience)
	}
	backlog := 0
	for _, f := range e.fake.Frames() {
		if f.Conn == first.Conn {
			backlog++
		}
	}
	t.Logf("%d frames on the connection after the outage", backlog)
	for _, id := range ids {
		fs := e.events(id)
		got := slices.DeleteFunc(evNames(fs), func(s string) bool { return s == "progress" })
		if fmt.Sprint(got) != "[assigned started completed]" {
			t.Errorf("%s events %v", id, evNames(fs))
		}
	}
}

// TestContractResyncAnnouncesTheRealState: a mission that is assigned but
// has not started (its agent's link went silent right after the dispatch)
// is owned at the next resync. Whatever the resync says about it must be
// true: a mission.resumed {state: "running"} for a mission stored as
// assigned tells aiwg serve it runs when it does not (and it may never).
func TestContractResyncAnnouncesTheRealState(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 0})
	proxy, _ := remoteAgent(t, e.dataDir, e.s().AgentURL, "remote-02")
	waitAgents(t, e.s(), "remote-02")
	proxy.hold() // the command goes out into the void
	e.dispatch("m-unstarted", "echo never seen", "executor_filter", map[string]any{"agent_id": "remote-02"})
	if st := e.missionState("m-unstarted"); st != "assigned" {
		t.Fatalf("mission %s right after dispatch", st)
	}
	n := e.fake.ExecutorConnections()
	e.fake.DropExecutorStream()
	first := e.waitConnFirst(n, patience)
	if !slices.Contains(first.Data["owned_mission_ids"].([]any), any("m-unstarted")) {
		t.Errorf("resync does not own the assigned mission: %s", first.Raw)
	}
	rec := e.waitEvent("m-unstarted", evReconnected, patience)
	if rec.Conn != first.Conn {
		t.Errorf("reconnected on connection #%d", rec.Conn)
	}
	// Give the pair time to arrive, then compare with the record.
	ctx2, cancel2 := ctxFor(5 * time.Second)
	defer cancel2()
	res, err := e.fake.WaitFrame(ctx2, func(f fakeaiwg.Frame) bool { return f.MissionID == "m-unstarted" && f.Event == evResumed })
	st := e.missionState("m-unstarted")
	if err == nil && res.Data["state"] == "running" && st != "running" {
		t.Errorf("the resync announced mission.resumed %v for a mission that is %s (never started)", res.Data, st)
	}
	proxy.cut()
	end := e.waitEnd("m-unstarted", patience)
	if end.Event != evFailed {
		t.Errorf("the never-started mission ended %s %v", end.Event, end.Data)
	}
}
