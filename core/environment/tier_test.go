package environment

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// scheduled are the capabilities of a runtime with a gVisor tier and a
// scheduler (Kubernetes' kind).
var scheduled = ports.RuntimeCapabilities{Runtime: "fake", Isolation: ports.KindContainer, NetworkModes: []ports.NetworkMode{ports.NetworkNone},
	Tiers: []string{ports.TierGVisor}, Placement: true}

var gpuPlacement = ports.Placement{NodeSelector: map[string]string{"pool": "gpu"},
	Tolerations: []ports.Toleration{{Key: "gpu", Operator: "Equal", Value: "yes", Effect: "NoSchedule"}}}

// A tier or a placement is refused, before anything is made or stored, by
// a runtime that does not declare it; for a pool as for an environment.
func TestTierAndPlacementAreRefusedWhereNotDeclared(t *testing.T) {
	f := newPoolFixture(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  Request
		want string
	}{
		{"tier", Request{Runtime: "fake", Name: "t", Tier: ports.TierGVisor}, `isolation "gvisor": the fake runtime offers no tier but its standard one`},
		{"placement", Request{Runtime: "fake", Name: "p", Placement: gpuPlacement}, "placement: the fake runtime has no scheduler"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.svc.Create(ctx, tc.req)
			if !errors.Is(err, ports.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create: %v, want ErrInvalidSpec saying %q", err, tc.want)
			}
			if f.rt.has(tc.req.Name) || has(f.creds, tc.req.Name) {
				t.Fatal("a refused create left an environment or a credential")
			}
			if _, ok := f.svc.Get(tc.req.Name); ok {
				t.Fatal("a refused create is listed")
			}
			p := ports.Pool{Name: "pl", Runtime: "fake", Size: 1, Spec: ports.PoolSpec{Tier: tc.req.Tier, Placement: tc.req.Placement}}
			if _, err := f.svc.PutPool(ctx, p); !errors.Is(err, ports.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("put pool: %v, want ErrInvalidSpec saying %q", err, tc.want)
			}
			if _, ok := f.svc.Pool("pl"); ok {
				t.Fatal("a refused pool is kept")
			}
		})
	}
}

// Where declared, the tier and placement reach the runtime's spec, show on
// the environment, and are shown again by a restarted server (kept in the
// environment's labels). A malformed placement is refused.
func TestTierAndPlacementReachTheSpecWhereDeclared(t *testing.T) {
	f := newPoolFixture(t, func(f *poolFixture) { f.rt.caps = &scheduled })
	ctx := context.Background()
	if _, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "bad", Placement: ports.Placement{
		Tolerations: []ports.Toleration{{Key: "k", Operator: "Exists", Value: "v"}}}}); !errors.Is(err, ports.ErrInvalidSpec) || !strings.Contains(err.Error(), "takes no value") {
		t.Fatalf("a malformed placement: %v", err)
	}
	if _, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "kata", Tier: "kata"}); !errors.Is(err, ports.ErrInvalidSpec) || !strings.Contains(err.Error(), "offers gvisor") {
		t.Fatalf("an unknown tier: %v", err)
	}

	req := Request{Runtime: "fake", Name: "box", Tier: ports.TierGVisor, Placement: ports.Placement{
		NodeSelector: map[string]string{"pool": "gpu"}, Tolerations: append([]ports.Toleration(nil), gpuPlacement.Tolerations...)}}
	e, err := f.svc.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// What the caller keeps is its own: changing it changes nothing here.
	req.Placement.NodeSelector["pool"] = "cpu"
	req.Placement.Tolerations[0].Value = "no"
	if e.Tier != ports.TierGVisor || !e.Placement.Equal(gpuPlacement) {
		t.Fatalf("the environment shows tier %q placement %+v", e.Tier, e.Placement)
	}
	f.rt.mu.Lock()
	spec := f.rt.specs["box"]
	f.rt.mu.Unlock()
	if spec.Tier != ports.TierGVisor || !spec.Placement.Equal(gpuPlacement) {
		t.Fatalf("the runtime got tier %q placement %+v", spec.Tier, spec.Placement)
	}
	if got, _ := f.svc.Get("box"); got.Tier != ports.TierGVisor || !got.Placement.Equal(gpuPlacement) {
		t.Fatalf("get shows tier %q placement %+v", got.Tier, got.Placement)
	}
	// A plain create on the same runtime asks for neither.
	if _, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "plain"}); err != nil {
		t.Fatal(err)
	}
	f.rt.mu.Lock()
	plain := f.rt.specs["plain"]
	f.rt.mu.Unlock()
	if plain.Tier != "" || !plain.Placement.Empty() || plain.Labels[ports.LabelTier] != "" || plain.Labels[ports.LabelPlacement] != "" {
		t.Fatalf("a plain create's spec: tier %q placement %+v labels %v", plain.Tier, plain.Placement, plain.Labels)
	}

	// A new server on the same runtime finds them again.
	again := New(Config{Runtimes: map[string]ports.Runtime{"fake": f.rt}, Agents: f.agents, Credentials: f.creds, Clock: clock.Wall{},
		Bootstrap: ports.AgentBootstrap{Binary: "/bin/agent"}, ReadyTimeout: time.Minute})
	t.Cleanup(again.Close)
	again.Recover(ctx)
	got, ok := again.Get("box")
	if !ok || got.Tier != ports.TierGVisor || !got.Placement.Equal(gpuPlacement) {
		t.Fatalf("after a restart: %v tier %q placement %+v", ok, got.Tier, got.Placement)
	}
	if got, _ := again.Get("plain"); got.Tier != "" || !got.Placement.Empty() {
		t.Fatalf("after a restart the plain one shows tier %q placement %+v", got.Tier, got.Placement)
	}
}

// A pool's members are made with its tier and placement, and a create
// takes one only when it asks for exactly those: another tier, no tier or
// another placement provisions instead.
func TestAPoolTakeMatchesTierAndPlacement(t *testing.T) {
	f := newPoolFixture(t, func(f *poolFixture) { f.rt.caps = &scheduled })
	ctx := context.Background()
	if _, err := f.svc.PutPool(ctx, ports.Pool{Name: "g", Runtime: "fake", Size: 1,
		Spec: ports.PoolSpec{Tier: ports.TierGVisor, Placement: gpuPlacement}}); err != nil {
		t.Fatal(err)
	}
	member := f.waitIdle(t, "g", 1).Members[0].Name
	f.rt.mu.Lock()
	mspec := f.rt.specs[member]
	f.rt.mu.Unlock()
	if mspec.Tier != ports.TierGVisor || !mspec.Placement.Equal(gpuPlacement) {
		t.Fatalf("the member was made with tier %q placement %+v", mspec.Tier, mspec.Placement)
	}
	otherPlacement := ports.Placement{NodeSelector: map[string]string{"pool": "cpu"}, Tolerations: gpuPlacement.Tolerations}
	for _, req := range []Request{
		{Runtime: "fake", Name: "no-tier", Placement: gpuPlacement},
		{Runtime: "fake", Name: "no-placement", Tier: ports.TierGVisor},
		{Runtime: "fake", Name: "other-placement", Tier: ports.TierGVisor, Placement: otherPlacement},
		{Runtime: "fake", Name: "fewer-tolerations", Tier: ports.TierGVisor, Placement: ports.Placement{NodeSelector: gpuPlacement.NodeSelector}},
	} {
		e, err := f.svc.Create(ctx, req)
		if err != nil || e.State != StateBooting || !f.rt.has(req.Name) {
			t.Fatalf("%s: %+v %v: want a provision, not a take", req.Name, e, err)
		}
	}
	if st, _ := f.svc.Pool("g"); st.Hits != 0 || st.Idle != 1 || st.Members[0].Name != member {
		t.Fatalf("creates of other specs touched the pool: %+v", st)
	}
	e, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "mine", Tier: ports.TierGVisor, Placement: ports.Placement{
		NodeSelector: map[string]string{"pool": "gpu"}, Tolerations: []ports.Toleration{{Key: "gpu", Operator: "Equal", Value: "yes", Effect: "NoSchedule"}}}})
	if err != nil || e.State != StateReady || f.rt.has("mine") {
		t.Fatalf("the matching create: %+v %v, provisioned %v: want the member taken", e, err, f.rt.has("mine"))
	}
	if claimOf(f, member) != "mine" || e.Tier != ports.TierGVisor || !e.Placement.Equal(gpuPlacement) {
		t.Fatalf("taken: claim %q, tier %q, placement %+v", claimOf(f, member), e.Tier, e.Placement)
	}
	if st, _ := f.svc.Pool("g"); st.Hits != 1 {
		t.Fatalf("hits %d", st.Hits)
	}
}
