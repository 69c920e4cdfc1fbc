package environment

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// lateFixture is a service with the runtime "fake", to which Discover adds
// "late" once the test says its engine is up.
type lateFixture struct {
	svc       *Service
	late      *fakeRuntime
	up, given atomic.Bool
	asks      atomic.Int32
	// wrap, when set before the engine is up, is what Discover hands out
	// around the late runtime.
	wrap func(ports.Runtime) ports.Runtime
}

// lateRuntime is a fakeRuntime under its own name.
type lateRuntime struct{ *fakeRuntime }

func (r lateRuntime) Capabilities() ports.RuntimeCapabilities {
	c := r.fakeRuntime.Capabilities()
	c.Runtime = "late"
	return c
}

func newLateFixture(t *testing.T, every time.Duration) *lateFixture {
	f := &lateFixture{late: newFakeRuntime()}
	f.svc = New(Config{Runtimes: map[string]ports.Runtime{"fake": newFakeRuntime()}, Agents: portsfake.NewDirectory(),
		Credentials: portsfake.NewCredentials(), Clock: clock.Wall{},
		Bootstrap:     ports.AgentBootstrap{Binary: "/bin/agent", ServerURL: "http://127.0.0.1:1"},
		DiscoverEvery: every,
		Known:         []string{"fake", "late"},
		Discover: func(context.Context) map[string]ports.Runtime {
			f.asks.Add(1)
			// As the server's: a runtime is found once.
			if !f.up.Load() || f.given.Swap(true) {
				return nil
			}
			var rt ports.Runtime = lateRuntime{f.late}
			if f.wrap != nil {
				rt = f.wrap(rt)
			}
			return map[string]ports.Runtime{"late": rt}
		},
		Unavailable: func(name string) string {
			if name == "late" {
				return "late is unreachable: no engine; start one with `make late`"
			}
			return ""
		},
	})
	t.Cleanup(f.svc.Close)
	return f
}

// A runtime whose engine starts after the service is offered without a
// restart: a request naming it asks for it at once; until then its error
// says why it is missing and how to get it.
func TestARuntimeFoundLaterServesRequestsWithoutARestart(t *testing.T) {
	f := newLateFixture(t, time.Hour)
	f.svc.Recover(context.Background())
	_, err := f.svc.Create(context.Background(), Request{Runtime: "late", Name: "box"})
	if !errors.Is(err, ErrUnknownRuntime) || !strings.Contains(err.Error(), "start one with `make late`") {
		t.Fatalf("create before the engine: %v; want ErrUnknownRuntime with the hint", err)
	}
	if names := runtimeNames(f.svc.Runtimes()); names != "fake" {
		t.Fatalf("runtimes before the engine: %s", names)
	}
	if got := f.svc.UnavailableRuntimes(); len(got) != 1 || !strings.Contains(got["late"], "make late") {
		t.Fatalf("unavailable before the engine: %v", got)
	}
	f.up.Store(true)
	e, err := f.svc.Create(context.Background(), Request{Runtime: "late", Name: "box"})
	if err != nil || e.Runtime != "late" {
		t.Fatalf("create once the engine is up: %+v %v", e, err)
	}
	if names := runtimeNames(f.svc.Runtimes()); names != "fake,late" {
		t.Fatalf("runtimes once the engine is up: %s", names)
	}
	if got := f.svc.UnavailableRuntimes(); len(got) != 0 {
		t.Fatalf("unavailable once the engine is up: %v", got)
	}
	if err := f.svc.CheckPool(ports.Pool{Name: "p", Runtime: "late", Size: 1}); err != nil {
		t.Fatalf("a pool on the late runtime: %v", err)
	}
}

// Listing the runtimes asks too; and without any request the service asks
// every DiscoverEvery once recovered, taking on what the runtime already
// holds (an environment an earlier run made there).
func TestRuntimesFoundLaterAreAskedForPeriodicallyAndRecovered(t *testing.T) {
	f := newLateFixture(t, 10*time.Millisecond)
	f.late.envs["old"] = ports.Environment{Name: "old", Runtime: "late", RuntimeID: "rt-old", State: ports.EnvStopped}
	f.svc.Recover(context.Background())
	if !testkit.Within(15*time.Second, func() bool { return f.asks.Load() >= 2 }) {
		t.Fatal("Discover not asked periodically")
	}
	if _, ok := f.svc.runtime("late"); ok {
		t.Fatal("late offered before its engine is up")
	}
	f.up.Store(true)
	if !testkit.Within(15*time.Second, func() bool { _, ok := f.svc.runtime("late"); return ok }) {
		t.Fatal("late not offered after its engine came up")
	}
	e, ok := f.svc.Inspect(context.Background(), "old")
	if !ok || e.Runtime != "late" || e.State != StateStopped {
		t.Fatalf("the late runtime's environment: %+v %v; want it recovered, stopped", e, ok)
	}
}

// gatedRecover is a runtime whose Recover waits for the test.
type gatedRecover struct {
	ports.Runtime
	entered chan<- struct{}
	gate    <-chan struct{}
}

func (g gatedRecover) Recover(ctx context.Context) ([]ports.Environment, error) {
	g.entered <- struct{}{}
	<-g.gate
	return g.Runtime.Recover(ctx)
}

// A runtime found after start is offered together with what it already
// holds: while its environments are being recovered it is not offered, so
// no request sees it without them (a create could take a name one of them
// has).
func TestARuntimeFoundLaterIsOfferedWithItsEnvironments(t *testing.T) {
	f := newLateFixture(t, 10*time.Millisecond)
	f.late.envs["old"] = ports.Environment{Name: "old", Runtime: "late", RuntimeID: "rt-old", State: ports.EnvStopped}
	entered, gate := make(chan struct{}, 1), make(chan struct{})
	var open sync.Once
	// Registered after the fixture's Close, so it runs first: a failure
	// must not leave the discovery waiting at the gate.
	t.Cleanup(func() { open.Do(func() { close(gate) }) })
	f.wrap = func(rt ports.Runtime) ports.Runtime { return gatedRecover{rt, entered, gate} }
	f.svc.Recover(context.Background())
	f.up.Store(true)
	testkit.Receive(t, 15*time.Second, entered, "the late runtime asked for what it holds")
	if _, ok := f.svc.runtime("late"); ok {
		t.Fatal("late offered while its environments were still being recovered")
	}
	open.Do(func() { close(gate) })
	testkit.Eventually(t, 15*time.Second, "late offered once recovered", func() bool { _, ok := f.svc.runtime("late"); return ok })
	if e, ok := f.svc.Inspect(context.Background(), "old"); !ok || e.Runtime != "late" {
		t.Fatalf("the late runtime's environment once it is offered: %+v %v", e, ok)
	}
}

func runtimeNames(cs []ports.RuntimeCapabilities) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Runtime)
	}
	return strings.Join(out, ",")
}
