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
// held while it saved. As Docker's adapter, it learns its mode in the
// background: probeEndsOnAsk has the probe end (quiet becomes true) just
// after the next read of the mode.
type quietSleeper struct {
	*sleeper
	quiet          bool
	probeEndsOnAsk bool
	link           *fakeQuiescer
	saveErr        error
	heldSave       []bool
	// filesBytes is what a save of the files takes, and what the runtime
	// tells quiet it expects it to take.
	filesBytes int64
}

// mode is one read of whether a save now needs the link quiet.
func (r *quietSleeper) mode() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.quiet
	if r.probeEndsOnAsk {
		r.quiet, r.probeEndsOnAsk = true, false
	}
	return m
}

// HibernateNeedsQuietLink is the question the use case once asked before
// Hibernate (a separate read of the mode, which the probe could change
// before the save): still answered, so a use case asking it first would
// be caught by the interleaving test below.
func (r *quietSleeper) HibernateNeedsQuietLink() bool { return r.mode() }

func (r *quietSleeper) Hibernate(ctx context.Context, n string) (ports.Hibernation, error) {
	return r.save(ctx, n, r.mode())
}

func (r *quietSleeper) HibernateQuiet(ctx context.Context, n string, quiet ports.QuietLink) (ports.Hibernation, error) {
	memory := r.mode()
	if quiet != nil {
		save := ports.PlannedSave{Mode: ports.HibernateMemory}
		if !memory {
			save = ports.PlannedSave{Mode: ports.HibernateFilesystem, Bytes: r.filesBytes}
		}
		release, err := quiet(ctx, save)
		if err != nil {
			return ports.Hibernation{}, err
		}
		defer release()
	}
	return r.save(ctx, n, memory)
}

// save saves n with its memory or its files; with its memory, it fails
// as criu does when the agent still holds its link.
func (r *quietSleeper) save(ctx context.Context, n string, memory bool) (ports.Hibernation, error) {
	held := r.link.held(n)
	r.heldSave = append(r.heldSave, held)
	if memory && !held {
		return ports.Hibernation{}, errors.New("criu dump: the agent holds a connection to the outside")
	}
	if r.saveErr != nil {
		return ports.Hibernation{}, r.saveErr
	}
	h, err := r.sleeper.Hibernate(ctx, n)
	if !memory {
		h.Mode = ports.HibernateFilesystem
		if r.filesBytes > 0 {
			h.Bytes = r.filesBytes
		}
	}
	return h, err
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

// The runtime's mode changing between the use case's look at it and the
// save (Docker's checkpoint probe ending just then) does not fail that
// hibernation: the mode is decided once, by the runtime, for both the
// link and the save.
func TestTheModeChangingJustBeforeTheSaveDoesNotFailTheHibernation(t *testing.T) {
	f, base := sleepy(t, "q2", ports.IdlePolicy{})
	q := &fakeQuiescer{holds: map[string]int{}}
	rt := &quietSleeper{sleeper: base, link: q, probeEndsOnAsk: true}
	f.svc.cfg.Runtimes["sleeper"] = rt
	f.svc.cfg.LinkQuiet = q
	ctx := context.Background()

	e, err := f.svc.Hibernate(ctx, "q2")
	if err != nil || e.State != StateHibernated {
		t.Fatalf("hibernate while the probe ends: %+v %v", e, err)
	}
	if len(rt.heldSave) != 1 || rt.heldSave[0] || q.calls != 0 {
		t.Fatalf("a save decided without its memory held the link (%v, %d holds)", rt.heldSave, q.calls)
	}
	if !rt.quiet {
		t.Fatal("the probe did not end during the hibernation: the test forced nothing")
	}
	if _, err := f.svc.Wake(ctx, "q2"); err != nil {
		t.Fatal(err)
	}
	// The next one is decided with the memory: the link held, released.
	if _, err := f.svc.Hibernate(ctx, "q2"); err != nil {
		t.Fatal(err)
	}
	if len(rt.heldSave) != 2 || !rt.heldSave[1] || q.held("q2") {
		t.Fatalf("the save with the memory: held %v, still held %v", rt.heldSave, q.held("q2"))
	}
}

// probingSleeper is the quietSleeper whose capabilities say the mode it
// would save by now, and whose probe ends (the memory becomes its mode)
// just as a hibernation begins: after the use case's look at it.
type probingSleeper struct{ *quietSleeper }

func (r *probingSleeper) Capabilities() ports.RuntimeCapabilities {
	c := r.quietSleeper.Capabilities()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.quiet {
		c.Hibernate = ports.HibernateFilesystem
	}
	return c
}

func (r *probingSleeper) HibernateQuiet(ctx context.Context, n string, quiet ports.QuietLink) (ports.Hibernation, error) {
	r.mu.Lock()
	r.quiet = true
	r.mu.Unlock()
	return r.quietSleeper.HibernateQuiet(ctx, n, quiet)
}

// AGENTIC_HIBERNATE_MAX_BYTES holds when the runtime's mode changes
// between the use case's look (filesystem: nothing expected) and the save
// (with the memory): the save with the memory is refused before it is
// made, as it would have been had the look seen it.
func TestTheHibernateLimitCountsTheModeTheRuntimeSavesBy(t *testing.T) {
	f, base := sleepy(t, "q3", ports.IdlePolicy{}) // 64 MiB of memory
	q := &fakeQuiescer{holds: map[string]int{}}
	rt := &probingSleeper{&quietSleeper{sleeper: base, link: q}}
	f.svc.cfg.Runtimes["sleeper"] = rt
	f.svc.cfg.LinkQuiet = q
	f.svc.cfg.HibernateMaxBytes = 32 << 20
	ctx := context.Background()

	if e, err := f.svc.Hibernate(ctx, "q3"); !errors.Is(err, ErrHibernateLimit) {
		t.Fatalf("a save with 64 MiB of memory under a 32 MiB limit: %+v, %v", e, err)
	}
	if len(rt.heldSave) != 0 || q.calls != 0 {
		t.Fatalf("the save was made (%v) or the link held (%d)", rt.heldSave, q.calls)
	}
	if e, _ := f.svc.Get("q3"); e.State != StateReady || e.SavedBytes != 0 {
		t.Fatalf("after the refusal: %+v", e)
	}
	// Under a limit it fits in, the same save is made, the link held.
	f.svc.cfg.HibernateMaxBytes = 128 << 20
	if _, err := f.svc.Hibernate(ctx, "q3"); err != nil {
		t.Fatal(err)
	}
	if len(rt.heldSave) != 1 || !rt.heldSave[0] || q.held("q3") {
		t.Fatalf("the save: held %v, still held %v", rt.heldSave, q.held("q3"))
	}
}
