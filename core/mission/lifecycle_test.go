package mission

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

func TestStartedEvent(t *testing.T) {
	for _, tc := range []struct{ objective, runtime string }{
		{"echo hi", "shell"},
		{"claude -p 'fix the tests'", "claude-code"},
		{"claude", "claude-code"},
		{"claudette", "shell"},
	} {
		t.Run(tc.objective, func(t *testing.T) {
			h := newHarness(t)
			req := request("m1")
			req.Objective = tc.objective
			m, err := h.svc.Dispatch(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			c := h.cmd(m.SessionID)
			// Output before the process is reported running emits nothing yet.
			c.ReportStarted()
			ev := h.waitEvent("m1", "mission.started")
			want := map[string]any{"state": "running", "agent_runtime": tc.runtime, "pty_session_id": m.SessionID}
			if !reflect.DeepEqual(ev.Data, want) {
				t.Fatalf("mission.started data = %v, want %v", ev.Data, want)
			}
			got := h.mission("m1")
			if got.State != ports.MissionRunning || got.AgentRuntime != tc.runtime || got.StartedAt.IsZero() {
				t.Fatalf("mission after start: state %q runtime %q started_at %v", got.State, got.AgentRuntime, got.StartedAt)
			}
			if st, _ := h.store.Get("m1"); st.State != ports.MissionRunning {
				t.Fatalf("stored state %q, want running", st.State)
			}
			h.checkOrder()
		})
	}
}

func TestCompletedWithSummary(t *testing.T) {
	h := newHarness(t)
	m, c := h.run("m1")
	emit(c, "\x1b[1mhello\x1b[0m world\r\n")
	emit(c, "\x1b[32msecond\x1b[0m line\r\n")
	c.Finish(ports.CommandResult{ExitCode: 0, Duration: time.Second})

	ev := h.waitEvent("m1", "mission.completed")
	summary, _ := ev.Data["summary"].(string)
	if summary != "hello world\nsecond line\n" {
		t.Fatalf("summary = %q, want the output without escape sequences", summary)
	}
	if ev.Data["state"] != "done" || ev.Data["exit_code"] != 0 {
		t.Fatalf("mission.completed data = %v", ev.Data)
	}
	got := h.waitState("m1", ports.MissionCompleted)
	if exitCode(got) != 0 || got.Summary != summary || got.EndedAt.IsZero() {
		t.Fatalf("completed mission: exit %v summary %q ended %v", exitCode(got), got.Summary, got.EndedAt)
	}
	if st, _ := h.store.Get("m1"); st.State != ports.MissionCompleted {
		t.Fatalf("stored state %q", st.State)
	}
	h.waitEnded(m.SessionID)
	// A progress event may or may not have been due before the result.
	types := h.outbox.types("m1")
	if len(types) < 3 || types[0] != "mission.assigned" || types[1] != "mission.started" || types[len(types)-1] != "mission.completed" ||
		(len(types) == 4 && types[2] != "mission.progress") || len(types) > 4 {
		t.Fatalf("events = %v", types)
	}
	h.checkOrder()
}

func TestSummaryIsBoundedTail(t *testing.T) {
	h := newHarness(t)
	_, c := h.run("m1")
	for i := range 200 {
		emit(c, fmt.Sprintf("\x1b[33mline %03d\x1b[0m of a long log\r\n", i))
	}
	ev := h.complete("m1", c)
	summary := ev.Data["summary"].(string)
	if len(summary) > 2048 {
		t.Fatalf("summary is %d bytes, want at most 2 KiB", len(summary))
	}
	if !strings.HasSuffix(summary, "line 199 of a long log\n") || strings.Contains(summary, "\x1b") || strings.Contains(summary, "line 000") {
		t.Fatalf("summary is not the cleaned tail: %q", summary)
	}
}

func TestFailures(t *testing.T) {
	for _, tc := range []struct {
		name       string
		result     ports.CommandResult
		reason     string
		exit       any
		errPrefix  string
		wantExitEv bool
	}{
		{"non-zero exit", ports.CommandResult{ExitCode: 3}, ReasonNonZeroExit, 3, "objective exited with code 3", true},
		{"session lost", ports.CommandResult{ExitCode: -1, Error: ports.ErrCommandLost.Error()}, ReasonSessionLost, nil, ports.ErrCommandLost.Error(), false},
		{"timed out", ports.CommandResult{ExitCode: 124, TimedOut: true}, ReasonTimedOut, 124, "objective timed out", true},
		{"killed by signal", ports.CommandResult{ExitCode: 137, Signal: 9}, ReasonNonZeroExit, 137, "objective killed by signal 9", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			_, c := h.run("m1")
			emit(c, "working\r\n")
			c.Finish(tc.result)
			ev := h.waitEvent("m1", "mission.failed")
			if ev.Data["state"] != "failed" || ev.Data["reason"] != tc.reason || !strings.HasPrefix(fmt.Sprint(ev.Data["error"]), tc.errPrefix) {
				t.Fatalf("mission.failed data = %v, want reason %s error %q", ev.Data, tc.reason, tc.errPrefix)
			}
			if code, ok := ev.Data["exit_code"]; ok != tc.wantExitEv || (ok && code != tc.exit) {
				t.Fatalf("mission.failed exit_code = %v (present %v), want %v", code, ok, tc.exit)
			}
			got := h.waitState("m1", ports.MissionFailed)
			if got.Reason != tc.reason || exitCode(got) != tc.exit || got.Summary != "working\n" {
				t.Fatalf("failed mission: reason %q exit %v summary %q", got.Reason, exitCode(got), got.Summary)
			}
			h.checkOrder()
		})
	}
}

func TestStartErrorFailsMission(t *testing.T) {
	h := newHarness(t)
	h.link.SetBeforeStart(func(string, ports.CommandSpec) error { return ports.ErrAgentNotConnected })
	m := h.dispatch("m1")
	ev := h.waitEvent("m1", "mission.failed")
	if ev.Data["reason"] != ReasonSessionStart || !strings.Contains(fmt.Sprint(ev.Data["error"]), ports.ErrAgentNotConnected.Error()) {
		t.Fatalf("mission.failed data = %v, want session_start_failed", ev.Data)
	}
	if _, ok := ev.Data["exit_code"]; ok {
		t.Fatalf("exit_code in %v for a process that never ran", ev.Data)
	}
	h.waitState("m1", ports.MissionFailed)
	h.waitEnded(m.SessionID)
	h.wantEvents("m1", "mission.assigned", "mission.failed")
	h.killRefused(m.SessionID, ports.ErrSessionNotFound) // it never started
	h.checkOrder()
}

func TestResultBeforeStartedFailsAsNotStarted(t *testing.T) {
	h := newHarness(t)
	m := h.dispatch("m1")
	c := h.cmd(m.SessionID)
	c.Finish(ports.CommandResult{ExitCode: 127, Error: "sh: not found"})
	ev := h.waitEvent("m1", "mission.failed")
	if ev.Data["reason"] != ReasonSessionStart || ev.Data["error"] != "sh: not found" {
		t.Fatalf("mission.failed data = %v", ev.Data)
	}
	h.wantEvents("m1", "mission.assigned", "mission.failed")
}

// A process that started and ended at once: OnStarted fires and Done is
// closed before the service looked, yet it hears started then completed.
func TestStartedAndDoneAtOnce(t *testing.T) {
	for i := range 20 {
		h := newHarness(t)
		id := fmt.Sprintf("m%d", i)
		m := h.dispatch(id)
		c := h.cmd(m.SessionID)
		emit(c, "quick\r\n")
		c.ReportStarted()
		c.Finish(ports.CommandResult{ExitCode: 0})
		h.waitEvent(id, "mission.completed")
		types := h.outbox.types(id)
		if types[0] != "mission.assigned" || types[1] != "mission.started" || types[len(types)-1] != "mission.completed" {
			t.Fatalf("run %d: events = %v, want assigned, started, …, completed", i, types)
		}
		if got := h.mission(id); got.Summary != "quick\n" {
			t.Fatalf("summary = %q", got.Summary)
		}
		h.checkOrder()
	}
}

// The same, when OnStarted and the result happen before Start even returns.
func TestStartedAndDoneBeforeStartReturns(t *testing.T) {
	h := newHarness(t)
	h.link.SetOnStart(func(c *portsfake.Command) {
		c.ReportStarted()
		emit(c, "instant\r\n")
		c.Finish(ports.CommandResult{})
	})
	h.dispatch("m1")
	h.waitEvent("m1", "mission.completed")
	var got []string
	for _, typ := range h.outbox.types("m1") {
		if typ != "mission.progress" { // one may or may not be due before the end
			got = append(got, typ)
		}
	}
	if !reflect.DeepEqual(got, []string{"mission.assigned", "mission.started", "mission.completed"}) {
		t.Fatalf("events = %v", h.outbox.types("m1"))
	}
	if got := h.mission("m1"); got.Summary != "instant\n" || exitCode(got) != 0 {
		t.Fatalf("mission: summary %q exit %v", got.Summary, exitCode(got))
	}
}

func TestProgressRateLimited(t *testing.T) {
	// A standing clock: with one that runs, the machine's time between the
	// chunks added to their 0.5 s, and a slow run made a chunk early due.
	h := newHarnessOn(t, portsfake.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
	_, c := h.run("m1")
	// Output every 0.5 s for 11 s, on the service's clock. Each chunk is
	// handled before the clock moves on: the chunk's own callback and the
	// service's progress decision each read the clock once.
	for i := 1; i <= 22; i++ {
		before := h.clock.Calls()
		emit(c, fmt.Sprintf("line %d\r\n", i))
		waitFor(t, func() bool { return h.clock.Calls() >= before+2 }, "line %d handled", i)
		h.clock.Advance(500 * time.Millisecond)
	}
	// Wait for the last chunk's decision, then end the mission.
	h.complete("m1", c)

	var progress []ports.Event
	for _, e := range h.outbox.of("m1") {
		if e.Type == "mission.progress" {
			progress = append(progress, e)
		}
	}
	if len(progress) != 3 {
		t.Fatalf("%d progress events over 11 s of output, want 3 (at 0, 5 and 10 s): %v", len(progress), progress)
	}
	for i, e := range progress {
		if e.Data["iteration"] != i+1 || e.Data["phase"] != "execution" {
			t.Errorf("progress %d data = %v, want iteration %d", i, e.Data, i+1)
		}
		if want := fmt.Sprintf("line %d", 1+10*i); e.Data["summary"] != want {
			t.Errorf("progress %d summary = %q, want the last line %q", i, e.Data["summary"], want)
		}
		if i > 0 && e.TS.Sub(progress[i-1].TS) < ProgressInterval {
			t.Errorf("progress %d only %v after the previous one", i, e.TS.Sub(progress[i-1].TS))
		}
	}
	got := h.mission("m1")
	if got.Iteration != 3 {
		t.Errorf("stored iteration %d, want 3", got.Iteration)
	}
	h.checkOrder()
}

func TestNoProgressBeforeStarted(t *testing.T) {
	h := newHarness(t)
	m := h.dispatch("m1")
	c := h.cmd(m.SessionID)
	emit(c, "early output\r\n")
	emit(c, "more\r\n")
	c.ReportStarted()
	h.waitEvent("m1", "mission.started")
	h.complete("m1", c)
	types := h.outbox.types("m1")
	if types[0] != "mission.assigned" || types[1] != "mission.started" {
		t.Fatalf("events = %v: progress before mission.started", types)
	}
}

// Many missions live at once: each one's events are in lifecycle order and
// each event follows the Put of its state.
func TestEventsInOrderAcrossConcurrentMissions(t *testing.T) {
	h := newHarness(t)
	const n = 12
	together(n, func(i int) {
		id := fmt.Sprintf("m%02d", i)
		m, err := h.svc.Dispatch(context.Background(), request(id))
		if err != nil {
			t.Error(err)
			return
		}
		var c *portsfake.Command
		if !testkit.Within(waitTimeout, func() bool { c = h.link.Command(m.SessionID); return c != nil }) {
			t.Errorf("%s: not started", id)
			return
		}
		c.ReportStarted()
		for j := range 5 {
			emit(c, fmt.Sprintf("%s step %d\r\n", id, j))
		}
		c.Finish(ports.CommandResult{ExitCode: i % 2})
	})
	for i := range n {
		id := fmt.Sprintf("m%02d", i)
		end := ports.EventCompleted
		if i%2 == 1 {
			end = ports.EventFailed
		}
		h.waitEvent(id, end)
		types := h.outbox.types(id)
		if types[0] != "mission.assigned" || types[1] != "mission.started" || types[len(types)-1] != string(end) {
			t.Errorf("%s: events = %v", id, types)
		}
		for _, typ := range types[2 : len(types)-1] {
			if typ != "mission.progress" {
				t.Errorf("%s: unexpected %s between started and the end", id, typ)
			}
		}
		// The store's sequence of states announces the same events, in the same order.
		var stored []string
		for _, p := range h.putsOf(id) {
			stored = append(stored, string(p.LastEvent))
		}
		if !reflect.DeepEqual(stored, types) {
			t.Errorf("%s: stored %v, emitted %v", id, stored, types)
		}
	}
	h.checkOrder()
}

// A full disk: what a session did is neither announced before it is stored
// nor lost; it is stored, and announced, once the store writes again.
func TestTransitionNotStoredIsRetriedUntilStored(t *testing.T) {
	h := newHarness(t)
	m := h.dispatch("m1")
	c := h.cmd(m.SessionID)
	h.store.SetPutErr(errDisk)
	c.ReportStarted()
	waitFor(t, func() bool { return h.store.PutCalls() >= 3 }, "the Put of mission.started to be retried")
	h.wantEvents("m1", "mission.assigned")
	if got := h.mission("m1"); got.State != ports.MissionAssigned {
		t.Fatalf("in-memory state %q while the store fails, want assigned", got.State)
	}
	h.store.SetPutErr(nil)
	h.waitEvent("m1", "mission.started")
	h.complete("m1", c)
	h.checkOrder()
}
