package mission

import (
	"context"
	"reflect"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

func TestKillSessionAbortsThenKills(t *testing.T) {
	h := newHarness(t)
	m, c := h.run("m1")
	id, err := h.svc.KillSession(context.Background(), m.SessionID)
	if err != nil || id != "m1" {
		t.Fatalf("KillSession = %q, %v; want m1, nil", id, err)
	}
	ev := h.waitEvent("m1", "mission.aborted")
	if ev.Data["state"] != "aborted" || ev.Data["aborted_by"] != "operator" || ev.Data["reason"] == "" {
		t.Fatalf("mission.aborted data = %v", ev.Data)
	}
	if got := h.mission("m1"); got.State != ports.MissionAborted || got.EndedAt.IsZero() {
		t.Fatalf("state %q ended %v", got.State, got.EndedAt)
	}
	if st, _ := h.store.Get("m1"); st.State != ports.MissionAborted {
		t.Fatalf("stored state %q", st.State)
	}
	if n := kills(c); n != 1 {
		t.Fatalf("%d kills, want 1", n)
	}
	// Aborted first (stored, announced), killed after.
	var order []string
	for _, e := range h.log.snapshot() {
		switch {
		case e.Kind == "put" && e.State == ports.MissionAborted:
			order = append(order, "put")
		case e.Event == "mission.aborted":
			order = append(order, "append")
		case e.Kind == "kill":
			order = append(order, "kill")
		}
	}
	if !reflect.DeepEqual(order, []string{"put", "append", "kill"}) {
		t.Fatalf("order = %v, want put, append, kill", order)
	}

	// Killed again before the result came: the mission has ended already.
	if id := h.killRefused(m.SessionID, ports.ErrCommandEnded); id != "m1" {
		t.Fatalf("second KillSession names %q, want m1", id)
	}

	// The result of the killed process changes nothing.
	c.Finish(ports.CommandResult{ExitCode: 137, Signal: 9})
	h.waitEnded(m.SessionID)
	if got := h.mission("m1"); got.State != ports.MissionAborted {
		t.Fatalf("state %q after the result, want aborted", got.State)
	}
	h.wantEvents("m1", "mission.assigned", "mission.started", "mission.aborted")
	// And once it is over, the session has ended for good.
	h.killRefused(m.SessionID, ports.ErrCommandEnded)
	h.checkOrder()
}

func TestKillSessionOfAssignedMission(t *testing.T) {
	h := newHarness(t)
	m := h.dispatch("m1")
	c := h.cmd(m.SessionID)
	waitFor(t, func() bool {
		h.svc.mu.Lock()
		l := h.svc.missions["m1"]
		h.svc.mu.Unlock()
		l.op.Lock()
		defer l.op.Unlock()
		return l.cmd != nil
	}, "the service to hold the command")
	if id, err := h.svc.KillSession(context.Background(), m.SessionID); err != nil || id != "m1" {
		t.Fatalf("KillSession = %q, %v", id, err)
	}
	h.waitEvent("m1", "mission.aborted")
	if n := kills(c); n != 1 {
		t.Fatalf("%d kills, want 1", n)
	}
	c.ReportStarted() // the process reports running after all: the mission stays aborted
	c.Finish(ports.CommandResult{ExitCode: 143, Signal: 15})
	h.waitEnded(m.SessionID)
	h.wantEvents("m1", "mission.assigned", "mission.aborted")
}

func TestKillSessionUnknown(t *testing.T) {
	h := newHarness(t)
	if id := h.killRefused("no-such-session", ports.ErrSessionNotFound); id != "" {
		t.Fatalf("KillSession of no session names %q", id)
	}
}

func TestKillSessionNonMissionCommand(t *testing.T) {
	h := newHarness(t)
	c := h.link.Attach("agent-1", "plain-cmd", ports.StartOptions{}).(*portsfake.Command)
	id, err := h.svc.KillSession(context.Background(), "plain-cmd")
	if err != nil || id != "" {
		t.Fatalf("KillSession = %q, %v; want \"\", nil", id, err)
	}
	if n := kills(c); n != 1 {
		t.Fatalf("%d kills, want 1", n)
	}
	if n := len(h.outbox.Events()); n != 0 {
		t.Fatalf("%d events for a command that runs no mission", n)
	}
	c.Finish(ports.CommandResult{})
	h.killRefused("plain-cmd", ports.ErrCommandEnded)
}

func TestKillSessionOfEndedMission(t *testing.T) {
	h := newHarness(t)
	m, c := h.run("m1")
	h.complete("m1", c)
	h.waitEnded(m.SessionID)
	h.killRefused(m.SessionID, ports.ErrCommandEnded)
	if got := h.mission("m1"); got.State != ports.MissionCompleted {
		t.Fatalf("state %q, want completed", got.State)
	}
	if n := h.outbox.count("m1", "mission.aborted"); n != 0 {
		t.Fatalf("ended mission aborted")
	}
	if n := kills(c); n != 0 {
		t.Fatalf("%d kills of an ended command", n)
	}
}

// An operator kills a mission whose Start is still on its way to the agent:
// the mission is aborted at once, and the process must not be left running
// once Start returns.
func TestKillSessionWhileStartPendingKillsTheProcess(t *testing.T) {
	h := newHarness(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	h.link.SetBeforeStart(func(string, ports.CommandSpec) error {
		close(entered)
		<-release
		return nil
	})
	m := h.dispatch("m1")
	testkit.Receive(t, waitTimeout, entered, "Start not called")
	id, err := h.svc.KillSession(context.Background(), m.SessionID)
	if err != nil || id != "m1" {
		t.Fatalf("KillSession = %q, %v", id, err)
	}
	h.waitEvent("m1", "mission.aborted")
	close(release)
	c := h.cmd(m.SessionID)
	if !testkit.Within(waitTimeout, func() bool { return kills(c) > 0 }) {
		t.Errorf("the process of aborted mission m1 was started and never killed: it runs on with no mission")
	}
	c.Finish(ports.CommandResult{ExitCode: 137, Signal: 9})
	h.waitEnded(m.SessionID)
	if got := h.mission("m1"); got.State != ports.MissionAborted {
		t.Fatalf("state %q, want aborted", got.State)
	}
}
