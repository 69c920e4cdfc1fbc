package mission

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func TestPermissionAnswer(t *testing.T) {
	for _, c := range []struct {
		text    string
		allow   bool
		message string
	}{
		{"allow", true, ""},
		{"Yes", true, ""},
		{"y", true, ""},
		{"allow: go ahead", true, "go ahead"},
		{"approved, carefully", true, "carefully"},
		{"deny", false, ""},
		{"deny not in this repository", false, "not in this repository"},
		{"no", false, ""},
		{"", false, ""},
		{"please do not", false, "please do not"},
		{"allowance", false, "allowance"},
	} {
		allow, msg := PermissionAnswer(c.text)
		if allow != c.allow || msg != c.message {
			t.Errorf("%q: %v %q, want %v %q", c.text, allow, msg, c.allow, c.message)
		}
	}
}

// Claude in a mission asks through the permission tool: the mission waits
// for a human with the question; the answer goes back as a decision, never
// typed into the terminal; the same question asked again (after a
// reconnect) is the open one; another agent cannot ask for this mission;
// a second question waits for the first to be answered.
func TestPermissionQuestionsAreTheMissionsHITL(t *testing.T) {
	h := newHarness(t)
	m, c := h.run("m1")
	req := ports.PermissionRequest{AgentID: "agent-1", CommandID: m.SessionID, RequestID: "r1", ToolName: "Bash", InputJSON: `{"command":"rm -rf build"}`}
	if h.svc.PermissionAsked(ports.PermissionRequest{AgentID: "agent-2", CommandID: m.SessionID, RequestID: "rx"}) {
		t.Fatal("another agent's request was taken")
	}
	if h.svc.PermissionAsked(ports.PermissionRequest{AgentID: "agent-1", CommandID: "not-a-mission", RequestID: "ry"}) {
		t.Fatal("a request for no mission was taken")
	}
	if !h.svc.PermissionAsked(req) {
		t.Fatal("the mission's request was not taken")
	}
	ev := h.waitEvent("m1", "mission.hitl_required", 1)
	hitlID, _ := ev.Data["hitl_id"].(string)
	if prompt, _ := ev.Data["prompt"].(string); !strings.Contains(prompt, "Bash") || ev.Data["context"] != req.InputJSON || len(ev.Data) != 3 {
		t.Fatalf("hitl_required data %v", ev.Data)
	}
	if !h.svc.PermissionAsked(req) || h.outbox.count("m1", "mission.hitl_required") != 1 {
		t.Fatalf("asked again: %d hitl_required", h.outbox.count("m1", "mission.hitl_required"))
	}
	second := req
	second.RequestID, second.ToolName = "r2", "Write"
	if !h.svc.PermissionAsked(second) {
		t.Fatal("a second question was not taken")
	}
	if _, err := h.svc.RespondHITL(context.Background(), hitlID, "deny: not here"); err != nil {
		t.Fatal(err)
	}
	if got := c.StdinWrites(); len(got) != 0 {
		t.Fatalf("a permission answer was typed into the terminal: %q", got)
	}
	// The queued question comes next.
	ev2 := h.waitEvent("m1", "mission.hitl_required", 2)
	if prompt, _ := ev2.Data["prompt"].(string); !strings.Contains(prompt, "Write") {
		t.Fatalf("second question %v", ev2.Data)
	}
	if _, err := h.svc.RespondHITL(context.Background(), ev2.Data["hitl_id"].(string), "allow"); err != nil {
		t.Fatal(err)
	}
	want := []string{m.SessionID + " r1 false not here", m.SessionID + " r2 true "}
	if got := h.decisions.all(); !reflect.DeepEqual(got, want) {
		t.Fatalf("decisions %q, want %q", got, want)
	}
}

// A mission's timeline holds its events but progress, with a note, bounded.
func TestTimeline(t *testing.T) {
	m := ports.Mission{ID: "m"}
	now := time.Unix(1_800_000_000, 0)
	event(&m, ports.EventAssigned, now, map[string]any{"state": "assigned"})
	event(&m, ports.EventProgress, now, map[string]any{"last_output_line": "x"})
	event(&m, ports.EventHITLRequired, now, map[string]any{"hitl_id": "h", "prompt": "Proceed?", "context": ""})
	got := m.Timeline
	if len(got) != 2 || got[0].Event != ports.EventAssigned || got[0].Note != "assigned" || got[1].Note != "Proceed?" {
		t.Fatalf("timeline %+v", got)
	}
	held := m.Timeline
	for range 40 {
		event(&m, ports.EventResumed, now, map[string]any{"resumed_from": "hitl_required"})
	}
	if len(m.Timeline) != ports.MaxTimeline || m.Timeline[0].Event != ports.EventResumed || len(held) != 2 || held[1].Note != "Proceed?" {
		t.Fatalf("bounded: %d entries, first %+v; an earlier copy changed: %+v", len(m.Timeline), m.Timeline[0], held)
	}
}
