package rest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// fakeEnvironments is the environments use case in memory; fail makes the
// next call of an operation return that error.
type fakeEnvironments struct {
	mu   sync.Mutex
	envs map[string]environment.Environment
	fail map[string]error
	// injected, when set, counts the environments' injected usage.
	injected *inject.Registry
	// requests are the create requests it was given, in order.
	requests []environment.Request
}

func newFakeEnvironments() *fakeEnvironments {
	return &fakeEnvironments{envs: map[string]environment.Environment{}, fail: map[string]error{}}
}

func (f *fakeEnvironments) failNext(op string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[op] = err
}

func (f *fakeEnvironments) take(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.fail[op]
	delete(f.fail, op)
	return err
}

func (f *fakeEnvironments) Runtimes() []ports.RuntimeCapabilities {
	return []ports.RuntimeCapabilities{{Runtime: "docker", Isolation: ports.KindContainer, Pause: true, Hibernate: ports.HibernateFilesystem, NetworkModes: []ports.NetworkMode{ports.NetworkNone},
		Limits: []ports.Limit{ports.LimitCPUs}, Images: true, Profiles: []string{"default"}}}
}

func (f *fakeEnvironments) OfferedNetworks(c ports.RuntimeCapabilities) []ports.NetworkMode {
	return c.NetworkModes
}

func (f *fakeEnvironments) Create(_ context.Context, req environment.Request) (environment.Environment, error) {
	if err := f.take("create"); err != nil {
		return environment.Environment{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	e := environment.Environment{Name: req.Name, Runtime: req.Runtime, State: environment.StateProvisioning, AgentID: req.Name,
		CreatedAt: time.Date(2026, 5, 9, 7, 0, 0, 0, time.UTC), Events: []environment.Event{{At: time.Date(2026, 5, 9, 7, 0, 0, 0, time.UTC), Step: "requested"}},
		Labels: req.Labels}
	f.envs[req.Name] = e
	return e, nil
}

func (f *fakeEnvironments) List(context.Context) []environment.Environment {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []environment.Environment
	for _, e := range f.envs {
		out = append(out, e)
	}
	return out
}

func (f *fakeEnvironments) InjectedUsage(name string) (inject.Usage, bool) {
	if f.injected == nil {
		return inject.Usage{}, false
	}
	u, _ := f.injected.Usage(name)
	return u, u != (inject.Usage{})
}

func (f *fakeEnvironments) Get(name string) (environment.Environment, bool) {
	return f.Inspect(context.Background(), name)
}

func (f *fakeEnvironments) Inspect(_ context.Context, name string) (environment.Environment, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.envs[name]
	return e, ok
}

func (f *fakeEnvironments) op(op, name string, state environment.State) (environment.Environment, error) {
	if err := f.take(op); err != nil {
		return environment.Environment{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.envs[name]
	if !ok {
		return e, fmt.Errorf("%w: %q", ports.ErrEnvNotFound, name)
	}
	e.State = state
	f.envs[name] = e
	return e, nil
}

func (f *fakeEnvironments) Start(_ context.Context, n string) (environment.Environment, error) {
	return f.op("start", n, environment.StateBooting)
}
func (f *fakeEnvironments) Stop(_ context.Context, n string) (environment.Environment, error) {
	return f.op("stop", n, environment.StateStopped)
}
func (f *fakeEnvironments) Pause(_ context.Context, n string) (environment.Environment, error) {
	return f.op("pause", n, environment.StatePaused)
}
func (f *fakeEnvironments) Resume(_ context.Context, n string) (environment.Environment, error) {
	return f.op("resume", n, environment.StateReady)
}
func (f *fakeEnvironments) Hibernate(_ context.Context, n string) (environment.Environment, error) {
	return f.op("hibernate", n, environment.StateHibernated)
}
func (f *fakeEnvironments) Wake(_ context.Context, n string) (environment.Environment, error) {
	return f.op("wake", n, environment.StateReady)
}
func (f *fakeEnvironments) Delete(_ context.Context, n string) error {
	if _, err := f.op("delete", n, environment.StateDeleting); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.envs, n)
	return nil
}

// Every environments operation, its answers and its refusals, through the
// spec-validating client: a status or body openapi.yaml does not declare
// fails the test.
func TestEnvironmentsOperationsKeepTheContract(t *testing.T) {
	envs := newFakeEnvironments()
	e := newEnv(t, func(d *Deps) { d.Environments = envs })
	engine := errors.New("engine said no")

	expect(t, e.call("GET", "/api/v1/runtimes", ""), http.StatusOK, "")
	expect(t, e.call("POST", "/api/v1/environments", `{"runtime":"docker","name":"box"}`), http.StatusAccepted, "")
	expect(t, e.call("GET", "/api/v1/environments", ""), http.StatusOK, "")
	expect(t, e.call("GET", "/api/v1/environments/box", ""), http.StatusOK, "")
	expect(t, e.call("GET", "/api/v1/environments/nope", ""), http.StatusNotFound, "environment_not_found")

	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("%w: pids", ports.ErrInvalidSpec), http.StatusBadRequest, "invalid_request"},
		{fmt.Errorf("%w: %q", environment.ErrUnknownRuntime, "zfs"), http.StatusBadRequest, "unknown_runtime"},
		{fmt.Errorf("%w: box", ports.ErrEnvExists), http.StatusConflict, "environment_exists"},
		{fmt.Errorf("%w: down", ports.ErrRuntimeUnavailable), http.StatusServiceUnavailable, "runtime_unavailable"},
		{engine, http.StatusBadGateway, "runtime_error"},
	} {
		envs.failNext("create", tc.err)
		expect(t, e.call("POST", "/api/v1/environments", `{"runtime":"docker","name":"other"}`), tc.status, tc.code)
	}
	expect(t, e.call("POST", "/api/v1/environments", `{"runtime":"docker","name":"x","resources":{"cpus":-1}}`), http.StatusBadRequest, "invalid_request")
	expect(t, e.call("POST", "/api/v1/environments", `{"runtime":`), http.StatusBadRequest, "")

	for _, op := range []string{"start", "stop", "pause", "resume", "hibernate", "wake"} {
		path := "/api/v1/environments/box/" + op
		expect(t, e.call("POST", path, ""), http.StatusOK, "")
		expect(t, e.call("POST", "/api/v1/environments/nope/"+op, ""), http.StatusNotFound, "environment_not_found")
		for _, tc := range []struct {
			err    error
			status int
			code   string
		}{
			{fmt.Errorf("%w: the host runtime cannot", ports.ErrUnsupported), http.StatusConflict, "not_supported"},
			{fmt.Errorf("%w: down", ports.ErrRuntimeUnavailable), http.StatusServiceUnavailable, "runtime_unavailable"},
			{engine, http.StatusBadGateway, "runtime_error"},
		} {
			envs.failNext(op, tc.err)
			expect(t, e.call("POST", path, ""), tc.status, tc.code)
		}
	}
	envs.failNext("delete", engine)
	expect(t, e.call("DELETE", "/api/v1/environments/box", ""), http.StatusBadGateway, "runtime_error")
	expect(t, e.call("DELETE", "/api/v1/environments/box", ""), http.StatusNoContent, "")
	expect(t, e.call("DELETE", "/api/v1/environments/box", ""), http.StatusNotFound, "environment_not_found")
	expect(t, e.callAuth("GET", "/api/v1/environments", "", ""), http.StatusUnauthorized, "")
}

// Without environments (no runtime configured) every operation still
// answers within the contract.
func TestEnvironmentsWithoutRuntimes(t *testing.T) {
	e := newEnv(t)
	expect(t, e.call("GET", "/api/v1/runtimes", ""), http.StatusOK, "")
	expect(t, e.call("GET", "/api/v1/environments", ""), http.StatusOK, "")
	expect(t, e.call("POST", "/api/v1/environments", `{"runtime":"docker","name":"box"}`), http.StatusServiceUnavailable, "runtime_unavailable")
	for _, op := range []string{"start", "stop", "pause", "resume", "hibernate", "wake"} {
		expect(t, e.call("POST", "/api/v1/environments/box/"+op, ""), http.StatusNotFound, "environment_not_found")
	}
	expect(t, e.call("DELETE", "/api/v1/environments/box", ""), http.StatusNotFound, "environment_not_found")
}
