package environment

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// fakeRuntime keeps environments in memory; its agents "connect" through
// the fake directory when the test says so.
type fakeRuntime struct {
	mu        sync.Mutex
	envs      map[string]ports.Environment
	specs     map[string]ports.EnvironmentSpec
	provision error
	// hold, when set, keeps Provision waiting until it is closed.
	hold chan struct{}
	// caps, when set, are its capabilities instead of the plain ones.
	caps *ports.RuntimeCapabilities
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{envs: map[string]ports.Environment{}, specs: map[string]ports.EnvironmentSpec{}}
}

func (r *fakeRuntime) Capabilities() ports.RuntimeCapabilities {
	if r.caps != nil {
		return *r.caps
	}
	return ports.RuntimeCapabilities{Runtime: "fake", Isolation: ports.KindContainer, NetworkModes: []ports.NetworkMode{ports.NetworkNone}}
}
func (r *fakeRuntime) Ping(context.Context) error { return nil }
func (r *fakeRuntime) Provision(_ context.Context, spec ports.EnvironmentSpec) (ports.Environment, error) {
	r.mu.Lock()
	hold := r.hold
	r.mu.Unlock()
	if hold != nil {
		<-hold
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if spec.Network == "bogus" {
		return ports.Environment{}, fmt.Errorf("%w: network", ports.ErrInvalidSpec)
	}
	if r.provision != nil {
		return ports.Environment{}, r.provision
	}
	spec.Progress("create")
	e := ports.Environment{Name: spec.Name, Runtime: "fake", RuntimeID: "rt-" + spec.Name, State: ports.EnvRunning, Image: "base", Labels: spec.Labels}
	r.envs[spec.Name] = e
	r.specs[spec.Name] = spec
	return e, nil
}
func (r *fakeRuntime) set(name string, st ports.EnvState) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.envs[name]
	if !ok {
		return ports.ErrEnvNotFound
	}
	e.State = st
	r.envs[name] = e
	return nil
}
func (r *fakeRuntime) Start(_ context.Context, n string) error { return r.set(n, ports.EnvRunning) }
func (r *fakeRuntime) Stop(_ context.Context, n string) error  { return r.set(n, ports.EnvStopped) }
func (r *fakeRuntime) Destroy(_ context.Context, n string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.envs[n]; !ok {
		return ports.ErrEnvNotFound
	}
	delete(r.envs, n)
	return nil
}
func (r *fakeRuntime) Inspect(_ context.Context, n string) (ports.Environment, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.envs[n]
	if !ok {
		return e, ports.ErrEnvNotFound
	}
	return e, nil
}
func (r *fakeRuntime) List(context.Context) ([]ports.Environment, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ports.Environment
	for _, e := range r.envs {
		out = append(out, e)
	}
	return out, nil
}
func (r *fakeRuntime) Recover(ctx context.Context) ([]ports.Environment, error) { return r.List(ctx) }

type fixture struct {
	svc      *Service
	rt       *fakeRuntime
	agents   *portsfake.Directory
	creds    *portsfake.Credentials
	mu       sync.Mutex
	observed []time.Duration
}

func newFixture(t *testing.T, readyTimeout time.Duration) *fixture {
	f := &fixture{rt: newFakeRuntime(), agents: portsfake.NewDirectory(), creds: portsfake.NewCredentials()}
	f.svc = New(Config{Runtimes: map[string]ports.Runtime{"fake": f.rt}, Agents: f.agents, Credentials: f.creds, Clock: clock.Wall{},
		Bootstrap: ports.AgentBootstrap{Binary: "/bin/agent", ServerURL: "http://127.0.0.1:1", Socket: "/tmp/s"}, ReadyTimeout: readyTimeout,
		ObserveProvision: func(rt string, d time.Duration) {
			f.mu.Lock()
			f.observed = append(f.observed, d)
			f.mu.Unlock()
		}})
	t.Cleanup(f.svc.Close)
	return f
}

func waitState(t *testing.T, s *Service, name string, want State) Environment {
	t.Helper()
	var e Environment
	var ok bool
	if !testkit.Within(15*time.Second, func() bool { e, ok = s.Inspect(context.Background(), name); return ok && e.State == want }) {
		t.Fatalf("%s: state %q (ok %v), want %q; events %+v", name, e.State, ok, want, e.Events)
	}
	return e
}

func TestCreateGoesReadyWhenTheAgentConnects(t *testing.T) {
	f := newFixture(t, time.Minute)
	e, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "box"})
	if err != nil || e.State != StateBooting || e.RuntimeID != "rt-box" || e.AgentID != "box" {
		t.Fatalf("create: %+v %v", e, err)
	}
	spec := f.rt.specs["box"]
	if spec.Agent.ID != "box" || spec.Agent.Secret == "" || spec.Agent.Binary != "/bin/agent" || spec.Agent.Socket != "/tmp/s" || !has(f.creds, "box") {
		t.Fatalf("bootstrap %+v, secret stored %v", spec.Agent, has(f.creds, "box"))
	}
	if secretOf(f.creds, "box") != spec.Agent.Secret {
		t.Fatal("the stored secret is not the one the agent got")
	}
	f.agents.SetStatus("box", "ready")
	e = waitState(t, f.svc, "box", StateReady)
	if e.ProvisionTime <= 0 || e.ReadyAt.IsZero() {
		t.Fatalf("ready without a provision time: %+v", e)
	}
	steps := []string{}
	for _, ev := range e.Events {
		steps = append(steps, ev.Step)
	}
	if fmt.Sprint(steps) != "[requested create running agent_ready]" {
		t.Fatalf("events %v", steps)
	}
	f.mu.Lock()
	if len(f.observed) != 1 {
		t.Fatalf("observed %v", f.observed)
	}
	f.mu.Unlock()

	// Stopped from outside: Inspect follows the runtime.
	_ = f.rt.set("box", ports.EnvStopped)
	f.agents.SetStatus("box", "disconnected")
	waitState(t, f.svc, "box", StateStopped)
	if _, err := f.svc.Start(context.Background(), "box"); err != nil {
		t.Fatal(err)
	}
	f.agents.SetStatus("box", "ready")
	waitState(t, f.svc, "box", StateReady)

	if err := f.svc.Delete(context.Background(), "box"); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.svc.Get("box"); ok || has(f.creds, "box") || len(f.rt.envs) != 0 {
		t.Fatalf("after delete: listed %v, secret %v, runtime %v", ok, has(f.creds, "box"), f.rt.envs)
	}
	if err := f.svc.Delete(context.Background(), "box"); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestBadRequestsLeaveNothing(t *testing.T) {
	f := newFixture(t, time.Minute)
	for _, tc := range []struct {
		req  Request
		want error
	}{
		{Request{Runtime: "nope", Name: "a"}, ErrUnknownRuntime},
		{Request{Runtime: "fake"}, ports.ErrInvalidSpec},
		{Request{Runtime: "fake", Name: "b", Network: "bogus"}, ports.ErrInvalidSpec},
	} {
		if _, err := f.svc.Create(context.Background(), tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.req, err, tc.want)
		}
	}
	f.agents.SetStatus("taken", "ready")
	if _, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "taken"}); !errors.Is(err, ports.ErrEnvExists) {
		t.Errorf("a connected agent's name: %v", err)
	}
	if got := f.svc.List(context.Background()); len(got) != 0 || f.creds.Len() != 0 {
		t.Fatalf("left %v and secrets %v", got, f.creds)
	}
	if _, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "dup"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "dup"}); !errors.Is(err, ports.ErrEnvExists) {
		t.Fatalf("duplicate: %v", err)
	}
}

func TestFailuresShowInTheEnvironment(t *testing.T) {
	f := newFixture(t, 100*time.Millisecond)
	f.rt.provision = fmt.Errorf("engine exploded")
	e, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "x"})
	if err != nil || e.State != StateFailed || e.Error != "engine exploded" || has(f.creds, "x") {
		t.Fatalf("failed provision: %+v %v", e, err)
	}
	f.rt.provision = nil
	if _, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "silent"}); err != nil {
		t.Fatal(err)
	}
	e = waitState(t, f.svc, "silent", StateFailed)
	if e.Error == "" {
		t.Fatal("no reason for an agent that never came")
	}
}

func TestRecoverFindsWhatTheRuntimeHas(t *testing.T) {
	f := newFixture(t, time.Minute)
	f.rt.envs["old"] = ports.Environment{Name: "old", Runtime: "fake", State: ports.EnvRunning}
	f.rt.envs["off"] = ports.Environment{Name: "off", Runtime: "fake", State: ports.EnvStopped}
	f.agents.SetStatus("old", "ready")
	f.svc.Recover(context.Background())
	got := f.svc.List(context.Background())
	if len(got) != 2 || got[0].Name != "off" || got[0].State != StateStopped || got[1].Name != "old" || got[1].State != StateReady {
		t.Fatalf("recovered %+v", got)
	}
}

func has(c *portsfake.Credentials, id string) bool { _, ok := c.Secret(id); return ok }

func secretOf(c *portsfake.Credentials, id string) string { s, _ := c.Secret(id); return s }

// A recovered environment becomes ready when its agent reconnects, with
// nobody listing or inspecting it (a task resumed after a restart waits on
// Get; it waited forever).
func TestRecoveredEnvironmentIsReadyWhenItsAgentReconnects(t *testing.T) {
	f := newFixture(t, time.Minute)
	f.rt.envs["back"] = ports.Environment{Name: "back", Runtime: "fake", State: ports.EnvRunning}
	f.svc.Recover(context.Background())
	if e, _ := f.svc.Get("back"); e.State != StateBooting {
		t.Fatalf("before its agent: %s", e.State)
	}
	f.agents.SetStatus("back", "ready")
	var e Environment
	if !testkit.Within(10*time.Second, func() bool { e, _ = f.svc.Get("back"); return e.State == StateReady }) {
		t.Fatalf("still %s after its agent reconnected", e.State)
	}
}

// An environment deleted while its runtime is still making it is not left
// on the runtime when the making ends (a pool's member dropped mid-refill
// once outlived its test as a running VM).
func TestDeletedWhileProvisioningLeavesNothing(t *testing.T) {
	f := newFixture(t, time.Minute)
	hold := make(chan struct{})
	f.rt.mu.Lock()
	f.rt.hold = hold
	f.rt.mu.Unlock()
	created := make(chan Environment, 1)
	go func() {
		e, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "late"})
		if err != nil {
			t.Error(err)
		}
		created <- e
	}()
	eventually(t, "provisioning", func() bool { e, ok := f.svc.Get("late"); return ok && e.State == StateProvisioning })
	if err := f.svc.Delete(context.Background(), "late"); err != nil {
		t.Fatal(err)
	}
	close(hold)
	if e := <-created; e.State != StateDeleting || e.Name != "late" || len(e.Events) == 0 {
		t.Fatalf("create answered %+v", e)
	}
	f.rt.mu.Lock()
	_, left := f.rt.envs["late"]
	f.rt.mu.Unlock()
	if left {
		t.Fatal("the environment deleted while provisioning is still on the runtime")
	}
	if _, ok := f.svc.Get("late"); ok {
		t.Fatal("it is still listed")
	}
}
