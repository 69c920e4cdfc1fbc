package portstest

import (
	"context"
	"reflect"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// RunPoolStoreSuite is the conformance suite of ports.PoolStore; open
// returns a store kept in dir (the same dir again is the store reopened).
func RunPoolStoreSuite(t *testing.T, open func(t *testing.T, dir string) ports.PoolStore) {
	ctx := context.Background()
	t.Run("PoolsAndClaimsOutliveAReopen", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		a := ports.Pool{Name: "b-docker", Runtime: "docker", Size: 2, Spec: ports.PoolSpec{Network: "none", Resources: ports.Resources{MemoryMB: 256}}}
		b := ports.Pool{Name: "a-proxy", Runtime: "docker", Size: 1, Spec: ports.PoolSpec{Network: "proxy", AllowedHosts: []string{"example.com"}}}
		for _, p := range []ports.Pool{a, b} {
			if err := s.PutPool(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutClaim(ctx, "b-docker-x1", "mine"); err != nil {
			t.Fatal(err)
		}
		if err := s.PutClaim(ctx, "b-docker-x2", "yours"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteClaim(ctx, "b-docker-x2"); err != nil {
			t.Fatal(err)
		}
		again := open(t, dir)
		pools, err := again.Pools(ctx)
		if err != nil || !reflect.DeepEqual(pools, []ports.Pool{b, a}) {
			t.Fatalf("pools after reopen (by name): %+v %v", pools, err)
		}
		claims, err := again.Claims(ctx)
		if err != nil || !reflect.DeepEqual(claims, map[string]string{"b-docker-x1": "mine"}) {
			t.Fatalf("claims after reopen: %v %v", claims, err)
		}
	})
	t.Run("PutReplacesAndDeleteForgets", func(t *testing.T) {
		s := open(t, t.TempDir())
		if err := s.PutPool(ctx, ports.Pool{Name: "p", Runtime: "host", Size: 1}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutPool(ctx, ports.Pool{Name: "p", Runtime: "host", Size: 3}); err != nil {
			t.Fatal(err)
		}
		if pools, _ := s.Pools(ctx); len(pools) != 1 || pools[0].Size != 3 {
			t.Fatalf("after a second put: %+v", pools)
		}
		if err := s.DeletePool(ctx, "p"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeletePool(ctx, "never"); err != nil {
			t.Fatalf("deleting an unknown pool: %v", err)
		}
		if err := s.DeleteClaim(ctx, "never"); err != nil {
			t.Fatalf("deleting an unknown claim: %v", err)
		}
		if pools, _ := s.Pools(ctx); len(pools) != 0 {
			t.Fatalf("after delete: %+v", pools)
		}
	})
}
