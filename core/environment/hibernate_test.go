package environment

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// The plain fake runtime cannot hibernate.
func (r *fakeRuntime) Hibernate(context.Context, string) (ports.Hibernation, error) {
	return ports.Hibernation{}, ports.ErrUnsupported
}

func (r *fakeRuntime) Wake(context.Context, string) error { return ports.ErrUnsupported }

// sleeper is the fake runtime hibernating with memory: what it saved is a
// number, and a wake brings the agent back (a new connection) unless
// wakeErr says the saved state is lost.
type sleeper struct {
	*fakeRuntime
	agents  *portsfake.Directory
	wakes   atomic.Int32
	mu      sync.Mutex
	wakeErr error
	// wakeLeaves, when set, is the state a failing Wake leaves behind.
	wakeLeaves ports.EnvState
	// gate, when set, holds every Wake until it is closed.
	gate chan struct{}
	// saving, when set, holds a Hibernate after the save (the runtime
	// already says hibernated) until it is closed; inspecting, when set,
	// holds an Inspect after it looked until it is closed.
	saving, inspecting chan struct{}
	looked             chan struct{}
}

func (r *sleeper) Inspect(ctx context.Context, n string) (ports.Environment, error) {
	e, err := r.fakeRuntime.Inspect(ctx, n)
	r.mu.Lock()
	hold, looked := r.inspecting, r.looked
	r.inspecting = nil
	r.mu.Unlock()
	if hold != nil {
		close(looked)
		<-hold
	}
	return e, err
}

func (r *sleeper) Capabilities() ports.RuntimeCapabilities {
	c := r.fakeRuntime.Capabilities()
	c.Runtime, c.Hibernate, c.Limits = "sleeper", ports.HibernateMemory, []ports.Limit{ports.LimitMemoryMB}
	return c
}

func (r *sleeper) Hibernate(_ context.Context, n string) (ports.Hibernation, error) {
	r.fakeRuntime.mu.Lock()
	defer r.fakeRuntime.mu.Unlock()
	e, ok := r.envs[n]
	if !ok {
		return ports.Hibernation{}, ports.ErrEnvNotFound
	}
	if e.State != ports.EnvRunning {
		return ports.Hibernation{}, errors.New("not running")
	}
	e.State, e.HibernatedAt, e.SavedBytes = ports.EnvHibernated, time.Now(), 4096
	r.envs[n] = e
	r.mu.Lock()
	hold := r.saving
	r.mu.Unlock()
	if hold != nil {
		// As with a real engine, the agent is seen going only some time
		// after the save began.
		r.fakeRuntime.mu.Unlock()
		<-hold
		r.fakeRuntime.mu.Lock()
	}
	r.agents.SetStatus(n, ports.AgentDisconnected)
	return ports.Hibernation{Mode: ports.HibernateMemory, Bytes: e.SavedBytes, At: e.HibernatedAt}, nil
}

func (r *sleeper) Wake(_ context.Context, n string) error {
	r.wakes.Add(1)
	r.mu.Lock()
	gate, wakeErr, leaves := r.gate, r.wakeErr, r.wakeLeaves
	r.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if wakeErr != nil {
		if leaves != "" {
			if err := r.set(n, leaves); err != nil {
				return err
			}
		}
		return wakeErr
	}
	if err := r.set(n, ports.EnvRunning); err != nil {
		return err
	}
	r.agents.Add(ports.AgentInfo{ID: n, Status: ports.AgentReady, ConnectedAt: time.Now()})
	return nil
}

// sleepy is a fixture with the sleeper runtime and one ready environment.
func sleepy(t *testing.T, name string, idle ports.IdlePolicy) (*fixture, *sleeper) {
	t.Helper()
	f := newFixture(t, time.Minute)
	rt := &sleeper{fakeRuntime: f.rt, agents: f.agents}
	f.svc.cfg.Runtimes["sleeper"] = rt
	if _, err := f.svc.Create(context.Background(), Request{Runtime: "sleeper", Name: name, Idle: idle,
		Resources: ports.Resources{MemoryMB: 64}}); err != nil {
		t.Fatal(err)
	}
	f.agents.Add(ports.AgentInfo{ID: name, Status: ports.AgentReady, ConnectedAt: time.Now()})
	waitState(t, f.svc, name, StateReady)
	return f, rt
}

func TestHibernateFollowsTheCapability(t *testing.T) {
	f := newFixture(t, time.Minute)
	ctx := context.Background()
	if _, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "plain"}); err != nil {
		t.Fatal(err)
	}
	f.agents.SetStatus("plain", ports.AgentReady)
	waitState(t, f.svc, "plain", StateReady)
	if _, err := f.svc.Hibernate(ctx, "plain"); !errors.Is(err, ports.ErrUnsupported) {
		t.Fatalf("hibernate on a runtime without it: %v", err)
	}
	if e, _ := f.svc.Get("plain"); e.State != StateReady || e.Hibernate != ports.HibernateNone {
		t.Fatalf("a refused hibernation changed the environment: %+v", e)
	}
	// An idle policy it cannot follow is refused before anything is made.
	_, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "sleepless", Idle: ports.IdlePolicy{IdleAfter: time.Minute}})
	if !errors.Is(err, ports.ErrInvalidSpec) || !strings.Contains(err.Error(), "cannot hibernate") {
		t.Fatalf("idle_after on a runtime that cannot hibernate: %v", err)
	}
	if _, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "neg", Idle: ports.IdlePolicy{DeleteAfter: -time.Second}}); !errors.Is(err, ports.ErrInvalidSpec) {
		t.Fatalf("a negative delete_after: %v", err)
	}
	if _, ok := f.svc.Get("sleepless"); ok || len(f.rt.specs) != 1 {
		t.Fatalf("refused requests were provisioned: %v", f.rt.specs)
	}
}

func TestHibernateThenWakeOnUseWakesOnceForConcurrentCallers(t *testing.T) {
	f, rt := sleepy(t, "box", ports.IdlePolicy{})
	ctx := context.Background()
	e, err := f.svc.Hibernate(ctx, "box")
	if err != nil || e.State != StateHibernated || e.SavedBytes != 4096 || e.SleepReason != Requested || e.HibernatedAt.IsZero() {
		t.Fatalf("hibernate: %+v %v", e, err)
	}
	if again, err := f.svc.Hibernate(ctx, "box"); err != nil || again.State != StateHibernated {
		t.Fatalf("a second hibernate: %+v %v", again, err)
	}
	if n, bytes := f.svc.Hibernated(); n != 1 || bytes != 4096 {
		t.Fatalf("Hibernated() = %d, %d", n, bytes)
	}
	waitState(t, f.svc, "box", StateHibernated) // a refresh agrees with the runtime

	rt.mu.Lock()
	rt.gate = make(chan struct{})
	rt.mu.Unlock()
	const callers = 8
	errs := make(chan error, callers)
	var releases sync.WaitGroup
	for range callers {
		go func() {
			release, err := f.svc.Use(ctx, "box", ports.UseExec)
			if err == nil {
				releases.Add(1)
				defer releases.Done()
				defer release()
				if e, _ := f.svc.Get("box"); e.State != StateReady {
					err = errors.New("a caller went on before the wake ended: " + string(e.State))
				}
			}
			errs <- err
		}()
	}
	if !testkit.Within(15*time.Second, func() bool { return rt.wakes.Load() == 1 }) {
		t.Fatal("no wake began")
	}
	if e, _ := f.svc.Get("box"); e.State != StateWaking {
		t.Fatalf("state during the wake: %s", e.State)
	}
	rt.mu.Lock()
	close(rt.gate)
	rt.gate = nil
	rt.mu.Unlock()
	for range callers {
		if err := testkit.Receive(t, 15*time.Second, errs, "a caller's use"); err != nil {
			t.Fatal(err)
		}
	}
	releases.Wait()
	if n := rt.wakes.Load(); n != 1 {
		t.Fatalf("%d callers woke it %d times", callers, n)
	}
	e, _ = f.svc.Get("box")
	if e.State != StateReady || e.SavedBytes != 0 || e.LastActivityKind != ports.UseExec || e.LastActivity.IsZero() {
		t.Fatalf("after the wake: %+v", e)
	}
	steps := []string{}
	for _, ev := range e.Events {
		steps = append(steps, ev.Step)
	}
	if got := strings.Join(steps, " "); !strings.HasSuffix(got, "hibernating hibernated waking woke") {
		t.Fatalf("events %s", got)
	}
	// Use of an awake environment, and of an agent that is none's, returns at once.
	for _, id := range []string{"box", "hand-made-agent"} {
		release, err := f.svc.Use(ctx, id, ports.UseFiles)
		if err != nil {
			t.Fatal(err)
		}
		release()
		release() // twice is harmless
	}
	if rt.wakes.Load() != 1 {
		t.Fatal("a use of an awake environment woke it")
	}
}

func TestAWakeThatFailsLeavesTheEnvironmentFailedWithTheReason(t *testing.T) {
	f, rt := sleepy(t, "box", ports.IdlePolicy{})
	ctx := context.Background()
	if _, err := f.svc.Hibernate(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	rt.wakeErr = ports.ErrSavedStateLost
	rt.mu.Unlock()
	_, err := f.svc.Use(ctx, "box", ports.UseSession)
	if !errors.Is(err, ports.ErrWakeFailed) || !strings.Contains(err.Error(), "saved state") {
		t.Fatalf("use of an environment that cannot wake: %v", err)
	}
	e, _ := f.svc.Get("box")
	if e.State != StateFailed || !strings.Contains(e.Error, "saved state") {
		t.Fatalf("after a failed wake: %+v", e)
	}
	// Failed, not asleep: a second use does not try again.
	if _, err := f.svc.Use(ctx, "box", ports.UseSession); err != nil || rt.wakes.Load() != 1 {
		t.Fatalf("second use: %v, %d wakes", err, rt.wakes.Load())
	}
}

// A wake that fails on the host's side (the engine refused, QEMU did not
// start) while the runtime still holds the saved state leaves the
// environment hibernated, the reason shown as its error: the callers
// waiting for that wake get the failure (one wake for all of them), and
// the next use tries again. A runtime that no longer says hibernated
// after the failure makes it failed.
func TestAWakeThatFailsOnTheHostSideLeavesItHibernatedForTheNextWake(t *testing.T) {
	f, rt := sleepy(t, "box", ports.IdlePolicy{})
	ctx := context.Background()
	if _, err := f.svc.Hibernate(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	rt.wakeErr = errors.New("libvirt restore: internal error: process exited while connecting to monitor")
	rt.gate = make(chan struct{})
	gate := rt.gate
	rt.mu.Unlock()
	const callers = 6
	errs := make(chan error, callers)
	for range callers {
		go func() {
			release, err := f.svc.Use(ctx, "box", ports.UseExec)
			if err == nil {
				release()
			}
			errs <- err
		}()
	}
	if !testkit.Within(15*time.Second, func() bool { return rt.wakes.Load() == 1 }) {
		t.Fatal("no wake began")
	}
	waitState(t, f.svc, "box", StateWaking)
	close(gate)
	for range callers {
		err := testkit.Receive(t, 15*time.Second, errs, "a caller's use")
		if !errors.Is(err, ports.ErrWakeFailed) || !strings.Contains(err.Error(), "connecting to monitor") {
			t.Fatalf("a caller of a wake that failed: %v", err)
		}
	}
	if n := rt.wakes.Load(); n != 1 {
		t.Fatalf("%d callers woke it %d times", callers, n)
	}
	e, _ := f.svc.Get("box")
	if e.State != StateHibernated || !strings.HasPrefix(e.Error, "wake: ") || !strings.Contains(e.Error, "connecting to monitor") ||
		e.SavedBytes != 4096 || e.SleepReason != Requested {
		t.Fatalf("after a wake that failed on the host's side: %+v", e)
	}
	if last := e.Events[len(e.Events)-1]; last.Step != "wake_failed" || last.Message != e.Error {
		t.Fatalf("last event %+v", last)
	}
	if n, bytes := f.svc.Hibernated(); n != 1 || bytes != 4096 {
		t.Fatalf("Hibernated() = %d, %d", n, bytes)
	}

	// The next use tries again, and works.
	rt.mu.Lock()
	rt.wakeErr, rt.gate = nil, nil
	rt.mu.Unlock()
	release, err := f.svc.Use(ctx, "box", ports.UseExec)
	if err != nil {
		t.Fatalf("the next use: %v", err)
	}
	release()
	if e, _ := f.svc.Get("box"); e.State != StateReady || e.Error != "" || rt.wakes.Load() != 2 {
		t.Fatalf("after the second wake: %+v, %d wakes", e, rt.wakes.Load())
	}

	// A host-side error after which the runtime says the environment is
	// no longer hibernated: failed, with the reason.
	if _, err := f.svc.Hibernate(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	rt.wakeErr, rt.wakeLeaves = errors.New("restore: the engine lost the container"), ports.EnvStopped
	rt.mu.Unlock()
	if _, err := f.svc.Wake(ctx, "box"); !errors.Is(err, ports.ErrWakeFailed) {
		t.Fatalf("wake: %v", err)
	}
	if e, _ := f.svc.Get("box"); e.State != StateFailed || !strings.Contains(e.Error, "lost the container") {
		t.Fatalf("after a wake that left it not hibernated: %+v", e)
	}
}

// An Inspect that saw the agent connected just before a hibernation began
// must not make the environment ready mid-hibernation; once it did, and
// the next Inspect showed it hibernated without its reason (a CI failure
// of TestIdlePolicyInDocker).
func TestAnInspectDuringAHibernationLeavesItToTheHibernation(t *testing.T) {
	f, rt := sleepy(t, "box", ports.IdlePolicy{})
	ctx := context.Background()
	rt.mu.Lock()
	rt.inspecting, rt.looked = make(chan struct{}), make(chan struct{})
	rt.saving = make(chan struct{})
	release, saved, looked := rt.inspecting, rt.saving, rt.looked
	rt.mu.Unlock()

	stale := make(chan Environment, 1)
	go func() { e, _ := f.svc.Inspect(ctx, "box"); stale <- e }()
	testkit.Receive(t, 15*time.Second, looked, "the first Inspect looking at a running environment")
	hibernated := make(chan Environment, 1)
	go func() { e, _ := f.svc.Hibernate(ctx, "box"); hibernated <- e }()
	waitState(t, f.svc, "box", StateHibernating)
	close(release) // the Inspect that saw it running and connected ends now
	if e := testkit.Receive(t, 15*time.Second, stale, "the first Inspect"); e.State != StateHibernating {
		t.Fatalf("an Inspect from before the hibernation made it %s mid-hibernation", e.State)
	}
	if e, _ := f.svc.Inspect(ctx, "box"); e.State != StateHibernating {
		t.Fatalf("mid-hibernation an Inspect says %s (reason %q)", e.State, e.SleepReason)
	}
	close(saved)
	if e := testkit.Receive(t, 15*time.Second, hibernated, "the hibernation"); e.State != StateHibernated || e.SleepReason != Requested {
		t.Fatalf("hibernated: %s, reason %q", e.State, e.SleepReason)
	}
	if e, _ := f.svc.Inspect(ctx, "box"); e.State != StateHibernated || e.SleepReason != Requested {
		t.Fatalf("after the hibernation an Inspect says %s, reason %q", e.State, e.SleepReason)
	}
}

func TestOnlyARunningEnvironmentHibernatesAndTheLimitHolds(t *testing.T) {
	f, _ := sleepy(t, "box", ports.IdlePolicy{})
	ctx := context.Background()
	if _, err := f.svc.Stop(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Hibernate(ctx, "box"); !errors.Is(err, ErrWrongState) {
		t.Fatalf("hibernate of a stopped environment: %v", err)
	}
	if _, err := f.svc.Hibernate(ctx, "nope"); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Fatalf("hibernate of an unknown environment: %v", err)
	}
	if _, err := f.svc.Wake(ctx, "nope"); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Fatalf("wake of an unknown environment: %v", err)
	}

	// 64 MiB of memory to save, 32 MiB allowed.
	f2, _ := sleepy(t, "big", ports.IdlePolicy{})
	f2.svc.cfg.HibernateMaxBytes = 32 << 20
	if _, err := f2.svc.Hibernate(ctx, "big"); !errors.Is(err, ErrHibernateLimit) {
		t.Fatalf("hibernate past the limit: %v", err)
	}
	if e, _ := f2.svc.Get("big"); e.State != StateReady {
		t.Fatalf("a refused hibernation changed the state: %s", e.State)
	}
}

func TestIdlePolicyHibernatesUnusedEnvironmentsAndDeletesSleepingOnes(t *testing.T) {
	f, _ := sleepy(t, "idle", ports.IdlePolicy{IdleAfter: 200 * time.Millisecond, DeleteAfter: 400 * time.Millisecond})
	ctx := context.Background()
	if got := f.rt.specs["idle"].Labels; got[ports.LabelIdleAfter] != "200ms" || got[ports.LabelDeleteAfter] != "400ms" {
		t.Fatalf("the policy is not kept with the environment: %v", got)
	}
	// A second one held by a viewer never sleeps.
	if _, err := f.svc.Create(ctx, Request{Runtime: "sleeper", Name: "watched", Idle: ports.IdlePolicy{IdleAfter: 200 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	f.agents.Add(ports.AgentInfo{ID: "watched", Status: ports.AgentReady, ConnectedAt: time.Now()})
	waitState(t, f.svc, "watched", StateReady)
	release, err := f.svc.Use(ctx, "watched", ports.UseViewer)
	if err != nil {
		t.Fatal(err)
	}
	f.svc.Recover(ctx) // starts the idle keeper

	e := waitState(t, f.svc, "idle", StateHibernated)
	if !strings.HasPrefix(e.SleepReason, "idle for 200ms") {
		t.Fatalf("sleep reason %q", e.SleepReason)
	}
	// Then, asleep past delete_after, it goes.
	if !testkit.Within(15*time.Second, func() bool { _, ok := f.svc.Get("idle"); return !ok }) {
		t.Fatal("a hibernated environment outlived its delete_after")
	}
	if _, kept := f.rt.envs["idle"]; kept {
		t.Fatal("deleted but not destroyed")
	}
	if e, _ := f.svc.Get("watched"); e.State != StateReady {
		t.Fatalf("an environment with a viewer attached went to sleep: %s", e.State)
	}
	// Released, it sleeps too.
	release()
	waitState(t, f.svc, "watched", StateHibernated)
}

func TestAHibernatedEnvironmentIsFoundAfterARestart(t *testing.T) {
	f := newFixture(t, time.Minute)
	f.rt.envs["old"] = ports.Environment{Name: "old", Runtime: "sleeper", State: ports.EnvHibernated, SavedBytes: 123,
		HibernatedAt: time.Now().Add(-time.Hour), Labels: map[string]string{ports.LabelIdleAfter: "1h0m0s", ports.LabelDeleteAfter: "bogus"}}
	rt := &sleeper{fakeRuntime: f.rt, agents: f.agents}
	f.svc.cfg.Runtimes = map[string]ports.Runtime{"sleeper": rt}
	f.svc.Recover(context.Background())
	e, ok := f.svc.Get("old")
	if !ok || e.State != StateHibernated || e.SavedBytes != 123 || e.Idle.IdleAfter != time.Hour || e.Idle.DeleteAfter != 0 {
		t.Fatalf("recovered: %+v", e)
	}
	if e, err := f.svc.Wake(context.Background(), "old"); err != nil || e.State != StateReady {
		t.Fatalf("wake after a restart: %+v %v", e, err)
	}
}

func TestAnOpenSessionIsNoWorkButACommandIs(t *testing.T) {
	f, _ := sleepy(t, "shell", ports.IdlePolicy{IdleAfter: 100 * time.Millisecond})
	// One command running besides its session's shell: busy.
	f.agents.Add(ports.AgentInfo{ID: "shell", Status: ports.AgentBusy, ConnectedAt: time.Now(), RunningCommands: 2, KeptSessions: 1})
	f.svc.mu.Lock()
	busy := f.svc.idleFor("shell", f.svc.envs["shell"], time.Now().Add(time.Hour))
	f.svc.mu.Unlock()
	if busy != 0 {
		t.Fatalf("an environment running a command is idle for %s", busy)
	}
	// Only the session's shell: idle, and it goes to sleep.
	f.agents.Add(ports.AgentInfo{ID: "shell", Status: ports.AgentBusy, ConnectedAt: time.Now(), RunningCommands: 1, KeptSessions: 1})
	f.svc.Recover(context.Background())
	waitState(t, f.svc, "shell", StateHibernated)
}

func TestATakenPoolMemberFollowsItsPoolsIdlePolicy(t *testing.T) {
	f := newPoolFixture(t, nil)
	f.svc.cfg.Runtimes["fake"] = &sleeper{fakeRuntime: f.rt, agents: f.agents}
	ctx := context.Background()
	if _, err := f.svc.PutPool(ctx, ports.Pool{Name: "p", Runtime: "fake", Size: 1, Idle: ports.IdlePolicy{IdleAfter: 150 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	f.waitIdle(t, "p", 1)
	e, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "mine"})
	if err != nil || e.State != StateReady || e.Idle.IdleAfter != 150*time.Millisecond {
		t.Fatalf("take: %+v %v", e, err)
	}
	// Members waiting to be taken never sleep; the taken one does.
	e = waitState(t, f.svc, "mine", StateHibernated)
	if e.SleepReason != "idle for 150ms" {
		t.Fatalf("sleep reason %q", e.SleepReason)
	}
	f.waitIdle(t, "p", 1)

	// A pool naming no policy: its taken members sleep after the default.
	if _, err := f.svc.PutPool(ctx, ports.Pool{Name: "p", Runtime: "fake", Size: 1}); err != nil {
		t.Fatal(err)
	}
	f.waitIdle(t, "p", 1)
	e, err = f.svc.Create(ctx, Request{Runtime: "fake", Name: "yours"})
	if err != nil || e.Idle.IdleAfter != DefaultTakenIdleAfter {
		t.Fatalf("take from a pool without a policy: %+v %v", e, err)
	}
	// A request with a policy of its own is provisioned, not taken.
	e, err = f.svc.Create(ctx, Request{Runtime: "fake", Name: "own", Idle: ports.IdlePolicy{DeleteAfter: time.Hour}})
	if err != nil || e.State != StateBooting || !f.rt.has("own") {
		t.Fatalf("a request with its own policy: %+v %v", e, err)
	}
}
