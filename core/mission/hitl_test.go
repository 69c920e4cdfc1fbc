package mission

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// waitHITL emits a prompt and waits for its mission.hitl_required (the nth of the mission).
func (h *harness) waitHITL(id string, c *portsfake.Command, output string, nth int) ports.Event {
	h.t.Helper()
	emit(c, output)
	return h.waitEvent(id, "mission.hitl_required", nth)
}

// ask runs mission id and has its command print prompt: it returns the
// mission, its command and the id of the HITL request that follows.
func (h *harness) ask(id, prompt string) (ports.Mission, *portsfake.Command, string) {
	h.t.Helper()
	m, c := h.run(id)
	return m, c, h.waitHITL(id, c, prompt, 1).Data["hitl_id"].(string)
}

func TestHITLDetectedAndAnsweredByOperator(t *testing.T) {
	h := newHarness(t)
	m, c := h.run("m1")
	ev := h.waitHITL("m1", c, "Doing things\r\nProceed? [y/N] ", 1)
	hitlID, _ := ev.Data["hitl_id"].(string)
	if hitlID == "" || ev.Data["prompt"] != "Proceed? [y/N]" || ev.Data["context"] != "Doing things" {
		t.Fatalf("mission.hitl_required data = %v", ev.Data)
	}
	got := h.mission("m1")
	if got.State != ports.MissionHITLRequired || got.HITL == nil || got.HITL.ID != hitlID || got.HITL.CreatedAt.IsZero() {
		t.Fatalf("mission waiting: state %q HITL %+v", got.State, got.HITL)
	}
	if st, _ := h.store.Get("m1"); st.State != ports.MissionHITLRequired || st.HITL == nil || st.HITL.ID != hitlID {
		t.Fatalf("stored: state %q HITL %+v", st.State, st.HITL)
	}
	open := h.svc.OpenHITL()
	if len(open) != 1 {
		t.Fatalf("OpenHITL = %+v, want one request", open)
	}
	o := open[0]
	if o.ID != hitlID || o.Prompt != "Proceed? [y/N]" || o.Context != "Doing things" || o.MissionID != "m1" || o.AgentID != "agent-1" || o.SessionID != m.SessionID {
		t.Fatalf("OpenHITL[0] = %+v", o)
	}

	if _, err := h.svc.RespondHITL(context.Background(), "no-such-hitl", "y"); !errors.Is(err, ports.ErrHITLNotFound) {
		t.Fatalf("unknown hitl id: err = %v, want ErrHITLNotFound", err)
	}

	resp, err := h.svc.RespondHITL(context.Background(), hitlID, "y")
	if err != nil {
		t.Fatalf("RespondHITL: %v", err)
	}
	if resp.State != ports.MissionRunning || resp.HITL != nil {
		t.Fatalf("answered mission: state %q HITL %+v", resp.State, resp.HITL)
	}
	if got := c.StdinWrites(); !reflect.DeepEqual(got, []string{"y\n"}) {
		t.Fatalf("stdin = %q, want the answer and a newline", got)
	}
	ev = h.waitEvent("m1", "mission.resumed")
	if want := map[string]any{"state": "running", "resumed_from": "hitl_required"}; !reflect.DeepEqual(ev.Data, want) {
		t.Fatalf("mission.resumed data = %v, want %v", ev.Data, want)
	}
	if got := h.mission("m1"); got.State != ports.MissionRunning {
		t.Fatalf("state %q after the answer", got.State)
	}
	if st, _ := h.store.Get("m1"); st.State != ports.MissionRunning || st.HITL != nil {
		t.Fatalf("stored after the answer: state %q HITL %+v", st.State, st.HITL)
	}
	if open := h.svc.OpenHITL(); len(open) != 0 {
		t.Fatalf("OpenHITL after the answer = %+v", open)
	}
	// The answer reached the session before its mission.resumed was emitted.
	var order []string
	for _, e := range h.log.snapshot() {
		if e.Kind == "stdin" || e.Event == "mission.resumed" {
			order = append(order, e.Kind)
		}
	}
	if !reflect.DeepEqual(order, []string{"stdin", "append"}) {
		t.Fatalf("stdin and mission.resumed in order %v", order)
	}

	// The echo of the answer is not a prompt; the same question asked again is a new one.
	ev2 := h.waitHITL("m1", c, "y\r\nstep 2\r\nProceed? [y/N] ", 2)
	id2, _ := ev2.Data["hitl_id"].(string)
	if id2 == "" || id2 == hitlID {
		t.Fatalf("second prompt got hitl_id %q (first %q)", id2, hitlID)
	}
	if n := h.outbox.count("m1", "mission.hitl_required"); n != 2 {
		t.Fatalf("%d hitl_required events, want 2", n)
	}
	h.checkOrder()
}

func TestHITLAnsweredOverExecutorStream(t *testing.T) {
	h := newHarness(t)
	_, c := h.run("m1")
	ev := h.waitHITL("m1", c, "Do you want to overwrite config.yaml? (yes/no) ", 1)
	hitlID := ev.Data["hitl_id"].(string)

	if err := h.svc.HITLResponded(context.Background(), "no-such-hitl", "yes"); !errors.Is(err, ports.ErrHITLNotFound) {
		t.Fatalf("unknown hitl id: err = %v, want ErrHITLNotFound", err)
	}
	if err := h.svc.HITLResponded(context.Background(), hitlID, "yes"); err != nil {
		t.Fatalf("HITLResponded: %v", err)
	}
	if got := c.StdinWrites(); !reflect.DeepEqual(got, []string{"yes\n"}) {
		t.Fatalf("stdin = %q", got)
	}
	ev = h.waitEvent("m1", "mission.resumed")
	if ev.Data["resumed_from"] != "hitl_required" || ev.Data["state"] != "running" {
		t.Fatalf("mission.resumed data = %v", ev.Data)
	}
	if got := h.mission("m1"); got.State != ports.MissionRunning || got.HITL != nil {
		t.Fatalf("state %q HITL %+v", got.State, got.HITL)
	}
	if open := h.svc.OpenHITL(); len(open) != 0 {
		t.Fatalf("OpenHITL = %+v", open)
	}
	h.complete("m1", c)
	h.checkOrder()
}

// A request answered once is no longer open: answering it again is a 409
// hitl_not_open for REST (openapi.yaml: "already answered, or its mission
// or session ended"), not a 404.
func TestHITLSecondAnswerIsNotOpen(t *testing.T) {
	h := newHarness(t)
	_, c, hitlID := h.ask("m1", "Proceed? [y/N] ")
	if _, err := h.svc.RespondHITL(context.Background(), hitlID, "y"); err != nil {
		t.Fatal(err)
	}
	_, err := h.svc.RespondHITL(context.Background(), hitlID, "n")
	if !errors.Is(err, ports.ErrHITLNotOpen) {
		t.Errorf("second answer via REST: err = %v, want ErrHITLNotOpen", err)
	}
	if err := h.svc.HITLResponded(context.Background(), hitlID, "n"); !errors.Is(err, ports.ErrHITLNotOpen) {
		t.Errorf("second answer via the executor stream: err = %v, want ErrHITLNotOpen", err)
	}
	if got := c.StdinWrites(); !reflect.DeepEqual(got, []string{"y\n"}) {
		t.Errorf("stdin = %q: a second answer reached the session", got)
	}
	if n := h.outbox.count("m1", "mission.resumed"); n != 1 {
		t.Errorf("%d mission.resumed events, want 1", n)
	}
}

// A request whose mission ended is no longer open either.
func TestHITLAnswerAfterMissionEndedIsNotOpen(t *testing.T) {
	h := newHarness(t)
	m, c, hitlID := h.ask("m1", "Proceed? [y/N] ")
	c.Finish(ports.CommandResult{ExitCode: 1})
	h.waitEvent("m1", "mission.failed")
	h.waitEnded(m.SessionID)
	if got := h.mission("m1"); got.HITL != nil {
		t.Fatalf("ended mission still holds its HITL request %+v", got.HITL)
	}
	if open := h.svc.OpenHITL(); len(open) != 0 {
		t.Fatalf("OpenHITL = %+v", open)
	}
	if _, err := h.svc.RespondHITL(context.Background(), hitlID, "y"); !errors.Is(err, ports.ErrHITLNotOpen) {
		t.Errorf("answer after the mission ended: err = %v, want ErrHITLNotOpen", err)
	}
}

func TestHITLWriteFailureKeepsRequestOpen(t *testing.T) {
	h := newHarness(t)
	_, c, hitlID := h.ask("m1", "Continue? [Y/n] ")
	c.SetStdinError(ports.ErrAgentNotConnected)
	if _, err := h.svc.RespondHITL(context.Background(), hitlID, "y"); !errors.Is(err, ports.ErrAgentNotConnected) {
		t.Fatalf("err = %v, want ErrAgentNotConnected", err)
	}
	if got := h.mission("m1"); got.State != ports.MissionHITLRequired {
		t.Fatalf("state %q after a failed write, want hitl_required", got.State)
	}
	if n := h.outbox.count("m1", "mission.resumed"); n != 0 {
		t.Fatalf("mission.resumed emitted although the answer was not written")
	}
	if open := h.svc.OpenHITL(); len(open) != 1 {
		t.Fatalf("OpenHITL = %+v, want the request still open", open)
	}
	c.SetStdinError(nil)
	if _, err := h.svc.RespondHITL(context.Background(), hitlID, "y"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	h.waitEvent("m1", "mission.resumed")
}

func TestOpenHITLOldestFirst(t *testing.T) {
	h := newHarness(t)
	_, ca := h.run("a")
	_, cb := h.run("b")
	// b asks first, then a.
	idB := h.waitHITL("b", cb, "Overwrite? [y/N] ", 1).Data["hitl_id"].(string)
	idA := h.waitHITL("a", ca, "Proceed? [y/N] ", 1).Data["hitl_id"].(string)
	open := h.svc.OpenHITL()
	if len(open) != 2 || open[0].ID != idB || open[1].ID != idA || open[0].MissionID != "b" || open[1].MissionID != "a" {
		t.Fatalf("OpenHITL = %+v, want b's request then a's", open)
	}
}
