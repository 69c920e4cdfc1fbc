package filestore

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A pool's tier and placement outlive a restart (the file is read again),
// and a pool without them is stored as before, without empty members.
func TestPoolTierAndPlacementAreKept(t *testing.T) {
	dir := t.TempDir()
	s, err := NewPoolStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	placement := ports.Placement{NodeSelector: map[string]string{"pool": "gpu"},
		Tolerations: []ports.Toleration{{Key: "gpu", Operator: "Equal", Value: "yes", Effect: "NoSchedule"}, {Operator: "Exists"}}}
	for _, p := range []ports.Pool{
		{Name: "g", Runtime: "kubernetes", Size: 1, Spec: ports.PoolSpec{Tier: ports.TierGVisor, Placement: placement}},
		{Name: "plain", Runtime: "docker", Size: 2},
	} {
		if err := s.PutPool(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	again, err := NewPoolStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	pools, err := again.Pools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]ports.Pool{}
	for _, p := range pools {
		byName[p.Name] = p
	}
	if g := byName["g"]; g.Spec.Tier != ports.TierGVisor || !g.Spec.Placement.Equal(placement) {
		t.Fatalf("after a reopen: %+v", g.Spec)
	}
	plain := byName["plain"]
	if plain.Spec.Tier != "" || !plain.Spec.Placement.Empty() {
		t.Fatalf("a plain pool after a reopen: %+v", plain.Spec)
	}
	b, _ := json.Marshal(plain.Spec)
	if got := string(b); strings.Contains(got, "isolation") || strings.Contains(got, "placement") {
		t.Fatalf("a plain pool's spec is stored as %s, with empty members", got)
	}
}
