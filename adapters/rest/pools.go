package rest

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Pools is the warm pool part of the environment use case, behind
// /api/v1/pools.
type Pools interface {
	PutPool(ctx context.Context, p ports.Pool) (environment.PoolStatus, error)
	DeletePool(ctx context.Context, name string) error
	Pools() []environment.PoolStatus
	Pool(name string) (environment.PoolStatus, bool)
}

func poolNotFound(name string) *apiError {
	return newError(http.StatusNotFound, "pool_not_found", "pool %q: not found", clip(name))
}

func (s *Server) ListPools(ctx context.Context, _ restapi.ListPoolsRequestObject) (restapi.ListPoolsResponseObject, error) {
	out := restapi.ListPools200JSONResponse{Pools: []restapi.Pool{}}
	// Pools serve every scope: a scoped token sees none (scope.go).
	if s.d.Pools == nil || len(scopeOf(ctx)) > 0 {
		return out, nil
	}
	for _, p := range s.d.Pools.Pools() {
		out.Pools = append(out.Pools, toPool(p))
	}
	return out, nil
}

func (s *Server) GetPool(_ context.Context, req restapi.GetPoolRequestObject) (restapi.GetPoolResponseObject, error) {
	if s.d.Pools == nil {
		return nil, poolNotFound(req.Name)
	}
	p, ok := s.d.Pools.Pool(req.Name)
	if !ok {
		return nil, poolNotFound(req.Name)
	}
	return restapi.GetPool200JSONResponse(toPool(p)), nil
}

func (s *Server) PutPool(ctx context.Context, req restapi.PutPoolRequestObject) (restapi.PutPoolResponseObject, error) {
	if s.d.Pools == nil {
		return nil, noEnvironments()
	}
	b := req.Body
	p := ports.Pool{Name: req.Name, Runtime: b.Runtime, Size: b.Size}
	if b.Spec != nil {
		sp, err := fromSpec(*b.Spec, fmt.Sprintf("pool %q", clip(req.Name)))
		if err != nil {
			return nil, err
		}
		p.Spec = sp
	}
	idle, apiErr := fromIdlePolicy(b.IdleAfter, b.DeleteAfter, fmt.Sprintf("pool %q", clip(req.Name)))
	if apiErr != nil {
		return nil, apiErr
	}
	p.Idle = idle
	st, err := s.d.Pools.PutPool(ctx, p)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, ports.ErrStoreUnavailable) {
			return nil, newError(http.StatusServiceUnavailable, "store_unavailable", "pool %q: %v", clip(req.Name), err)
		}
		return nil, createEnvironmentError(err, fmt.Sprintf("pool %q", clip(req.Name)))
	}
	s.log.InfoContext(ctx, "rest: pool defined", "pool", p.Name, "runtime", p.Runtime, "size", p.Size)
	return restapi.PutPool200JSONResponse(toPool(st)), nil
}

func (s *Server) DeletePool(ctx context.Context, req restapi.DeletePoolRequestObject) (restapi.DeletePoolResponseObject, error) {
	if s.d.Pools == nil {
		return nil, poolNotFound(req.Name)
	}
	if err := s.d.Pools.DeletePool(ctx, req.Name); err != nil {
		if errors.Is(err, environment.ErrPoolNotFound) {
			return nil, poolNotFound(req.Name)
		}
		return nil, newError(http.StatusServiceUnavailable, "store_unavailable", "pool %q: %v", clip(req.Name), err)
	}
	s.log.InfoContext(ctx, "rest: pool deleted", "pool", req.Name)
	return restapi.DeletePool204Response{}, nil
}

func toPool(p environment.PoolStatus) restapi.Pool {
	out := restapi.Pool{Name: p.Name, Runtime: p.Runtime, Size: p.Size, Idle: p.Idle, Warming: p.Warming,
		Hits: int64(p.Hits), Misses: int64(p.Misses), Members: []restapi.PoolMember{}} //nolint:gosec // counts of creates
	sp := p.Spec
	setStr(&out.Spec.Image, sp.Image)
	setStr(&out.Spec.Profile, sp.Profile)
	setStr(&out.Spec.Network, string(sp.Network))
	if len(sp.AllowedHosts) > 0 {
		out.Spec.AllowedHosts = ptr(sp.AllowedHosts)
	}
	if sp.ReadOnlyRoot {
		out.Spec.ReadOnlyRoot = ptr(true)
	}
	setStr(&out.Spec.Isolation, sp.Tier)
	out.Spec.Placement = toPlacement(sp.Placement)
	out.Spec.Resources = toResources(sp.Resources)
	// p.Idle is the count of idle members; p.Pool.Idle the definition's policy.
	out.IdleAfter, out.DeleteAfter = toIdlePolicy(p.Pool.Idle)
	for _, m := range p.Members {
		out.Members = append(out.Members, restapi.PoolMember{Name: m.Name, State: string(m.State)})
	}
	return out
}
