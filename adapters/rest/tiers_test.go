package rest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// specRuntime is a runtime in memory that keeps the spec of each
// environment it made, with the capabilities it is given.
type specRuntime struct {
	caps  ports.RuntimeCapabilities
	mu    sync.Mutex
	specs map[string]ports.EnvironmentSpec
}

func (r *specRuntime) Capabilities() ports.RuntimeCapabilities { return r.caps }
func (r *specRuntime) Ping(context.Context) error              { return nil }
func (r *specRuntime) Provision(_ context.Context, spec ports.EnvironmentSpec) (ports.Environment, error) {
	if err := r.caps.CheckSpec(spec); err != nil {
		return ports.Environment{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.specs[spec.Name] = spec
	return ports.Environment{Name: spec.Name, Runtime: r.caps.Runtime, RuntimeID: "id-" + spec.Name, State: ports.EnvRunning, Labels: spec.Labels}, nil
}
func (r *specRuntime) spec(name string) (ports.EnvironmentSpec, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.specs[name]
	return s, ok
}
func (r *specRuntime) Start(context.Context, string) error { return nil }
func (r *specRuntime) Stop(context.Context, string) error  { return nil }
func (r *specRuntime) Hibernate(context.Context, string) (ports.Hibernation, error) {
	return ports.Hibernation{}, ports.ErrUnsupported
}
func (r *specRuntime) Wake(context.Context, string) error   { return ports.ErrUnsupported }
func (r *specRuntime) Pause(context.Context, string) error  { return ports.ErrUnsupported }
func (r *specRuntime) Resume(context.Context, string) error { return ports.ErrUnsupported }
func (r *specRuntime) Destroy(_ context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.specs, name)
	return nil
}
func (r *specRuntime) Inspect(_ context.Context, name string) (ports.Environment, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.specs[name]
	if !ok {
		return ports.Environment{}, ports.ErrEnvNotFound
	}
	return ports.Environment{Name: name, Runtime: r.caps.Runtime, State: ports.EnvRunning, Labels: s.Labels}, nil
}
func (r *specRuntime) List(context.Context) ([]ports.Environment, error)    { return nil, nil }
func (r *specRuntime) Recover(context.Context) ([]ports.Environment, error) { return nil, nil }

// tierEnv is a REST server on the real environments use case with two
// runtimes: "kube" with a gVisor tier and a scheduler, "plain" with
// neither.
func tierEnv(t *testing.T) (*env, *specRuntime) {
	t.Helper()
	modes := []ports.NetworkMode{ports.NetworkNone}
	kube := &specRuntime{caps: ports.RuntimeCapabilities{Runtime: "kube", Isolation: ports.KindContainer, NetworkModes: modes,
		Tiers: []string{ports.TierGVisor}, Placement: true, Images: true}, specs: map[string]ports.EnvironmentSpec{}}
	plain := &specRuntime{caps: ports.RuntimeCapabilities{Runtime: "plain", Isolation: ports.KindContainer, NetworkModes: modes},
		specs: map[string]ports.EnvironmentSpec{}}
	svc := environment.New(environment.Config{Runtimes: map[string]ports.Runtime{"kube": kube, "plain": plain},
		Agents: portsfake.NewDirectory(), Credentials: portsfake.NewCredentials(), Clock: clock.Wall{},
		Bootstrap: ports.AgentBootstrap{Binary: "/bin/agent"}, ReadyTimeout: time.Minute, Pools: portsfake.NewPoolStore()})
	t.Cleanup(svc.Close)
	svc.Recover(context.Background())
	return newEnv(t, func(d *Deps) { d.Environments = svc; d.Pools = svc }), kube
}

const placementJSON = `{"node_selector":{"pool":"gpu","kubernetes.io/arch":"amd64"},` +
	`"tolerations":[{"key":"gpu","operator":"Equal","value":"yes","effect":"NoSchedule"},{"operator":"Exists"}]}`

var wantPlacement = ports.Placement{NodeSelector: map[string]string{"pool": "gpu", "kubernetes.io/arch": "amd64"},
	Tolerations: []ports.Toleration{{Key: "gpu", Operator: "Equal", Value: "yes", Effect: "NoSchedule"}, {Operator: "Exists"}}}

// Isolation and placement through the API: the runtimes say which tiers
// they offer and whether they place; a create and a pool carry both to the
// runtime's spec and show them back; a runtime without them refuses with
// 400 invalid_request naming what it offers. Every answer is checked
// against openapi.yaml.
func TestIsolationAndPlacementKeepTheContract(t *testing.T) {
	e, kube := tierEnv(t)

	r := e.call("GET", "/api/v1/runtimes", "")
	expect(t, r, http.StatusOK, "")
	var list restapi.RuntimeList
	r.decode(t, &list)
	got := map[string]restapi.Runtime{}
	for _, rt := range list.Runtimes {
		got[rt.Runtime] = rt
	}
	if k := got["kube"]; len(k.Tiers) != 1 || k.Tiers[0] != "gvisor" || !k.Placement {
		t.Fatalf("kube lists tiers %v placement %v", k.Tiers, k.Placement)
	}
	if p := got["plain"]; p.Tiers == nil || len(p.Tiers) != 0 || p.Placement {
		t.Fatalf("plain lists tiers %#v placement %v", p.Tiers, p.Placement)
	}
	if !strings.Contains(string(r.body), `"tiers":[]`) {
		t.Fatalf("a runtime without tiers lists none as []: %s", r.body)
	}

	r = e.call("POST", "/api/v1/environments", `{"runtime":"kube","name":"box","isolation":"gvisor","placement":`+placementJSON+`}`)
	expect(t, r, http.StatusAccepted, "")
	var created restapi.Environment
	r.decode(t, &created)
	checkShown := func(what string, env restapi.Environment) {
		t.Helper()
		if deref(env.Isolation) != "gvisor" || env.Placement == nil {
			t.Fatalf("%s shows isolation %v placement %v", what, env.Isolation, env.Placement)
		}
		if p := fromPlacement(env.Placement); !p.Equal(wantPlacement) {
			t.Fatalf("%s shows placement %+v", what, p)
		}
	}
	checkShown("the create's answer", created)
	spec, ok := kube.spec("box")
	if !ok || spec.Tier != ports.TierGVisor || !spec.Placement.Equal(wantPlacement) {
		t.Fatalf("the runtime got tier %q placement %+v (%v)", spec.Tier, spec.Placement, ok)
	}
	r = e.call("GET", "/api/v1/environments/box", "")
	expect(t, r, http.StatusOK, "")
	var fetched restapi.Environment
	r.decode(t, &fetched)
	checkShown("get", fetched)

	// A plain environment shows neither.
	r = e.call("POST", "/api/v1/environments", `{"runtime":"kube","name":"bare","isolation":"","placement":{}}`)
	expect(t, r, http.StatusAccepted, "")
	if strings.Contains(string(r.body), `"isolation"`) || strings.Contains(string(r.body), `"placement"`) {
		t.Fatalf("a plain environment shows isolation or placement: %s", r.body)
	}
	if s, _ := kube.spec("bare"); s.Tier != "" || !s.Placement.Empty() {
		t.Fatalf("a plain create's spec: %+v", s)
	}

	// Refusals: what the runtime does not offer names what it does; what
	// the schema forbids never reaches a handler; what only the server
	// can see is its own 400.
	for _, tc := range []struct {
		name, body, want string
	}{
		{"tier on plain", `{"runtime":"plain","name":"x","isolation":"gvisor"}`, `isolation "gvisor": the plain runtime offers no tier but its standard one`},
		{"unknown tier", `{"runtime":"kube","name":"x","isolation":"kata"}`, `isolation "kata": the kube runtime offers gvisor`},
		{"placement on plain", `{"runtime":"plain","name":"x","placement":{"node_selector":{"a":"b"}}}`, "placement: the plain runtime has no scheduler"},
		{"selector key", `{"runtime":"kube","name":"x","placement":{"node_selector":{"a b":"c"}}}`, `node selector key "a b" is not a label key`},
		{"equal without key", `{"runtime":"kube","name":"x","placement":{"tolerations":[{"value":"v"}]}}`, "operator Equal needs a key"},
		{"exists with value", `{"runtime":"kube","name":"x","placement":{"tolerations":[{"key":"k","operator":"Exists","value":"v"}]}}`, "takes no value"},
		{"selector value", `{"runtime":"kube","name":"x","placement":{"node_selector":{"a":"b/c"}}}`, "node_selector"},
		{"operator", `{"runtime":"kube","name":"x","placement":{"tolerations":[{"key":"k","operator":"In"}]}}`, "operator"},
		{"effect", `{"runtime":"kube","name":"x","placement":{"tolerations":[{"key":"k","effect":"Evict"}]}}`, "effect"},
		{"unknown member", `{"runtime":"kube","name":"x","placement":{"affinity":{}}}`, "affinity"},
		{"too many labels", `{"runtime":"kube","name":"x","placement":{"node_selector":{` + manyLabels(33) + `}}}`, "node_selector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.call("POST", "/api/v1/environments", tc.body)
			expect(t, r, http.StatusBadRequest, "invalid_request")
			var apiErr restapi.Error
			r.decode(t, &apiErr)
			if !strings.Contains(apiErr.Error, tc.want) {
				t.Fatalf("error %q, want it to say %q", apiErr.Error, tc.want)
			}
			if _, made := kube.spec("x"); made {
				t.Fatal("a refused create reached the runtime")
			}
		})
	}

	// A pool carries both and shows them; on plain it is refused.
	r = e.call("PUT", "/api/v1/pools/g", `{"runtime":"kube","size":1,"spec":{"isolation":"gvisor","placement":`+placementJSON+`}}`)
	expect(t, r, http.StatusOK, "")
	var pool restapi.Pool
	r.decode(t, &pool)
	if deref(pool.Spec.Isolation) != "gvisor" || !fromPlacement(pool.Spec.Placement).Equal(wantPlacement) {
		t.Fatalf("the pool shows isolation %v placement %+v", pool.Spec.Isolation, pool.Spec.Placement)
	}
	r = e.call("PUT", "/api/v1/pools/p", `{"runtime":"plain","size":1,"spec":{"isolation":"gvisor"}}`)
	expect(t, r, http.StatusBadRequest, "invalid_request")
	if !strings.Contains(string(r.body), "offers no tier") {
		t.Fatalf("a pool of a tier plain lacks: %s", r.body)
	}
	r = e.call("PUT", "/api/v1/pools/p", `{"runtime":"plain","size":1,"spec":{"placement":{"tolerations":[{"operator":"Exists"}]}}}`)
	expect(t, r, http.StatusBadRequest, "invalid_request")
	if !strings.Contains(string(r.body), "no scheduler") {
		t.Fatalf("a pool with a placement on plain: %s", r.body)
	}
}

// manyLabels is n distinct node selector members, as JSON.
func manyLabels(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"l%d":"v"`, i)
	}
	return b.String()
}
