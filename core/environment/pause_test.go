package environment

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func (r *fakeRuntime) Pause(_ context.Context, n string) error  { return r.set(n, ports.EnvPaused) }
func (r *fakeRuntime) Resume(_ context.Context, n string) error { return r.set(n, ports.EnvRunning) }

// pausable is the fake runtime declaring pause and a memory limit.
type pausable struct{ *fakeRuntime }

func (p pausable) Capabilities() ports.RuntimeCapabilities {
	c := p.fakeRuntime.Capabilities()
	c.Pause, c.Limits = true, []ports.Limit{ports.LimitMemoryMB}
	return c
}

func TestPauseAndResumeFollowTheCapability(t *testing.T) {
	f := newFixture(t, time.Minute)
	f.svc.cfg.Runtimes["pausable"] = pausable{f.rt}
	ctx := context.Background()

	if _, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "plain"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Pause(ctx, "plain"); !errors.Is(err, ports.ErrUnsupported) {
		t.Fatalf("pause on a runtime without pause: %v", err)
	}
	if e, _ := f.svc.Get("plain"); e.State == StatePaused || f.rt.envs["plain"].State != ports.EnvRunning {
		t.Fatalf("a refused pause changed the state: %+v", e)
	}

	if _, err := f.svc.Create(ctx, Request{Runtime: "pausable", Name: "box", Resources: ports.Resources{MemoryMB: 256}}); err != nil {
		t.Fatal(err)
	}
	f.agents.SetStatus("box", "ready")
	waitState(t, f.svc, "box", StateReady)
	e, err := f.svc.Pause(ctx, "box")
	if err != nil || e.State != StatePaused || f.rt.envs["box"].State != ports.EnvPaused {
		t.Fatalf("pause: %+v %v", e, err)
	}
	waitState(t, f.svc, "box", StatePaused) // a refresh agrees with the runtime
	e, err = f.svc.Resume(ctx, "box")
	if err != nil || e.State != StateReady || f.rt.envs["box"].State != ports.EnvRunning {
		t.Fatalf("resume: %+v %v", e, err)
	}
	if _, err := f.svc.Pause(ctx, "nope"); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Fatalf("pause of an unknown environment: %v", err)
	}
}

func TestUndeclaredLimitsAreRefusedBeforeAnythingIsStored(t *testing.T) {
	f := newFixture(t, time.Minute)
	f.svc.cfg.Runtimes["pausable"] = pausable{f.rt}
	for _, req := range []Request{
		{Runtime: "fake", Name: "a", Resources: ports.Resources{MemoryMB: 256}}, // fake declares no limits
		{Runtime: "pausable", Name: "b", Resources: ports.Resources{PIDs: 10}},
		{Runtime: "pausable", Name: "c", ReadOnlyRoot: true},
		{Runtime: "pausable", Name: "d", Image: "alpine"},
	} {
		if _, err := f.svc.Create(context.Background(), req); !errors.Is(err, ports.ErrInvalidSpec) {
			t.Errorf("%+v: %v, want ErrInvalidSpec", req, err)
		}
	}
	if len(f.rt.specs) != 0 || f.creds.Len() != 0 || len(f.svc.List(context.Background())) != 0 {
		t.Fatalf("refused requests left specs %v secrets %v", f.rt.specs, f.creds)
	}
}

// networked is the fake runtime offering a bridge too.
type networked struct{ *fakeRuntime }

func (n networked) Capabilities() ports.RuntimeCapabilities {
	c := n.fakeRuntime.Capabilities()
	c.NetworkModes = []ports.NetworkMode{ports.NetworkNone, ports.NetworkBridge}
	return c
}

func TestOnlyAllowedNetworksForContainersAndVMs(t *testing.T) {
	f := newFixture(t, time.Minute)
	f.svc.cfg.Runtimes["net"] = networked{f.rt}
	f.svc.cfg.AllowedNetworks = []ports.NetworkMode{ports.NetworkNone}
	ctx := context.Background()
	if _, err := f.svc.Create(ctx, Request{Runtime: "net", Name: "open", Network: ports.NetworkBridge}); !errors.Is(err, ports.ErrInvalidSpec) || !strings.Contains(err.Error(), "not allowed") {
		t.Fatalf("a network the runtime offers but the server does not allow: %v", err)
	}
	if _, err := f.svc.Create(ctx, Request{Runtime: "net", Name: "closed", Network: ports.NetworkNone}); err != nil {
		t.Fatalf("an allowed network: %v", err)
	}
	f.svc.cfg.AllowedNetworks = []ports.NetworkMode{ports.NetworkNone, ports.NetworkBridge}
	if _, err := f.svc.Create(ctx, Request{Runtime: "net", Name: "opened", Network: ports.NetworkBridge}); err != nil {
		t.Fatalf("once allowed: %v", err)
	}
}

// OfferedNetworks lists exactly the modes a create may name: what the
// dashboard and GET /api/v1/runtimes offer is what Create accepts.
func TestOfferedNetworksAreTheOnesCreateAccepts(t *testing.T) {
	f := newFixture(t, time.Minute)
	f.svc.cfg.Runtimes["net"] = networked{f.rt}
	f.svc.cfg.AllowedNetworks = []ports.NetworkMode{ports.NetworkNone}
	caps := networked{f.rt}.Capabilities()
	if got := f.svc.OfferedNetworks(caps); !slices.Equal(got, []ports.NetworkMode{ports.NetworkNone}) {
		t.Fatalf("offered with AGENTIC_ALLOWED_NETWORKS=none: %v", got)
	}
	ctx := context.Background()
	for i, m := range caps.NetworkModes {
		_, err := f.svc.Create(ctx, Request{Runtime: "net", Name: fmt.Sprintf("n%d", i), Network: m})
		if offered := slices.Contains(f.svc.OfferedNetworks(caps), m); offered != (err == nil) {
			t.Errorf("network %s: offered %v, create: %v", m, offered, err)
		}
	}
	host := caps
	host.Isolation = ports.KindHost
	if got := f.svc.OfferedNetworks(host); !slices.Equal(got, caps.NetworkModes) {
		t.Errorf("host isolation shares the host's network, every mode offered: %v", got)
	}
	f.svc.cfg.AllowedNetworks = nil
	if got := f.svc.OfferedNetworks(caps); !slices.Equal(got, caps.NetworkModes) {
		t.Errorf("no server limit: %v", got)
	}
}

// openByDefault is a runtime whose default network is open (a Kubernetes
// pod network no policy closes).
type openByDefault struct{ *fakeRuntime }

func (o openByDefault) Capabilities() ports.RuntimeCapabilities {
	c := o.fakeRuntime.Capabilities()
	c.Isolation, c.NetworkModes = ports.KindContainer, []ports.NetworkMode{ports.NetworkBridge}
	return c
}

// A request naming no network gets the runtime's default, held to the
// server's allowed networks like a named one: an open default is not used
// unless the operator allowed it.
func TestARuntimesOpenDefaultNetworkMustBeAllowed(t *testing.T) {
	f := newFixture(t, time.Minute)
	f.svc.cfg.Runtimes["open"] = openByDefault{f.rt}
	f.svc.cfg.AllowedNetworks = []ports.NetworkMode{ports.NetworkNone}
	ctx := context.Background()
	_, err := f.svc.Create(ctx, Request{Runtime: "open", Name: "dflt"})
	if !errors.Is(err, ports.ErrInvalidSpec) || !strings.Contains(err.Error(), "runtime's default") || !strings.Contains(err.Error(), "AGENTIC_ALLOWED_NETWORKS") {
		t.Fatalf("an open default the server does not allow: %v", err)
	}
	if f.rt.has("dflt") {
		t.Fatal("refused, yet provisioned")
	}
	f.svc.cfg.AllowedNetworks = []ports.NetworkMode{ports.NetworkNone, ports.NetworkBridge}
	if _, err := f.svc.Create(ctx, Request{Runtime: "open", Name: "dflt"}); err != nil {
		t.Fatalf("once allowed: %v", err)
	}
}
