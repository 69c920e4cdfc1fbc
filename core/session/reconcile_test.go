package session

import (
	"reflect"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func TestReconcile(t *testing.T) {
	now := t0.Add(time.Hour)
	r := newReg()
	// Known sessions on a1 (s1..s6) and one on a2.
	running := mustCreate(t, r, shell("a1", "running")) // s1: reported by id
	r.Started(running.ID, t0)
	starting := mustCreate(t, r, shell("a1", "starting")) // s2: reported by name only
	missing := mustCreate(t, r, shell("a1", "missing"))   // s3: not reported
	r.Started(missing.ID, t0)
	ended := mustCreate(t, r, shell("a1", "ended")) // s4: ended, still on the agent
	r.Killed(ended.ID, 137, t0)
	lostStarting := mustCreate(t, r, shell("a1", "never")) // s5: starting, not reported
	renamed := mustCreate(t, r, shell("a1", "clash"))      // s6: its name reappears under another id
	r.Started(renamed.ID, t0)
	other := mustCreate(t, r, shell("a2", "elsewhere")) // s7: another agent
	r.Started(other.ID, t0)
	moved := mustCreate(t, r, shell("a1", "moved")) // s8: reported under another agent-side name
	r.Started(moved.ID, t0)

	agentStart := t0.Add(time.Minute)
	reports := []Reported{
		{ID: running.ID, AgentName: "as-running", Type: ports.SessionInteractive},
		{AgentName: "as-starting", Type: ports.SessionInteractive, StartedAt: agentStart},
		{ID: ended.ID, AgentName: "as-ended", Type: ports.SessionInteractive},
		{ID: running.ID, AgentName: "as-running", Type: ports.SessionInteractive},
		{ID: running.ID, AgentName: "as-copy", Type: ports.SessionInteractive},
		{ID: moved.ID, AgentName: "as-moved2", Type: ports.SessionInteractive},
		{ID: "y", AgentName: "as-moved", Type: ports.SessionInteractive},
		{ID: "prev-1", AgentName: "as-adopted", Type: ports.SessionBackground, Command: "npm", StartedAt: agentStart},
		{AgentName: "as-noid", Type: "weird"},
		{AgentName: "vim-leftover"},
		{ID: "x", AgentName: "as-running"}, // repeated agent-side name: ignored
		{ID: "new-clash", AgentName: "as-clash", Type: ports.SessionInteractive},
		{ID: other.ID, AgentName: "as-elsewhere", Type: ports.SessionInteractive},
		{ID: "../evil", AgentName: "as-evil", Type: ports.SessionInteractive},
	}
	got := r.Reconcile("a1", reports, now)
	want := []Decision{
		{Action: Keep, SessionID: running.ID, AgentName: "as-running"},
		{Action: Keep, SessionID: starting.ID, AgentName: "as-starting"},
		{Action: Kill, SessionID: ended.ID, AgentName: "as-ended", Reason: ReasonEndedOnServer},
		{Action: Kill, SessionID: running.ID, AgentName: "as-copy", Reason: ReasonDuplicate},
		{Action: Keep, SessionID: moved.ID, AgentName: "as-moved2"},
		{Action: MarkLost, SessionID: missing.ID, Reason: ReasonMissing},
		{Action: MarkLost, SessionID: lostStarting.ID, Reason: ReasonMissing},
		{Action: MarkLost, SessionID: renamed.ID, Reason: ReasonMissing},
		{Action: Kill, SessionID: "y", AgentName: "as-moved", Reason: ReasonNameTaken},
		{Action: Adopt, SessionID: "prev-1", AgentName: "as-adopted"},
		{Action: Adopt, SessionID: "s9", AgentName: "as-noid"},
		{Action: Kill, AgentName: "vim-leftover", Reason: ReasonNotOurs},
		{Action: Adopt, SessionID: "new-clash", AgentName: "as-clash"},
		{Action: Adopt, SessionID: "s10", AgentName: "as-elsewhere"},
		{Action: Adopt, SessionID: "s11", AgentName: "as-evil"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decisions:\n%s", diff(got, want))
	}

	state := func(id string) State { s, _ := r.Get(id); return s.State }
	if s, _ := r.Get(starting.ID); s.State != Running || !s.StartedAt.Equal(agentStart) {
		t.Fatalf("starting session not marked running: %+v", s)
	}
	if s, _ := r.Get(missing.ID); s.State != Lost || s.Reason != ReasonMissing || !s.EndedAt.Equal(now) {
		t.Fatalf("missing: %+v", s)
	}
	if state(ended.ID) != Killed || state(other.ID) != Running || state(running.ID) != Running {
		t.Fatal("states of kept, ended or other-agent sessions changed")
	}
	ad, _ := r.Get("prev-1")
	if !ad.Adopted || ad.State != Running || ad.Name != "adopted" || ad.Type != ports.SessionBackground || ad.Command != "npm" ||
		!ad.StartedAt.Equal(agentStart) || ad.AgentID != "a1" {
		t.Fatalf("adopted: %+v", ad)
	}
	if s, _ := r.Get("s9"); s.Type != ports.SessionBackground || !s.StartedAt.Equal(now) {
		t.Fatalf("adopted with unknown type: %+v", s)
	}
	if s, _ := r.Get("s11"); s.Name != "evil" || !s.PTY {
		t.Fatalf("adopted with bad id: %+v", s)
	}
	if s, ok := r.ByName("a1", "clash"); !ok || s.ID != "new-clash" {
		t.Fatalf("clash: %+v", s)
	}

	// The same report again changes nothing but keeps everything.
	again := r.Reconcile("a1", []Reported{
		{ID: running.ID, AgentName: "as-running"}, {ID: starting.ID, AgentName: "as-starting"},
		{ID: "prev-1", AgentName: "as-adopted"}, {ID: "s9", AgentName: "as-noid"},
		{ID: "new-clash", AgentName: "as-clash"}, {ID: "s10", AgentName: "as-elsewhere"}, {ID: "s11", AgentName: "as-evil"},
		{ID: moved.ID, AgentName: "as-moved2"},
	}, now)
	for _, d := range again {
		if d.Action != Keep {
			t.Fatalf("second reconcile: %+v", again)
		}
	}
	if len(again) != 8 {
		t.Fatalf("second reconcile: %+v", again)
	}

	// An empty report loses every live session of the agent, and only of it.
	for _, d := range r.Reconcile("a1", nil, now) {
		if d.Action != MarkLost {
			t.Fatalf("empty report: %+v", d)
		}
	}
	for _, s := range r.List("a1") {
		if s.State.Live() {
			t.Fatalf("still live: %+v", s)
		}
	}
	if state(other.ID) != Running {
		t.Fatal("another agent's session lost")
	}
}

// TestReconcileAfterServerRestart: an empty registry adopts every session of
// ours under its reported id, so its log on disk is found again.
func TestReconcileAfterServerRestart(t *testing.T) {
	r := newReg()
	got := r.Reconcile("a1", []Reported{
		{ID: "0194-aaaa", AgentName: "as-dev", Type: ports.SessionInteractive},
		{ID: "0194-bbbb", AgentName: "as-build", Type: ports.SessionBackground},
		{AgentName: "tmux-0"},
	}, t0)
	want := []Decision{
		{Action: Adopt, SessionID: "0194-aaaa", AgentName: "as-dev"},
		{Action: Adopt, SessionID: "0194-bbbb", AgentName: "as-build"},
		{Action: Kill, AgentName: "tmux-0", Reason: ReasonNotOurs},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decisions:\n%s", diff(got, want))
	}
	// The names are taken again: a create with one fails.
	if _, err := r.Create(shell("a1", "dev"), t0); err == nil {
		t.Fatal("adopted name not reserved")
	}
}

func diff(got, want []Decision) string {
	s := ""
	for i := 0; i < len(got) || i < len(want); i++ {
		var g, w Decision
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		mark := "  "
		if g != w {
			mark = "! "
		}
		s += mark + "got  " + format(g) + "\n" + mark + "want " + format(w) + "\n"
	}
	return s
}

func format(d Decision) string {
	return string(d.Action) + " id=" + d.SessionID + " name=" + d.AgentName + " reason=" + d.Reason
}
