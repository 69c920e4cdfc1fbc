package environment

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// quietSleeper is the sleeper whose saves need the agent's link quiet
// (CRIU on Docker) while quiet says so; it notes whether the link was
// held while it saved.
type quietSleeper struct {
	*sleeper
	quiet    bool
	link     *fakeQuiescer
	saveErr  error
	heldSave []bool
}

func (r *quietSleeper) HibernateNeedsQuietLink() bool { return r.quiet }

func (r *quietSleeper) Hibernate(ctx context.Context, n string) (ports.Hibernation, error) {
	r.heldSave = append(r.heldSave, r.link.held(n))
	if r.saveErr != nil {
		return ports.Hibernation{}, r.saveErr
	}
	return r.sleeper.Hibernate(ctx, n)
}

// fakeQuiescer is a ports.LinkQuiescer counting holds per agent.
type fakeQuiescer struct {
	mu    sync.Mutex
	holds map[string]int
	calls int
}

func (q *fakeQuiescer) QuiesceLink(_ context.Context, id string) (func(), error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.holds[id]++
	q.calls++
	return sync.OnceFunc(func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.holds[id]--
	}), nil
}

func (q *fakeQuiescer) held(id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.holds[id] > 0
}

// A runtime that needs the link quiet saves with the agent's link held,
// and the hold ends once the save is over, failed or not (its agent must
// be able to reconnect the moment it wakes); one that does not need it
// (or no longer) saves with the link left alone.
func TestHibernateHoldsTheAgentLinkOnlyWhileARuntimeThatNeedsItSaves(t *testing.T) {
	f, base := sleepy(t, "q1", ports.IdlePolicy{})
	q := &fakeQuiescer{holds: map[string]int{}}
	rt := &quietSleeper{sleeper: base, quiet: true, link: q}
	f.svc.cfg.Runtimes["sleeper"] = rt
	f.svc.cfg.LinkQuiet = q
	ctx := context.Background()

	rt.saveErr = errors.New("criu: dump failed")
	if _, err := f.svc.Hibernate(ctx, "q1"); err == nil {
		t.Fatal("a failed save hibernated")
	}
	if q.held("q1") {
		t.Fatal("the link is still held after a failed save")
	}
	if e, _ := f.svc.Get("q1"); e.State != StateReady {
		t.Fatalf("after a failed save: %s", e.State)
	}
	rt.saveErr = nil
	if e, err := f.svc.Hibernate(ctx, "q1"); err != nil || e.State != StateHibernated {
		t.Fatalf("hibernate: %+v %v", e, err)
	}
	if q.held("q1") {
		t.Fatal("the link is still held after the save: the woken agent could not reconnect")
	}
	if len(rt.heldSave) != 2 || !rt.heldSave[0] || !rt.heldSave[1] {
		t.Fatalf("link held during the saves: %v, want both", rt.heldSave)
	}
	if _, err := f.svc.Wake(ctx, "q1"); err != nil {
		t.Fatal(err)
	}

	rt.quiet = false
	calls := q.calls
	if _, err := f.svc.Hibernate(ctx, "q1"); err != nil {
		t.Fatal(err)
	}
	if q.calls != calls || rt.heldSave[2] {
		t.Fatalf("a save that does not need the link quiet held it (%d calls, held %v)", q.calls-calls, rt.heldSave[2])
	}
	waitState(t, f.svc, "q1", StateHibernated)
}
