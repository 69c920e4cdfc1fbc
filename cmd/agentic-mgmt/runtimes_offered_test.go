package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/aiwg"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// heldRuntime is the host runtime as the container runtime "late": its engine
// answers once up is set, and its Recover waits for release, so that a
// test holds the environments' taking it on for as long as it looks.
type heldRuntime struct {
	ports.Runtime
	up         *atomic.Bool
	recovering chan<- struct{}
	release    <-chan struct{}
}

func (r heldRuntime) Capabilities() ports.RuntimeCapabilities {
	c := r.Runtime.Capabilities()
	c.Runtime, c.Isolation = "late", ports.KindContainer
	return c
}

func (r heldRuntime) Ping(ctx context.Context) error {
	if !r.up.Load() {
		return errors.New("no engine yet")
	}
	return r.Runtime.Ping(ctx)
}

func (r heldRuntime) Recover(ctx context.Context) ([]ports.Environment, error) {
	r.recovering <- struct{}{}
	<-r.release
	return r.Runtime.Recover(ctx)
}

// A runtime found after start is reported ready by /readyz only once the
// environments offer it: a client told it answers then finds it listed
// (and can create on it), never in the moment between the engine
// answering and what it holds being recovered.
func TestARuntimeFoundLaterIsReadyOnlyOnceOffered(t *testing.T) {
	var up atomic.Bool
	recovering, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	late := runtimeDef[struct{}]{Name: "late", Help: "a test's", FoundDoc: "never", HowTo: "start it",
		Found: func(struct{}) bool { return false },
		New: func(cfg Config, opts struct{}, d runtimeDeps) (ports.Runtime, func(), error) {
			host, closer, err := hostRuntime.New(cfg, opts, d)
			return heldRuntime{Runtime: host, up: &up, recovering: recovering, release: release}, closer, err
		},
	}
	catalog := runtimeCatalog
	runtimeCatalog = append(slices.Clip(catalog), late.entry())
	t.Cleanup(func() { runtimeCatalog = catalog })

	cfg := Config{DataDir: t.TempDir(), Runtimes: []string{"late"}}
	rts, closeRuntimes := provideRuntimes(cfg, slog.New(slog.DiscardHandler), nil)
	t.Cleanup(closeRuntimes)
	// Wired as provideEnvironments wires them; the periodic look is left
	// out, so that only the listing below finds the engine.
	envs := environment.New(environment.Config{
		Runtimes: rts.snapshot(), Discover: rts.discover, Offered: rts.offered, DiscoverEvery: time.Hour, Unavailable: rts.unavailable, Known: runtimeNames(),
		Agents: portsfake.NewDirectory(), Credentials: portsfake.NewCredentials(), Clock: clock.Wall{},
		Bootstrap: ports.AgentBootstrap{Binary: "/bin/true", ServerURL: "http://127.0.0.1:1"}, Logger: slog.New(slog.DiscardHandler),
	})
	t.Cleanup(envs.Close)
	envs.Recover(context.Background())
	ready := provideReadiness(Config{}, nil, aiwg.New(aiwg.Config{}), rts)
	lateReady := func() (bool, string) {
		for _, c := range ready.Checks() {
			if c.Name == "runtime_late" {
				return c.Ready, c.Detail
			}
		}
		t.Fatal("readiness has no runtime_late")
		return false, ""
	}
	listed := func(rcs []ports.RuntimeCapabilities) bool {
		return slices.ContainsFunc(rcs, func(c ports.RuntimeCapabilities) bool { return c.Runtime == "late" })
	}
	if ok, detail := lateReady(); ok || !strings.Contains(detail, "unreachable") {
		t.Fatalf("late before its engine: ready %v %q", ok, detail)
	}

	up.Store(true)
	// Listing finds the engine; the environments then take it on, held
	// in its Recover.
	first := make(chan []ports.RuntimeCapabilities, 1)
	go func() { first <- envs.Runtimes() }()
	<-recovering
	if ok, detail := lateReady(); ok {
		t.Fatalf("late is ready (%q) while the environments still recover what it holds: a list now lacks it", detail)
	}
	if listed(envs.Runtimes()) {
		t.Fatal("late listed before what it holds is recovered")
	}
	if _, err := envs.Create(context.Background(), environment.Request{Runtime: "late", Name: "early"}); !errors.Is(err, environment.ErrUnknownRuntime) ||
		!strings.Contains(err.Error(), "offered in a moment") {
		t.Fatalf("create on late while it is taken on: %v; want refused, saying it is offered in a moment", err)
	}
	if slices.Contains(rts.Isolations(false), ports.KindContainer) {
		t.Fatal("late's tier advertised before it is offered")
	}

	releaseOnce.Do(func() { close(release) })
	if !listed(<-first) {
		t.Fatal("late not listed by the listing that found it, once recovered")
	}
	if ok, detail := lateReady(); !ok || detail != "reachable" {
		t.Fatalf("late once offered: ready %v %q", ok, detail)
	}
	if !listed(envs.Runtimes()) {
		t.Fatal("late ready but not listed")
	}
	if !slices.Contains(rts.Isolations(false), ports.KindContainer) {
		t.Fatal("late's tier not advertised once offered")
	}
}
