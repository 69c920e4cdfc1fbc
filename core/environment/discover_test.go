package environment

import (
	"context"
	"errors"
	"strings"
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
			return map[string]ports.Runtime{"late": lateRuntime{f.late}}
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

func runtimeNames(cs []ports.RuntimeCapabilities) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Runtime)
	}
	return strings.Join(out, ",")
}
