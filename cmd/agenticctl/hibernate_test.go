package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// sleepyEnvs is the environments use case in memory, whose one runtime
// hibernates keeping memory: it records what it was asked.
type sleepyEnvs struct {
	envsOf
	mu       sync.Mutex
	requests []environment.Request
	pools    []ports.Pool
	// wakeErr, when set, is what Wake answers.
	wakeErr error
}

func (s *sleepyEnvs) Runtimes() []ports.RuntimeCapabilities {
	return []ports.RuntimeCapabilities{{Runtime: "libvirt", Isolation: ports.KindVM, NetworkModes: []ports.NetworkMode{ports.NetworkNone},
		Hibernate: ports.HibernateMemory}, {Runtime: "host", Isolation: ports.KindHost, NetworkModes: []ports.NetworkMode{ports.NetworkHost}}}
}
func (s *sleepyEnvs) OfferedNetworks(c ports.RuntimeCapabilities) []ports.NetworkMode {
	return c.NetworkModes
}
func (s *sleepyEnvs) Create(_ context.Context, req environment.Request) (environment.Environment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, req)
	return environment.Environment{Name: req.Name, Runtime: req.Runtime, State: environment.StateProvisioning, AgentID: req.Name,
		CreatedAt: time.Now(), Idle: req.Idle}, nil
}
func (s *sleepyEnvs) List(context.Context) []environment.Environment {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []environment.Environment
	for _, e := range s.envsOf {
		out = append(out, e)
	}
	return out
}
func (s *sleepyEnvs) Inspect(_ context.Context, name string) (environment.Environment, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.envsOf[name]
	return e, ok
}
func (s *sleepyEnvs) Get(name string) (environment.Environment, bool) {
	return s.Inspect(context.Background(), name)
}
func (s *sleepyEnvs) Hibernate(_ context.Context, name string) (environment.Environment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.envsOf[name]
	if !ok {
		return e, fmt.Errorf("%w: %q", ports.ErrEnvNotFound, name)
	}
	if e.State != environment.StateReady {
		return environment.Environment{}, fmt.Errorf("%w: %q is %s; only a running environment hibernates", environment.ErrWrongState, name, e.State)
	}
	e.State, e.SavedBytes, e.SleepReason, e.HibernatedAt = environment.StateHibernated, 512<<20, environment.Requested, time.Now()
	s.envsOf[name] = e
	return e, nil
}
func (s *sleepyEnvs) Wake(_ context.Context, name string) (environment.Environment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.envsOf[name]
	if !ok {
		return e, fmt.Errorf("%w: %q", ports.ErrEnvNotFound, name)
	}
	if s.wakeErr != nil {
		e.State, e.Error = environment.StateFailed, s.wakeErr.Error()
		s.envsOf[name] = e
		return e, fmt.Errorf("%w: %v", ports.ErrWakeFailed, s.wakeErr)
	}
	e.State, e.SavedBytes, e.SleepReason, e.HibernatedAt = environment.StateReady, 0, "", time.Time{}
	s.envsOf[name] = e
	return e, nil
}
func (s *sleepyEnvs) PutPool(_ context.Context, p ports.Pool) (environment.PoolStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pools = append(s.pools, p)
	return environment.PoolStatus{Pool: p}, nil
}
func (s *sleepyEnvs) DeletePool(context.Context, string) error { return environment.ErrPoolNotFound }
func (s *sleepyEnvs) Pools() []environment.PoolStatus          { return nil }
func (s *sleepyEnvs) Pool(string) (environment.PoolStatus, bool) {
	return environment.PoolStatus{}, false
}

// env hibernate, env wake, env list's state of a hibernated environment,
// env runtimes' hibernate option, and --idle-after/--delete-after of env
// create and pool put, against a real REST server.
func TestEnvHibernateAndWake(t *testing.T) {
	envs := &sleepyEnvs{envsOf: envsOf{"vm1": {Name: "vm1", Runtime: "libvirt", State: environment.StateReady, AgentID: "vm1", CreatedAt: time.Now()}}}
	link := resttest.NewLink()
	srv := httptest.NewServer(rest.New(rest.Deps{Link: link, Agents: link, Token: token, Version: "test", Environments: envs, Pools: envs}).Handler())
	t.Cleanup(srv.Close)
	f := &fixture{link: link, url: srv.URL}

	r := f.run(t, "", "env", "hibernate", "vm1")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "vm1: hibernated (512.0 MiB; requested)" {
		t.Fatalf("env hibernate: exit %d: %q %q", r.code, r.stdout, r.stderr)
	}
	r = f.run(t, "", "env", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "hibernated (512.0 MiB; requested)") {
		t.Fatalf("env list: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	r = f.run(t, "", "env", "get", "vm1")
	if r.code != 0 || !strings.Contains(r.stdout, `"saved_bytes": 536870912`) || !strings.Contains(r.stdout, `"sleep_reason": "requested"`) {
		t.Fatalf("env get: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	r = f.run(t, "", "env", "wake", "vm1")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "vm1: ready" {
		t.Fatalf("env wake: exit %d: %q %q", r.code, r.stdout, r.stderr)
	}
	envs.mu.Lock()
	envs.envsOf["vm1"] = environment.Environment{Name: "vm1", Runtime: "libvirt", State: environment.StateStopped, AgentID: "vm1", CreatedAt: time.Now()}
	envs.mu.Unlock()
	r = f.run(t, "", "env", "hibernate", "vm1")
	if r.code == 0 || !strings.Contains(r.stderr, "invalid_state") || !strings.Contains(r.stderr, "HTTP 409") {
		t.Fatalf("env hibernate of a stopped one: exit %d: %q", r.code, r.stderr)
	}
	envs.mu.Lock()
	envs.wakeErr = ports.ErrSavedStateLost
	envs.mu.Unlock()
	r = f.run(t, "", "env", "wake", "vm1")
	if r.code == 0 || !strings.Contains(r.stderr, "wake_failed") || !strings.Contains(r.stderr, "saved state") || !strings.Contains(r.stderr, "env get") {
		t.Fatalf("a failed wake: exit %d: %q", r.code, r.stderr)
	}
	if r = f.run(t, "", "env", "wake"); r.code == 0 {
		t.Fatalf("env wake without a name: exit 0")
	}

	r = f.run(t, "", "env", "runtimes")
	if r.code != 0 || !strings.Contains(r.stdout, "hibernate=memory") || strings.Contains(r.stdout, "hibernate=none") {
		t.Fatalf("env runtimes: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}

	r = f.run(t, "", "env", "create", "--runtime", "libvirt", "--idle-after", "30m", "--delete-after", "36h", "--no-wait", "vm2")
	if r.code != 0 {
		t.Fatalf("env create: exit %d: %s", r.code, r.stderr)
	}
	r = f.run(t, "", "env", "create", "--runtime", "libvirt", "--no-wait", "vm3")
	if r.code != 0 {
		t.Fatalf("env create without a policy: exit %d: %s", r.code, r.stderr)
	}
	if r = f.run(t, "", "env", "create", "--runtime", "libvirt", "--idle-after", "soon", "vm4"); r.code == 0 || !strings.Contains(r.stderr, "idle-after") {
		t.Fatalf("a bad --idle-after: exit %d: %s", r.code, r.stderr)
	}
	if r = f.run(t, "", "env", "create", "--runtime", "libvirt", "--delete-after", "-1h", "vm5"); r.code == 0 || !strings.Contains(r.stderr, "delete_after") || !strings.Contains(r.stderr, "negative") {
		t.Fatalf("a negative --delete-after: exit %d: %s", r.code, r.stderr)
	}
	r = f.run(t, "", "pool", "put", "--runtime", "libvirt", "--size", "0", "--idle-after", "45m", "--delete-after", "24h", "warm")
	if r.code != 0 {
		t.Fatalf("pool put: exit %d: %s", r.code, r.stderr)
	}
	envs.mu.Lock()
	defer envs.mu.Unlock()
	want := []ports.IdlePolicy{{IdleAfter: 30 * time.Minute, DeleteAfter: 36 * time.Hour}, {}}
	if len(envs.requests) != len(want) {
		t.Fatalf("create requests: %+v", envs.requests)
	}
	for i, w := range want {
		if envs.requests[i].Idle != w {
			t.Errorf("create %d: policy %+v, want %+v", i, envs.requests[i].Idle, w)
		}
	}
	if len(envs.pools) != 1 || envs.pools[0].Idle != (ports.IdlePolicy{IdleAfter: 45 * time.Minute, DeleteAfter: 24 * time.Hour}) {
		t.Fatalf("pool put: %+v", envs.pools)
	}
}
