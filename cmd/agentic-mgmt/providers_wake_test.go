package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/promexport"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// The link's router is the environments' use: before it is bound there is
// nothing to wake; bound, the decorators every caller gets (commands,
// files, connections, the tunnels' traffic) reach the environment use case
// before the link.
func TestWorkOnAgentsUsesTheirEnvironments(t *testing.T) {
	r := provideLinkReports(slog.New(slog.DiscardHandler), promexport.NewEgressMetrics())
	release, err := r.Use(context.Background(), "box", ports.UseExec)
	if err != nil {
		t.Fatalf("use before binding: %v", err)
	}
	release()
	r.Touch("box", ports.UseTunnel)

	svc := agentrpc.New(agentrpc.Config{Clock: clock.Wall{}, Reports: r, Logger: slog.New(slog.DiscardHandler)})
	w := provideWakeful(svc, r)
	use := portsfake.NewEnvironmentUse()
	r.bind(&linkTargets{held: func(string) bool { return false }, use: use, clock: clock.Wall{}})

	use.Sleep("box")
	use.FailWakes(fmt.Errorf("%w: the saved state is gone", ports.ErrWakeFailed))
	ctx := context.Background()
	_, err1 := w.Link.Start(ctx, "box", ports.CommandSpec{Command: "true"}, ports.StartOptions{})
	_, err2 := w.Sessions.Start(ctx, "box", ports.CommandSpec{SessionType: ports.SessionInteractive}, ports.StartOptions{})
	_, err3 := w.Files.ListFiles(ctx, "box", "/")
	_, err4 := w.Dialer.DialPort(ctx, "box", 80)
	for i, err := range []error{err1, err2, err3, err4} {
		if !errors.Is(err, ports.ErrWakeFailed) {
			t.Errorf("call %d: %v, want the failed wake", i+1, err)
		}
	}
	if got := fmt.Sprint(use.Uses("box")); got != "[exec session files preview]" {
		t.Errorf("uses %s", got)
	}
	// Awake, the work goes on to the link (which knows no such agent).
	use.FailWakes(nil)
	if _, err := w.Link.Start(ctx, "box", ports.CommandSpec{Command: "true"}, ports.StartOptions{}); !errors.Is(err, ports.ErrAgentNotFound) {
		t.Errorf("start: %v", err)
	}
	if use.Wakes("box") != 5 || use.Holds("box") != 0 {
		t.Errorf("wakes %d, holds %d", use.Wakes("box"), use.Holds("box"))
	}
	r.tunnelActive("box")
	if n := use.Touches("box", ports.UseTunnel); n != 1 {
		t.Errorf("tunnel touches %d", n)
	}
}

// The link keeps an agent past its disconnect grace while its environment
// sleeps (hibernated, or on its way in or out), and only then; before the
// router is bound, no agent is awaited.
func TestAnAgentIsAwaitedWhileItsEnvironmentSleeps(t *testing.T) {
	r := provideLinkReports(slog.New(slog.DiscardHandler), promexport.NewEgressMetrics())
	if r.AgentAwaited("box") {
		t.Fatal("awaited before binding")
	}
	states := map[string]environment.State{}
	get := func(name string) (environment.Environment, bool) {
		st, ok := states[name]
		return environment.Environment{Name: name, State: st}, ok
	}
	r.bind(&linkTargets{awaited: environmentAsleep(get)})
	for st, want := range map[environment.State]bool{
		environment.StateHibernated: true, environment.StateHibernating: true, environment.StateWaking: true,
		environment.StateReady: false, environment.StateStopped: false, environment.StateFailed: false, environment.StatePaused: false,
	} {
		states["box"] = st
		if got := r.AgentAwaited("box"); got != want {
			t.Errorf("%s: awaited %v, want %v", st, got, want)
		}
	}
	if r.AgentAwaited("host-01") {
		t.Error("an agent that is no environment's is awaited")
	}
}
