package session

import (
	"errors"
	"reflect"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func join(t *testing.T, r *Registry, sid, vid string, want, granted Role) {
	t.Helper()
	got, err := r.Join(sid, vid, want)
	if err != nil || got != granted {
		t.Fatalf("Join(%s, %s, %s) = %s, %v; want %s", sid, vid, want, got, err, granted)
	}
}

func TestRoles(t *testing.T) {
	r := newReg()
	s := mustCreate(t, r, shell("a1", "dev"))
	id := s.ID

	join(t, r, id, "alice", Controller, Controller)
	// Second controller request: demoted to observer, not refused.
	join(t, r, id, "bob", Controller, Observer)
	join(t, r, id, "carol", Observer, Observer)
	if !r.CanInput(id, "alice") || !r.CanResize(id, "alice") {
		t.Fatal("controller cannot type")
	}
	for _, v := range []string{"bob", "carol", "nobody", ""} {
		if r.CanInput(id, v) || r.CanResize(id, v) {
			t.Fatalf("%q may type", v)
		}
	}
	if !reflect.DeepEqual(r.Viewers(id), []Viewer{{"alice", Controller}, {"bob", Observer}, {"carol", Observer}}) {
		t.Fatalf("viewers %+v", r.Viewers(id))
	}

	// Only the controller hands over, only to a joined viewer.
	if _, err := r.HandOver(id, "bob", "carol"); !errors.Is(err, ErrNotController) {
		t.Fatalf("observer handed over: %v", err)
	}
	if _, err := r.HandOver(id, "alice", "dave"); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("handover to stranger: %v", err)
	}
	if ch, err := r.HandOver(id, "alice", "alice"); err != nil || ch != nil {
		t.Fatalf("self handover: %v %v", ch, err)
	}
	ch, err := r.HandOver(id, "alice", "bob")
	if err != nil || !reflect.DeepEqual(ch, []RoleChange{{"bob", Controller}, {"alice", Observer}}) {
		t.Fatalf("HandOver = %v, %v", ch, err)
	}
	if r.CanInput(id, "alice") || !r.CanInput(id, "bob") || r.Controller(id) != "bob" {
		t.Fatal("control did not move")
	}

	// A leaving controller frees control; nobody is promoted implicitly.
	if err := r.Leave(id, "bob"); err != nil {
		t.Fatal(err)
	}
	if r.Controller(id) != "" || r.CanInput(id, "alice") {
		t.Fatal("implicit promotion")
	}
	if err := r.Leave(id, "bob"); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("Leave twice: %v", err)
	}
	// Free control is claimed by joining again as controller.
	join(t, r, id, "carol", Controller, Controller)
	// Stepping down: the controller re-joins as observer.
	join(t, r, id, "carol", Observer, Observer)
	if r.Controller(id) != "" {
		t.Fatal("step down kept control")
	}
	join(t, r, id, "alice", Controller, Controller)
	join(t, r, id, "alice", Controller, Controller) // idempotent

	// An ended session: nobody types, control is not granted, observers may replay.
	r.Exited(id, 0, t0)
	if r.CanInput(id, "alice") || r.CanResize(id, "alice") {
		t.Fatal("input to an ended session")
	}
	join(t, r, id, "erin", Controller, Observer)

	// Errors.
	if _, err := r.Join("nope", "x", Observer); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := r.Join(id, "x", "admin"); !errors.Is(err, ErrInvalidRole) {
		t.Fatal(err)
	}
	if _, err := r.Join(id, "", Observer); !errors.Is(err, ErrNotJoined) {
		t.Fatal(err)
	}
	if err := r.Leave("nope", "x"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := r.HandOver("nope", "a", "b"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := r.HandOver(id, "", "alice"); !errors.Is(err, ErrNotController) {
		t.Fatal(err)
	}
	if r.Viewers("nope") != nil || r.Controller("nope") != "" {
		t.Fatal("viewers of unknown session")
	}

	// Forgetting the session drops its viewers.
	r.Forget(id)
	if r.CanInput(id, "alice") || r.Viewers(id) != nil {
		t.Fatal("viewers outlive the session")
	}
}

func TestInputByType(t *testing.T) {
	r := newReg()
	hl := mustCreate(t, r, Spec{AgentID: "a1", Type: ports.SessionHeadless, Command: "claude", PTY: true})
	bg := mustCreate(t, r, Spec{AgentID: "a1", Type: ports.SessionBackground, Command: "npm"})
	for _, id := range []string{hl.ID, bg.ID} {
		join(t, r, id, "v", Controller, Controller)
	}
	// Headless takes no stdin but may have a PTY to resize; a plain background
	// process takes stdin (a fifo) but has no terminal.
	if r.CanInput(hl.ID, "v") || !r.CanResize(hl.ID, "v") {
		t.Fatal("headless rules")
	}
	if !r.CanInput(bg.ID, "v") || r.CanResize(bg.ID, "v") {
		t.Fatal("background rules")
	}
}

// An operator takes control from whoever holds it; the one who held it
// observes; an ended session cannot be controlled.
func TestTakeControl(t *testing.T) {
	r := newReg()
	s := mustCreate(t, r, shell("a1", "dev"))
	join(t, r, s.ID, "a", Controller, Controller)
	granted, prev, err := r.TakeControl(s.ID, "b")
	if err != nil || granted != Controller || prev != "a" {
		t.Fatalf("take: %v %q %v", granted, prev, err)
	}
	if r.CanInput(s.ID, "a") || !r.CanInput(s.ID, "b") {
		t.Fatal("control did not move")
	}
	if g, prev, _ := r.TakeControl(s.ID, "b"); g != Controller || prev != "" {
		t.Fatalf("taking what one holds: %v %q", g, prev)
	}
	if _, _, err := r.TakeControl("nope", "b"); err == nil {
		t.Fatal("took an unknown session")
	}
}
