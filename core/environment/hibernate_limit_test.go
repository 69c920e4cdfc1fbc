package environment

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// addSleepy adds another ready environment of 64 MiB to a sleepy fixture.
func addSleepy(t *testing.T, f *fixture, name string) {
	t.Helper()
	if _, err := f.svc.Create(context.Background(), Request{Runtime: "sleeper", Name: name,
		Resources: ports.Resources{MemoryMB: 64}}); err != nil {
		t.Fatal(err)
	}
	f.agents.Add(ports.AgentInfo{ID: name, Status: ports.AgentReady, ConnectedAt: time.Now()})
	waitState(t, f.svc, name, StateReady)
}

// holdSaves has every save of rt wait, once made, until the returned
// release (also called at the end of the test, before the service closes).
func holdSaves(t *testing.T, rt *sleeper) func() {
	rt.mu.Lock()
	rt.saving = make(chan struct{})
	release := sync.OnceFunc(func() { close(rt.saving) })
	rt.mu.Unlock()
	t.Cleanup(release)
	return release
}

type hibernated struct {
	name string
	err  error
}

// startHibernations hibernates names at once, and returns once each has
// been refused (those results) or is saving (its save held by holdSaves),
// with the channel the other results will come on.
func startHibernations(t *testing.T, f *fixture, names ...string) ([]hibernated, chan hibernated) {
	t.Helper()
	results := make(chan hibernated, len(names))
	for _, n := range names {
		go func() {
			_, err := f.svc.Hibernate(context.Background(), n)
			results <- hibernated{n, err}
		}()
	}
	var ended []hibernated
	if !testkit.Within(15*time.Second, func() bool {
		select {
		case r := <-results:
			ended = append(ended, r)
		default:
		}
		saving := 0
		for _, n := range names {
			if e, _ := f.svc.Get(n); e.State == StateHibernating {
				saving++
			}
		}
		return len(ended)+saving == len(names)
	}) {
		t.Fatalf("the hibernations neither ended nor reached their saves (ended: %v)", ended)
	}
	return ended, results
}

// Hibernations at once respect AGENTIC_HIBERNATE_MAX_BYTES: each one's
// estimate is reserved from its check until its save ends, so that two
// under a limit that fits one cannot both pass the check while neither
// has saved anything yet (as the idle keeper starting both would have).
func TestHibernationsAtOnceStayWithinTheLimit(t *testing.T) {
	f, rt := sleepy(t, "a", ports.IdlePolicy{}) // 64 MiB
	addSleepy(t, f, "b")
	f.svc.cfg.HibernateMaxBytes = 100 << 20 // one fits, not two
	release := holdSaves(t, rt)

	ended, results := startHibernations(t, f, "a", "b")
	if len(ended) != 1 || !errors.Is(ended[0].err, ErrHibernateLimit) {
		t.Fatalf("two 64 MiB saves at once under a 100 MiB limit: refused %v, want exactly one ErrHibernateLimit", ended)
	}
	refused := ended[0].name
	winner := map[string]string{"a": "b", "b": "a"}[refused]
	if e, _ := f.svc.Get(refused); e.State != StateReady || e.SavedBytes != 0 {
		t.Fatalf("the refused one: %s, %d bytes", e.State, e.SavedBytes)
	}
	// The metric is of the bytes saved: a reservation is none.
	if n, bytes := f.svc.Hibernated(); n != 1 || bytes != 0 {
		t.Fatalf("during the save: %d hibernated, %d bytes", n, bytes)
	}

	release()
	if r := testkit.Receive(t, 15*time.Second, results, "the save held"); r.name != winner || r.err != nil {
		t.Fatalf("the save held: %+v", r)
	}
	if e, _ := f.svc.Get(winner); e.State != StateHibernated || e.SavedBytes != 4096 {
		t.Fatalf("the one saved: %s, %d bytes", e.State, e.SavedBytes)
	}
	if n, bytes := f.svc.Hibernated(); n != 1 || bytes != 4096 {
		t.Fatalf("after the save: %d hibernated, %d bytes", n, bytes)
	}
	// Its saved bytes replaced its reservation: the other one fits now.
	if _, err := f.svc.Hibernate(context.Background(), refused); err != nil {
		t.Fatalf("with 4096 bytes saved of 100 MiB: %v", err)
	}
}

// A save that fails frees its reservation: a hibernation after it is
// checked against what is saved, not against the failed one's estimate.
func TestAFailedSaveFreesItsReservation(t *testing.T) {
	f, base := sleepy(t, "a", ports.IdlePolicy{}) // 64 MiB
	addSleepy(t, f, "b")
	q := &fakeQuiescer{holds: map[string]int{}}
	rt := &quietSleeper{sleeper: base, quiet: true, link: q, saveErr: errors.New("criu: dump failed")}
	f.svc.cfg.Runtimes["sleeper"] = rt
	f.svc.cfg.LinkQuiet = q
	f.svc.cfg.HibernateMaxBytes = 100 << 20
	ctx := context.Background()

	if _, err := f.svc.Hibernate(ctx, "a"); err == nil || errors.Is(err, ErrHibernateLimit) {
		t.Fatalf("a failing save: %v", err)
	}
	rt.saveErr = nil
	if e, err := f.svc.Hibernate(ctx, "b"); err != nil || e.State != StateHibernated {
		t.Fatalf("after a failed save, one that fits the limit: %+v %v", e, err)
	}
}

// Where the runtime asks for the quiet link (a save with the memory) after
// a look that expected none, the check counts the other hibernations'
// reservations, and its estimate becomes its own: two such at once under
// a limit that fits one cannot both save.
func TestTheQuietLinksCheckReservesTheMemory(t *testing.T) {
	f, base := sleepy(t, "a", ports.IdlePolicy{}) // 64 MiB
	addSleepy(t, f, "b")
	q := &fakeQuiescer{holds: map[string]int{}}
	rt := &probingSleeper{&quietSleeper{sleeper: base, link: q}}
	f.svc.cfg.Runtimes["sleeper"] = rt
	f.svc.cfg.LinkQuiet = q
	f.svc.cfg.HibernateMaxBytes = 100 << 20
	release := holdSaves(t, base)

	ended, results := startHibernations(t, f, "a")
	if len(ended) != 0 {
		t.Fatalf("the first save: %v", ended)
	}
	// The second looks before the probe ends too: nothing expected, so
	// only the quiet link's check can refuse it.
	rt.mu.Lock()
	rt.quiet = false
	rt.mu.Unlock()
	if ended, _ := startHibernations(t, f, "b"); len(ended) != 1 || !errors.Is(ended[0].err, ErrHibernateLimit) {
		t.Fatalf("a second 64 MiB save with the memory under a 100 MiB limit: %v, want ErrHibernateLimit", ended)
	}
	release()
	if r := testkit.Receive(t, 15*time.Second, results, "the save held"); r.err != nil {
		t.Fatalf("the first save: %v", r.err)
	}
	if len(rt.heldSave) != 1 || !rt.heldSave[0] {
		t.Fatalf("saves made: %v, want the first's only, with the link held", rt.heldSave)
	}
}

// filesSleeper is the quietSleeper saving the files only, as its
// capabilities say (Docker without checkpoints): the look before a save
// expects nothing, and only the runtime knows, just before the save, what
// the files take.
type filesSleeper struct{ *quietSleeper }

func (r *filesSleeper) Capabilities() ports.RuntimeCapabilities {
	c := r.quietSleeper.Capabilities()
	c.Hibernate = ports.HibernateFilesystem
	return c
}

// Filesystem saves at once respect AGENTIC_HIBERNATE_MAX_BYTES too: the
// runtime's estimate, told before the save (ports.PlannedSave), is
// checked and reserved as a memory save's is, so that two 64 MiB saves of
// files under a 100 MiB limit cannot both pass a check that expected
// nothing of either.
func TestFilesystemSavesAtOnceReserveTheirEstimate(t *testing.T) {
	f, base := sleepy(t, "a", ports.IdlePolicy{})
	addSleepy(t, f, "b")
	q := &fakeQuiescer{holds: map[string]int{}}
	rt := &filesSleeper{&quietSleeper{sleeper: base, link: q, filesBytes: 64 << 20}}
	f.svc.cfg.Runtimes["sleeper"] = rt
	f.svc.cfg.LinkQuiet = q
	f.svc.cfg.HibernateMaxBytes = 100 << 20
	release := holdSaves(t, base)

	ended, results := startHibernations(t, f, "a", "b")
	if len(ended) != 1 || !errors.Is(ended[0].err, ErrHibernateLimit) {
		t.Fatalf("two 64 MiB filesystem saves at once under a 100 MiB limit: refused %v, want exactly one ErrHibernateLimit", ended)
	}
	refused := ended[0].name
	winner := map[string]string{"a": "b", "b": "a"}[refused]
	if e, _ := f.svc.Get(refused); e.State != StateReady || e.SavedBytes != 0 {
		t.Fatalf("the refused one: %s, %d bytes", e.State, e.SavedBytes)
	}
	release()
	if r := testkit.Receive(t, 15*time.Second, results, "the save held"); r.name != winner || r.err != nil {
		t.Fatalf("the save held: %+v", r)
	}
	if e, _ := f.svc.Get(winner); e.State != StateHibernated || e.SavedBytes != 64<<20 {
		t.Fatalf("the one saved: %s, %d bytes", e.State, e.SavedBytes)
	}
	if len(rt.heldSave) != 1 || rt.heldSave[0] || q.calls != 0 {
		t.Fatalf("saves made: %v (%d link holds), want one, without the link held", rt.heldSave, q.calls)
	}
	// Saved, it still leaves no room for the other; deleted, it does.
	ctx := context.Background()
	if _, err := f.svc.Hibernate(ctx, refused); !errors.Is(err, ErrHibernateLimit) {
		t.Fatalf("64 MiB more with 64 MiB saved under 100 MiB: %v", err)
	}
	if err := f.svc.Delete(ctx, winner); err != nil {
		t.Fatal(err)
	}
	if e, err := f.svc.Hibernate(ctx, refused); err != nil || e.State != StateHibernated || e.SavedBytes != 64<<20 {
		t.Fatalf("with nothing saved: %+v %v", e, err)
	}
}
