package session

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

var t0 = time.Date(2026, 5, 9, 7, 13, 22, 0, time.UTC)

type seqIDs struct{ n int }

func (g *seqIDs) NewID() string { g.n++; return fmt.Sprintf("s%d", g.n) }

func newReg() *Registry { return NewRegistry(&seqIDs{}) }

func mustCreate(t *testing.T, r *Registry, spec Spec) Session {
	t.Helper()
	s, err := r.Create(spec, t0)
	if err != nil {
		t.Fatalf("Create(%+v): %v", spec, err)
	}
	return s
}

func shell(agent, name string) Spec {
	return Spec{AgentID: agent, Name: name, Type: ports.SessionInteractive}
}

// TestTransitionTable checks CanTransition for every ordered pair of states
// against the table written out by hand.
func TestTransitionTable(t *testing.T) {
	allowed := map[[2]State]bool{
		{Starting, Running}: true, {Starting, Exited}: true, {Starting, Killed}: true, {Starting, Lost}: true,
		{Running, Exited}: true, {Running, Killed}: true, {Running, Lost}: true,
	}
	for _, from := range States {
		for _, to := range States {
			if got, want := CanTransition(from, to), allowed[[2]State{from, to}]; got != want {
				t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
	}
	if CanTransition("bogus", Running) || CanTransition(Running, "bogus") {
		t.Error("unknown states must not transition")
	}
	for _, s := range States {
		if s.Ended() == s.Live() {
			t.Errorf("%s: Ended and Live must be opposites", s)
		}
	}
}

// reach puts a new session in state st through the registry's own operations.
func reach(t *testing.T, r *Registry, st State) Session {
	t.Helper()
	s := mustCreate(t, r, Spec{AgentID: "a1", Type: ports.SessionBackground, Command: "sleep"})
	var err error
	switch st {
	case Starting:
	case Running:
		s, err = r.Started(s.ID, t0)
	case Exited:
		s, err = r.Exited(s.ID, 0, t0)
	case Killed:
		s, err = r.Killed(s.ID, 137, t0)
	case Lost:
		s, err = r.Lost(s.ID, "x", t0)
	}
	if err != nil || s.State != st {
		t.Fatalf("reach %s: %v (state %s)", st, err, s.State)
	}
	return s
}

// TestEveryTransitionThroughRegistry runs every operation from every state:
// allowed ones land in the target state with their fields set, illegal ones
// fail with ErrIllegalTransition and change nothing.
func TestEveryTransitionThroughRegistry(t *testing.T) {
	now := t0.Add(time.Minute)
	ops := map[State]func(r *Registry, id string) (Session, error){
		Running: func(r *Registry, id string) (Session, error) { return r.Started(id, now) },
		Exited:  func(r *Registry, id string) (Session, error) { return r.Exited(id, 3, now) },
		Killed:  func(r *Registry, id string) (Session, error) { return r.Killed(id, 130, now) },
		Lost:    func(r *Registry, id string) (Session, error) { return r.Lost(id, "gone", now) },
	}
	for _, from := range States {
		for to, op := range ops {
			t.Run(fmt.Sprintf("%s->%s", from, to), func(t *testing.T) {
				r := newReg()
				before := reach(t, r, from)
				got, err := op(r, before.ID)
				after, _ := r.Get(before.ID)
				if !CanTransition(from, to) {
					if !errors.Is(err, ErrIllegalTransition) {
						t.Fatalf("err = %v, want ErrIllegalTransition", err)
					}
					if !reflect.DeepEqual(after, before) {
						t.Fatalf("refused transition changed the session: %+v -> %+v", before, after)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if got.State != to || !reflect.DeepEqual(got, after) {
					t.Fatalf("got %+v, stored %+v", got, after)
				}
				switch to {
				case Running:
					if !got.StartedAt.Equal(now) || !got.EndedAt.IsZero() {
						t.Fatalf("times %v %v", got.StartedAt, got.EndedAt)
					}
				case Exited, Killed:
					want := map[State]int{Exited: 3, Killed: 130}[to]
					if got.ExitCode == nil || *got.ExitCode != want || !got.EndedAt.Equal(now) {
						t.Fatalf("exit %v at %v", got.ExitCode, got.EndedAt)
					}
				case Lost:
					if got.Reason != "gone" || got.ExitCode != nil || !got.EndedAt.Equal(now) {
						t.Fatalf("lost: %+v", got)
					}
				}
			})
		}
	}
	if _, err := newReg().Started("nope", now); !errors.Is(err, ErrNotFound) || !errors.Is(err, ports.ErrSessionNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
}

func TestCreate(t *testing.T) {
	r := newReg()
	s := mustCreate(t, r, Spec{AgentID: "a1", Type: ports.SessionInteractive})
	if s.ID != "s1" || s.Name != "interactive-s1" || !s.PTY || s.State != Starting || !s.CreatedAt.Equal(t0) {
		t.Fatalf("default session: %+v", s)
	}
	hl := mustCreate(t, r, Spec{AgentID: "a1", Type: ports.SessionHeadless, Command: "claude", Args: []string{"-p", "x"}})
	if hl.PTY || hl.Name != "headless-s2" {
		t.Fatalf("headless: %+v", hl)
	}

	bad := []struct {
		spec Spec
		err  error
	}{
		{Spec{AgentID: "a1", Type: "daemon", Command: "x"}, ErrInvalidType},
		{Spec{Type: ports.SessionInteractive}, ErrInvalidSpec},
		{Spec{AgentID: "a1", Type: ports.SessionHeadless}, ErrInvalidSpec},
		{Spec{AgentID: "a1", Type: ports.SessionBackground, Command: "echo", Args: []string{strings.Repeat("x", 100<<10)}}, ErrInvalidSpec},
		{Spec{AgentID: "a1", Type: ports.SessionBackground}, ErrInvalidSpec},
		{shell("a1", "has.dot"), ErrInvalidName},
		{shell("a1", "-dash"), ErrInvalidName},
		{shell("a1", "a:b"), ErrInvalidName},
		{shell("a1", string(make([]byte, 65))), ErrInvalidName},
	}
	for _, c := range bad {
		if _, err := r.Create(c.spec, t0); !errors.Is(err, c.err) {
			t.Errorf("Create(%+v) = %v, want %v", c.spec, err, c.err)
		}
	}
	if n := len(r.List("")); n != 2 {
		t.Fatalf("failed creates left sessions: %d", n)
	}
}

func TestNamesUniquePerAgent(t *testing.T) {
	r := newReg()
	dev := mustCreate(t, r, shell("a1", "dev"))
	if _, err := r.Create(shell("a1", "dev"), t0); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("duplicate name: %v", err)
	}
	mustCreate(t, r, shell("a2", "dev")) // another agent: fine
	if got, ok := r.ByName("a1", "dev"); !ok || got.ID != dev.ID {
		t.Fatalf("ByName = %+v %v", got, ok)
	}
	// The name frees up when its session ends, like the tmux session name.
	if _, err := r.Exited(dev.ID, 0, t0); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.ByName("a1", "dev"); ok {
		t.Fatal("ended session still found by name")
	}
	again := mustCreate(t, r, shell("a1", "dev"))
	if again.ID == dev.ID {
		t.Fatal("id reused")
	}
	if got := r.List("a1"); len(got) != 2 || got[0].ID != dev.ID || got[1].ID != again.ID {
		t.Fatalf("List(a1) = %+v", got)
	}
}

func TestIDsNeverRepeat(t *testing.T) {
	r := NewRegistry(stuckIDs{"same", "same", "other"})
	a := mustCreate(t, r, shell("a1", "x"))
	b := mustCreate(t, r, shell("a1", "y"))
	if a.ID == b.ID {
		t.Fatalf("two sessions share id %q", a.ID)
	}
}

// stuckIDs hands out its ids in turn, repeating the last one forever.
type stuckIDs []string

func (s stuckIDs) NewID() string {
	id := s[0]
	if len(s) > 1 {
		copy(s, s[1:])
		s[len(s)-1] = s[len(s)-2]
	}
	return id
}

func TestCopiesAreNotShared(t *testing.T) {
	r := newReg()
	args := []string{"a"}
	env := map[string]string{"K": "v"}
	s := mustCreate(t, r, Spec{AgentID: "a1", Type: ports.SessionBackground, Command: "c", Args: args, Env: env})
	args[0], env["K"] = "changed", "changed"
	s.Args[0] = "changed too"
	got, _ := r.Get(s.ID)
	if got.Args[0] != "a" || got.Env["K"] != "v" {
		t.Fatalf("registry shares caller memory: %+v", got)
	}
	ex, _ := r.Exited(s.ID, 1, t0)
	*ex.ExitCode = 99
	if got, _ := r.Get(s.ID); *got.ExitCode != 1 {
		t.Fatal("exit code shared")
	}
}

func TestForget(t *testing.T) {
	r := newReg()
	s := mustCreate(t, r, shell("a1", "dev"))
	if err := r.Forget(s.ID); !errors.Is(err, ErrNotEnded) {
		t.Fatalf("Forget live: %v", err)
	}
	r.Killed(s.ID, 137, t0)
	if err := r.Forget(s.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Get(s.ID); ok {
		t.Fatal("still there")
	}
	if err := r.Forget(s.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Forget twice: %v", err)
	}
}

func TestAgentNames(t *testing.T) {
	if AgentName("dev") != "as-dev" {
		t.Fatal(AgentName("dev"))
	}
	cases := []struct {
		in   string
		name string
		ok   bool
	}{
		{"as-dev", "dev", true},
		{"as-interactive-0194ab", "interactive-0194ab", true},
		{"dev", "", false},
		{"as-", "", false},
		{"as-a.b", "", false},
		{"AS-dev", "", false},
		{"as--x", "", false},
	}
	for _, c := range cases {
		if name, ok := ParseAgentName(c.in); name != c.name || ok != c.ok {
			t.Errorf("ParseAgentName(%q) = %q, %v; want %q, %v", c.in, name, ok, c.name, c.ok)
		}
	}
}

// UUIDv7 ids made within the same minute share their first characters; the
// default names (also the agents' tmux session names) must still differ.
func TestDefaultNamesDifferForIDsMadeTogether(t *testing.T) {
	r := NewRegistry(&listIDs{ids: []string{"01a237f2-1111-7000-8000-aaaaaaaaaaaa", "01a237f2-2222-7000-8000-bbbbbbbbbbbb"}})
	now := time.Now()
	a, err := r.Create(Spec{AgentID: "h", Type: ports.SessionInteractive, Command: "tmux"}, now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Create(Spec{AgentID: "h", Type: ports.SessionInteractive, Command: "tmux"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if a.Name == b.Name || !strings.HasSuffix(a.Name, "aaaaaaaaaaaa") {
		t.Fatalf("names %q and %q", a.Name, b.Name)
	}
}

type listIDs struct{ ids []string }

func (g *listIDs) NewID() string { id := g.ids[0]; g.ids = g.ids[1:]; return id }

// An agent's live sessions are bounded, whether created or adopted from its
// report; ended ones do not count.
func TestLiveSessionsPerAgentAreBounded(t *testing.T) {
	r := newReg()
	now := time.Now()
	var first Session
	for i := range MaxLiveSessionsPerAgent {
		s, err := r.Create(Spec{AgentID: "a1", Type: ports.SessionBackground, Command: "sleep", Name: fmt.Sprintf("s%d", i)}, now)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = s
		}
	}
	if _, err := r.Create(Spec{AgentID: "a1", Type: ports.SessionBackground, Command: "sleep"}, now); !errors.Is(err, ErrQuota) {
		t.Fatalf("one over the quota: %v", err)
	}
	if _, err := r.Create(Spec{AgentID: "a2", Type: ports.SessionBackground, Command: "sleep"}, now); err != nil {
		t.Fatalf("another agent: %v", err)
	}
	// A report of many unknown sessions adopts up to the quota and kills the rest.
	var reps []Reported
	for _, s := range r.List("a1") {
		reps = append(reps, Reported{ID: s.ID, AgentName: AgentName(s.Name)})
	}
	for i := range 500 {
		reps = append(reps, Reported{AgentName: AgentName(fmt.Sprintf("extra%d", i)), Type: ports.SessionBackground})
	}
	kills := 0
	for _, d := range r.Reconcile("a1", reps, now) {
		switch {
		case d.Action == Adopt:
			t.Fatalf("adopted %s beyond the quota", d.AgentName)
		case d.Action == Kill && d.Reason == ReasonQuota:
			kills++
		}
	}
	if kills != 500 {
		t.Fatalf("%d over-quota reports killed, want 500", kills)
	}
	// An ended session frees its place.
	if _, err := r.Exited(first.ID, 0, now); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(Spec{AgentID: "a1", Type: ports.SessionBackground, Command: "sleep"}, now); err != nil {
		t.Fatalf("after one ended: %v", err)
	}
}
