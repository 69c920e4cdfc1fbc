package rest

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// Hibernate and wake refusals, each as the API says it, through the
// spec-validating client (a status the operation does not declare fails).
func TestHibernateAndWakeErrorCodes(t *testing.T) {
	envs := newFakeEnvironments()
	e := newEnv(t, func(d *Deps) { d.Environments = envs })
	expect(t, e.call("POST", "/api/v1/environments", `{"runtime":"docker","name":"box"}`), http.StatusAccepted, "")
	for _, tc := range []struct {
		op     string
		err    error
		status int
		code   string
	}{
		{"hibernate", fmt.Errorf("%w: %q is stopped; only a running environment hibernates", environment.ErrWrongState, "box"), http.StatusConflict, "invalid_state"},
		{"hibernate", fmt.Errorf("%w: 10 bytes saved, limit 10", environment.ErrHibernateLimit), http.StatusInsufficientStorage, "hibernate_limit"},
		{"hibernate", fmt.Errorf("%w: the host runtime cannot hibernate", ports.ErrUnsupported), http.StatusConflict, "not_supported"},
		{"wake", fmt.Errorf("%w: wake: %w", ports.ErrWakeFailed, ports.ErrSavedStateLost), http.StatusServiceUnavailable, "wake_failed"},
		{"wake", fmt.Errorf("%w: down", ports.ErrRuntimeUnavailable), http.StatusServiceUnavailable, "runtime_unavailable"},
	} {
		envs.failNext(tc.op, tc.err)
		r := e.call("POST", "/api/v1/environments/box/"+tc.op, "")
		expect(t, r, tc.status, tc.code)
		var body struct{ Error string }
		r.decode(t, &body)
		if want := tc.err.Error(); !contains(body.Error, want) {
			t.Errorf("%s: message %q does not say %q", tc.op, body.Error, want)
		}
	}
	var got struct{ State string }
	r := e.call("POST", "/api/v1/environments/box/hibernate", "")
	expect(t, r, http.StatusOK, "")
	r.decode(t, &got)
	if got.State != "hibernated" {
		t.Fatalf("state after hibernate: %q", got.State)
	}
	r = e.call("POST", "/api/v1/environments/box/wake", "")
	expect(t, r, http.StatusOK, "")
	r.decode(t, &got)
	if got.State != "ready" {
		t.Fatalf("state after wake: %q", got.State)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// Work aimed at a hibernated environment that could not be woken is 503
// wake_failed whichever operation met it (mapped once, in newError), not
// the operation's own agent_error.
func TestWakeFailedFromAnyOperation(t *testing.T) {
	e := newEnv(t)
	e.link.SetBeforeStart(func(string, ports.CommandSpec) error {
		return fmt.Errorf("%w: wake: the saved state is gone", ports.ErrWakeFailed)
	})
	expect(t, e.call("POST", "/api/v1/agents/a1/exec", `{"command":"true"}`), http.StatusServiceUnavailable, "wake_failed")
	expect(t, e.call("POST", "/api/v1/agents/a1/commands", `{"command":"true"}`), http.StatusServiceUnavailable, "wake_failed")
	e.link.SetBeforeStart(nil)
	expect(t, e.call("POST", "/api/v1/agents/a1/exec", `{"command":"true"}`), http.StatusOK, "")
}

// What an environment's record says of its sleep and its idle policy is in
// its answers (get and list), and absent when there is nothing to say.
func TestHibernateFieldsAreShown(t *testing.T) {
	envs := newFakeEnvironments()
	e := newEnv(t, func(d *Deps) { d.Environments = envs })
	at := time.Date(2026, 5, 9, 8, 0, 0, 0, time.UTC)
	envs.envs["sleepy"] = environment.Environment{Name: "sleepy", Runtime: "docker", State: environment.StateHibernated, AgentID: "sleepy",
		CreatedAt: at.Add(-time.Hour), Hibernate: ports.HibernateMemory, HibernatedAt: at, SavedBytes: 536870912, SleepReason: "idle for 30m0s",
		LastActivity: at.Add(-30 * time.Minute), LastActivityKind: ports.UseExec, Idle: ports.IdlePolicy{IdleAfter: 30 * time.Minute, DeleteAfter: 36 * time.Hour}}
	envs.envs["plain"] = environment.Environment{Name: "plain", Runtime: "host", State: environment.StateReady, AgentID: "plain", CreatedAt: at}

	want := map[string]any{"state": "hibernated", "hibernate": "memory", "hibernated_at": "2026-05-09T08:00:00Z", "saved_bytes": 536870912.0,
		"sleep_reason": "idle for 30m0s", "last_activity_at": "2026-05-09T07:30:00Z", "last_activity_kind": "exec",
		"idle_after": "30m0s", "delete_after": "36h0m0s"}
	check := func(where string, got map[string]any) {
		t.Helper()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %v, want %v", where, k, got[k], v)
			}
		}
	}
	var one map[string]any
	r := e.call("GET", "/api/v1/environments/sleepy", "")
	expect(t, r, http.StatusOK, "")
	r.decode(t, &one)
	check("get", one)

	var plain map[string]any
	r = e.call("GET", "/api/v1/environments/plain", "")
	expect(t, r, http.StatusOK, "")
	r.decode(t, &plain)
	for k := range want {
		if _, ok := plain[k]; ok && k != "state" {
			t.Errorf("an awake environment without a policy shows %s = %v", k, plain[k])
		}
	}

	var list struct{ Environments []map[string]any }
	r = e.call("GET", "/api/v1/environments", "")
	expect(t, r, http.StatusOK, "")
	r.decode(t, &list)
	found := false
	for _, got := range list.Environments {
		if got["name"] == "sleepy" {
			found = true
			check("list", got)
		}
	}
	if !found {
		t.Fatalf("list %v", list)
	}

	var rts struct{ Runtimes []map[string]any }
	r = e.call("GET", "/api/v1/runtimes", "")
	expect(t, r, http.StatusOK, "")
	r.decode(t, &rts)
	if len(rts.Runtimes) != 1 || rts.Runtimes[0]["hibernate"] != "filesystem" {
		t.Fatalf("runtimes %v", rts.Runtimes)
	}
}

// idle_after and delete_after are parsed where they enter: a good one
// reaches the use case as a duration, a bad or negative one is a 400 that
// names the field, and the use case never sees it.
func TestIdlePolicyParsedAtTheEdge(t *testing.T) {
	envs := newFakeEnvironments()
	e := newEnv(t, func(d *Deps) { d.Environments = envs; d.Pools = fakePools{t} })
	for _, tc := range []struct {
		body string
		want ports.IdlePolicy
	}{
		{`{"runtime":"docker","name":"a","idle_after":"30m","delete_after":"1h30m"}`, ports.IdlePolicy{IdleAfter: 30 * time.Minute, DeleteAfter: 90 * time.Minute}},
		{`{"runtime":"docker","name":"b","idle_after":"90s"}`, ports.IdlePolicy{IdleAfter: 90 * time.Second}},
		{`{"runtime":"docker","name":"c","idle_after":"0","delete_after":""}`, ports.IdlePolicy{}},
		{`{"runtime":"docker","name":"d"}`, ports.IdlePolicy{}},
	} {
		expect(t, e.call("POST", "/api/v1/environments", tc.body), http.StatusAccepted, "")
		if got := envs.requests[len(envs.requests)-1].Idle; got != tc.want {
			t.Errorf("%s: the use case got %+v, want %+v", tc.body, got, tc.want)
		}
	}
	asked := len(envs.requests)
	for _, tc := range []struct{ body, field string }{
		{`{"runtime":"docker","name":"x","idle_after":"soon"}`, "idle_after"},
		{`{"runtime":"docker","name":"x","idle_after":"-5m"}`, "idle_after"},
		{`{"runtime":"docker","name":"x","delete_after":"30"}`, "delete_after"},
		{`{"runtime":"docker","name":"x","delete_after":"-1ns"}`, "delete_after"},
		{`{"runtime":"docker","name":"x","delete_after":"99999999999h"}`, "delete_after"},
	} {
		r := e.call("POST", "/api/v1/environments", tc.body)
		expect(t, r, http.StatusBadRequest, "invalid_request")
		var body struct{ Error string }
		r.decode(t, &body)
		if !contains(body.Error, tc.field) {
			t.Errorf("%s: message %q does not name %s", tc.body, body.Error, tc.field)
		}
	}
	expect(t, e.call("POST", "/api/v1/environments", `{"runtime":"docker","name":"x","idle_after":30}`), http.StatusBadRequest, "")
	if len(envs.requests) != asked {
		t.Fatalf("a bad duration reached the use case: %+v", envs.requests[asked:])
	}
	expect(t, e.call("PUT", "/api/v1/pools/p", `{"runtime":"docker","size":1,"idle_after":"-1h"}`), http.StatusBadRequest, "invalid_request")
	expect(t, e.call("PUT", "/api/v1/pools/p", `{"runtime":"docker","size":1,"delete_after":"tomorrow"}`), http.StatusBadRequest, "invalid_request")
}

// On the real use case: a runtime that cannot hibernate refuses idle_after
// (an environment's and a pool's) with 400 and takes delete_after; one that
// can keeps both, shows them back, and a pool shows its policy beside its
// count of idle members.
func TestIdlePolicyOnTheRealUseCase(t *testing.T) {
	modes := []ports.NetworkMode{ports.NetworkNone}
	sleepy := &specRuntime{caps: ports.RuntimeCapabilities{Runtime: "sleepy", Isolation: ports.KindContainer, NetworkModes: modes,
		Hibernate: ports.HibernateMemory}, specs: map[string]ports.EnvironmentSpec{}}
	plain := &specRuntime{caps: ports.RuntimeCapabilities{Runtime: "plain", Isolation: ports.KindContainer, NetworkModes: modes},
		specs: map[string]ports.EnvironmentSpec{}}
	svc := environment.New(environment.Config{Runtimes: map[string]ports.Runtime{"sleepy": sleepy, "plain": plain},
		Agents: portsfake.NewDirectory(), Credentials: portsfake.NewCredentials(), Clock: clock.Wall{},
		Bootstrap: ports.AgentBootstrap{Binary: "/bin/agent"}, ReadyTimeout: time.Minute, Pools: portsfake.NewPoolStore()})
	t.Cleanup(svc.Close)
	svc.Recover(context.Background())
	e := newEnv(t, func(d *Deps) { d.Environments = svc; d.Pools = svc })

	var rts struct{ Runtimes []map[string]any }
	r := e.call("GET", "/api/v1/runtimes", "")
	expect(t, r, http.StatusOK, "")
	r.decode(t, &rts)
	modesOf := map[any]any{}
	for _, rt := range rts.Runtimes {
		modesOf[rt["runtime"]] = rt["hibernate"]
	}
	if modesOf["sleepy"] != "memory" || modesOf["plain"] != "none" {
		t.Fatalf("runtimes' hibernate: %v", modesOf)
	}

	r = e.call("POST", "/api/v1/environments", `{"runtime":"plain","name":"p1","idle_after":"10m"}`)
	expect(t, r, http.StatusBadRequest, "invalid_request")
	var refusal struct{ Error string }
	r.decode(t, &refusal)
	if !contains(refusal.Error, "cannot hibernate") {
		t.Errorf("refusal %q", refusal.Error)
	}
	r = e.call("POST", "/api/v1/environments", `{"runtime":"plain","name":"p2","delete_after":"2h"}`)
	expect(t, r, http.StatusAccepted, "")
	var got map[string]any
	r.decode(t, &got)
	if got["delete_after"] != "2h0m0s" || got["idle_after"] != nil || got["hibernate"] != "none" {
		t.Errorf("p2: %v", got)
	}
	r = e.call("POST", "/api/v1/environments", `{"runtime":"sleepy","name":"s1","idle_after":"10m","delete_after":"48h"}`)
	expect(t, r, http.StatusAccepted, "")
	r = e.call("GET", "/api/v1/environments/s1", "")
	expect(t, r, http.StatusOK, "")
	got = nil
	r.decode(t, &got)
	if got["idle_after"] != "10m0s" || got["delete_after"] != "48h0m0s" || got["hibernate"] != "memory" {
		t.Errorf("s1: %v", got)
	}

	expect(t, e.call("PUT", "/api/v1/pools/pp", `{"runtime":"plain","size":0,"idle_after":"10m"}`), http.StatusBadRequest, "invalid_request")
	r = e.call("PUT", "/api/v1/pools/sp", `{"runtime":"sleepy","size":0,"idle_after":"45m","delete_after":"24h"}`)
	expect(t, r, http.StatusOK, "")
	r = e.call("GET", "/api/v1/pools/sp", "")
	expect(t, r, http.StatusOK, "")
	got = nil
	r.decode(t, &got)
	if got["idle_after"] != "45m0s" || got["delete_after"] != "24h0m0s" || got["idle"] != 0.0 {
		t.Errorf("pool: %v", got)
	}
}
