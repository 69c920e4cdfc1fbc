package rest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/access"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Environments is the environment use case behind /api/v1/environments.
type Environments interface {
	Runtimes() []ports.RuntimeCapabilities
	// OfferedNetworks are the network modes a create may name for a runtime
	// on this server (AGENTIC_ALLOWED_NETWORKS applied).
	OfferedNetworks(c ports.RuntimeCapabilities) []ports.NetworkMode
	Create(ctx context.Context, req environment.Request) (environment.Environment, error)
	List(ctx context.Context) []environment.Environment
	Inspect(ctx context.Context, name string) (environment.Environment, bool)
	// Get is an environment as last known, without asking its runtime
	// (for the label scope of each request).
	Get(name string) (environment.Environment, bool)
	Start(ctx context.Context, name string) (environment.Environment, error)
	Stop(ctx context.Context, name string) (environment.Environment, error)
	Pause(ctx context.Context, name string) (environment.Environment, error)
	Resume(ctx context.Context, name string) (environment.Environment, error)
	// Hibernate saves a running environment to disk (answers once saved);
	// Wake runs a hibernated one again (answers once its agent is back).
	Hibernate(ctx context.Context, name string) (environment.Environment, error)
	Wake(ctx context.Context, name string) (environment.Environment, error)
	Delete(ctx context.Context, name string) error
	// InjectedUsage is what the environment's workloads used through
	// injected secrets; false when they made no request through one.
	InjectedUsage(name string) (inject.Usage, bool)
}

func environmentNotFound(subject string) *apiError {
	return newError(http.StatusNotFound, "environment_not_found", "%s: not found", subject)
}

// environmentError maps the errors of an operation on an environment.
func environmentError(err error, subject string) *apiError {
	switch {
	case errors.Is(err, ports.ErrEnvNotFound):
		return environmentNotFound(subject)
	case errors.Is(err, ports.ErrUnsupported):
		return newError(http.StatusConflict, "not_supported", "%s: %v (GET /api/v1/runtimes shows what each runtime can do)", subject, err)
	case errors.Is(err, environment.ErrWrongState):
		return newError(http.StatusConflict, "invalid_state", "%s: %v", subject, err)
	case errors.Is(err, environment.ErrHibernateLimit):
		return newError(http.StatusInsufficientStorage, "hibernate_limit", "%s: %v", subject, err)
	case errors.Is(err, ports.ErrRuntimeUnavailable):
		return newError(http.StatusServiceUnavailable, "runtime_unavailable", "%s: %v", subject, err)
	default:
		return newError(http.StatusBadGateway, "runtime_error", "%s: %v", subject, err)
	}
}

// createEnvironmentError maps the errors of a create request.
func createEnvironmentError(err error, subject string) *apiError {
	switch {
	case errors.Is(err, ports.ErrInvalidSpec):
		return badRequest("%s: %v", subject, err)
	case errors.Is(err, environment.ErrUnknownRuntime):
		return newError(http.StatusBadRequest, "unknown_runtime", "%s: %v", subject, err)
	case errors.Is(err, environment.ErrSecretUnresolved):
		return newError(http.StatusBadRequest, "secret_unresolved", "%s: %v", subject, err)
	case errors.Is(err, ports.ErrEnvExists):
		return newError(http.StatusConflict, "environment_exists", "%s: %v", subject, err)
	case errors.Is(err, ports.ErrRuntimeUnavailable):
		return newError(http.StatusServiceUnavailable, "runtime_unavailable", "%s: %v", subject, err)
	default:
		return newError(http.StatusBadGateway, "runtime_error", "%s: %v", subject, err)
	}
}

func noEnvironments() *apiError {
	return newError(http.StatusServiceUnavailable, "runtime_unavailable", "this server provisions no environments")
}

func (s *Server) ListRuntimes(_ context.Context, _ restapi.ListRuntimesRequestObject) (restapi.ListRuntimesResponseObject, error) {
	out := restapi.ListRuntimes200JSONResponse{Runtimes: []restapi.Runtime{}}
	if s.d.Environments == nil {
		return out, nil
	}
	for _, c := range s.d.Environments.Runtimes() {
		out.Runtimes = append(out.Runtimes, restapi.Runtime{
			Runtime: c.Runtime, Isolation: restapi.RuntimeIsolation(c.Isolation), NetworkModes: networkNames(c.NetworkModes),
			AllowedNetworkModes: networkNames(s.d.Environments.OfferedNetworks(c)),
			Limits:              limitNames(c.Limits), Pause: c.Pause, Hibernate: restapi.HibernateMode(c.Hibernate.Of()), ReadOnlyRoot: c.ReadOnlyRoot,
			Images: c.Images, Profiles: nonNil(c.Profiles), Tiers: nonNil(c.Tiers), Placement: c.Placement,
		})
	}
	if u, ok := s.d.Environments.(unavailableRuntimes); ok {
		var list []restapi.UnavailableRuntime
		missing := u.UnavailableRuntimes()
		for _, name := range slices.Sorted(maps.Keys(missing)) {
			list = append(list, restapi.UnavailableRuntime{Runtime: name, Reason: missing[name]})
		}
		if len(list) > 0 {
			out.Unavailable = &list
		}
	}
	return out, nil
}

// unavailableRuntimes is what the environment use case may also say: the
// runtimes it knows but does not offer, each with why and how to get it.
type unavailableRuntimes interface {
	UnavailableRuntimes() map[string]string
}

func limitNames(ls []ports.Limit) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = string(l)
	}
	return out
}

func networkNames(ms []ports.NetworkMode) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m)
	}
	return out
}

// networkMode is a request's network: absent or empty is the runtime's
// default; an unknown word is refused (ErrInvalidSpec) before any runtime
// is asked.
func networkMode(p *string) (ports.NetworkMode, error) {
	if p == nil || *p == "" {
		return "", nil
	}
	return ports.ParseNetworkMode(*p)
}

func nonNil(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}

func (s *Server) ListEnvironments(ctx context.Context, req restapi.ListEnvironmentsRequestObject) (restapi.ListEnvironmentsResponseObject, error) {
	out := restapi.ListEnvironments200JSONResponse{Environments: []restapi.Environment{}}
	if s.d.Environments == nil {
		return out, nil
	}
	all := inScope(ctx, s.d.Environments.List(ctx), func(e environment.Environment) bool {
		return access.InScope(scopeOf(ctx), e.Labels)
	})
	envs, next, apiErr := page(all, func(e environment.Environment) string { return e.Name }, req.Params.Limit, req.Params.Cursor)
	if apiErr != nil {
		return nil, apiErr
	}
	for _, e := range envs {
		out.Environments = append(out.Environments, s.toEnvironment(e))
	}
	out.NextCursor = next
	return out, nil
}

func (s *Server) CreateEnvironment(ctx context.Context, req restapi.CreateEnvironmentRequestObject) (restapi.CreateEnvironmentResponseObject, error) {
	if s.d.Environments == nil {
		return nil, noEnvironments()
	}
	b := req.Body
	subject := fmt.Sprintf("environment %q", clip(b.Name))
	sp, err := fromSpec(restapi.PoolSpec{AllowedHosts: b.AllowedHosts, Image: b.Image, Network: b.Network,
		Profile: b.Profile, ReadOnlyRoot: b.ReadOnlyRoot, Resources: b.Resources, Isolation: b.Isolation, Placement: b.Placement}, subject)
	if err != nil {
		return nil, err
	}
	labels := deref(b.Labels)
	if err := environment.CheckLabels(labels); err != nil {
		return nil, createEnvironmentError(err, subject)
	}
	// A scoped token's labels go on top: it cannot create outside its scope.
	labels = access.WithScope(scopeOf(ctx), labels)
	secrets, apiErr := fromSecrets(b.Secrets, subject)
	if apiErr != nil {
		return nil, apiErr
	}
	idle, apiErr := fromIdlePolicy(b.IdleAfter, b.DeleteAfter, subject)
	if apiErr != nil {
		return nil, apiErr
	}
	r := environment.Request{Runtime: b.Runtime, Name: b.Name, Image: sp.Image, Profile: sp.Profile, Resources: sp.Resources,
		Network: sp.Network, ReadOnlyRoot: sp.ReadOnlyRoot, AllowedHosts: sp.AllowedHosts, Tier: sp.Tier, Placement: sp.Placement,
		Labels: labels, Secrets: secrets, Idle: idle}
	env, err := s.d.Environments.Create(ctx, r)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, createEnvironmentError(err, subject)
	}
	s.log.InfoContext(ctx, "rest: environment requested", "name", env.Name, "runtime", env.Runtime)
	return restapi.CreateEnvironment202JSONResponse(s.toEnvironment(env)), nil
}

func (s *Server) GetEnvironment(ctx context.Context, req restapi.GetEnvironmentRequestObject) (restapi.GetEnvironmentResponseObject, error) {
	subject := fmt.Sprintf("environment %q", clip(req.Name))
	if s.d.Environments == nil {
		return nil, environmentNotFound(subject)
	}
	e, ok := s.d.Environments.Inspect(ctx, req.Name)
	if !ok {
		return nil, environmentNotFound(subject)
	}
	return restapi.GetEnvironment200JSONResponse(s.toEnvironment(e)), nil
}

// envOp is one operation of the use case on a named environment, as a
// method expression (Environments.Start).
type envOp func(Environments, context.Context, string) (environment.Environment, error)

// onEnvironment runs op on the environment name names and answers what it
// returns, or its error as the API says it.
func (s *Server) onEnvironment(ctx context.Context, name string, op envOp) (restapi.Environment, error) {
	subject := fmt.Sprintf("environment %q", clip(name))
	if s.d.Environments == nil {
		return restapi.Environment{}, environmentNotFound(subject)
	}
	e, err := op(s.d.Environments, ctx, name)
	if err != nil {
		if ctx.Err() != nil {
			return restapi.Environment{}, ctx.Err()
		}
		return restapi.Environment{}, environmentError(err, subject)
	}
	return s.toEnvironment(e), nil
}

func (s *Server) DeleteEnvironment(ctx context.Context, req restapi.DeleteEnvironmentRequestObject) (restapi.DeleteEnvironmentResponseObject, error) {
	del := func(envs Environments, ctx context.Context, name string) (environment.Environment, error) {
		return environment.Environment{}, envs.Delete(ctx, name)
	}
	if _, err := s.onEnvironment(ctx, req.Name, del); err != nil {
		return nil, err
	}
	s.forgetPublicPorts(req.Name)
	s.log.InfoContext(ctx, "rest: environment deleted", "name", req.Name)
	return restapi.DeleteEnvironment204Response{}, nil
}

func (s *Server) StartEnvironment(ctx context.Context, req restapi.StartEnvironmentRequestObject) (restapi.StartEnvironmentResponseObject, error) {
	e, err := s.onEnvironment(ctx, req.Name, Environments.Start)
	if err != nil {
		return nil, err
	}
	return restapi.StartEnvironment200JSONResponse(e), nil
}

func (s *Server) PauseEnvironment(ctx context.Context, req restapi.PauseEnvironmentRequestObject) (restapi.PauseEnvironmentResponseObject, error) {
	e, err := s.onEnvironment(ctx, req.Name, Environments.Pause)
	if err != nil {
		return nil, err
	}
	return restapi.PauseEnvironment200JSONResponse(e), nil
}

func (s *Server) ResumeEnvironment(ctx context.Context, req restapi.ResumeEnvironmentRequestObject) (restapi.ResumeEnvironmentResponseObject, error) {
	e, err := s.onEnvironment(ctx, req.Name, Environments.Resume)
	if err != nil {
		return nil, err
	}
	return restapi.ResumeEnvironment200JSONResponse(e), nil
}

// HibernateEnvironment answers once the environment is saved (the use case
// bounds the save by its wake timeout, and finishes it if the caller leaves).
func (s *Server) HibernateEnvironment(ctx context.Context, req restapi.HibernateEnvironmentRequestObject) (restapi.HibernateEnvironmentResponseObject, error) {
	e, err := s.onEnvironment(ctx, req.Name, Environments.Hibernate)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "rest: environment hibernated", "name", req.Name)
	return restapi.HibernateEnvironment200JSONResponse(e), nil
}

// WakeEnvironment answers once the environment's agent is back (bounded by
// the use case's wake timeout).
func (s *Server) WakeEnvironment(ctx context.Context, req restapi.WakeEnvironmentRequestObject) (restapi.WakeEnvironmentResponseObject, error) {
	e, err := s.onEnvironment(ctx, req.Name, Environments.Wake)
	if err != nil {
		return nil, err
	}
	return restapi.WakeEnvironment200JSONResponse(e), nil
}

func (s *Server) StopEnvironment(ctx context.Context, req restapi.StopEnvironmentRequestObject) (restapi.StopEnvironmentResponseObject, error) {
	e, err := s.onEnvironment(ctx, req.Name, Environments.Stop)
	if err != nil {
		return nil, err
	}
	return restapi.StopEnvironment200JSONResponse(e), nil
}

// toEnvironment is e as the API answers it, with its workloads' usage of
// injected secrets.
func (s *Server) toEnvironment(e environment.Environment) restapi.Environment {
	out := toEnvironment(e)
	if u, ok := s.d.Environments.InjectedUsage(e.Name); ok {
		out.Usage = toInjectedUsage(u)
	}
	return out
}

// toInjectedUsage is u as Task.usage and Environment.usage show it.
func toInjectedUsage(u inject.Usage) *restapi.InjectedUsage {
	return &restapi.InjectedUsage{Requests: u.Requests, BytesSent: u.BytesSent, BytesReceived: u.BytesReceived, CostUsd: u.CostUSD,
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens, CacheReadInputTokens: u.CacheReadInputTokens}
}

func toEnvironment(e environment.Environment) restapi.Environment {
	out := restapi.Environment{
		Name: e.Name, Runtime: e.Runtime, State: restapi.EnvironmentState(e.State), AgentId: e.AgentID,
		CreatedAt: e.CreatedAt, Events: make([]restapi.EnvironmentEvent, 0, len(e.Events)),
	}
	if !out.State.Valid() {
		out.State = restapi.EnvFailed
	}
	for _, ev := range e.Events {
		item := restapi.EnvironmentEvent{At: ev.At, Step: ev.Step}
		if ev.Message != "" {
			item.Message = ptr(ev.Message)
		}
		out.Events = append(out.Events, item)
	}
	setStr(&out.RuntimeId, e.RuntimeID)
	setStr(&out.Image, e.Image)
	setStr(&out.Network, string(e.Network))
	setStr(&out.Isolation, e.Tier)
	out.Placement = toPlacement(e.Placement)
	if len(e.AllowedHosts) > 0 {
		out.AllowedHosts = &e.AllowedHosts
	}
	if len(e.Egress) > 0 {
		list := make([]restapi.EgressEntry, 0, len(e.Egress))
		for _, g := range e.Egress {
			list = append(list, restapi.EgressEntry{At: g.At.UTC(), Host: g.Host, Port: g.Port, Allowed: g.Allowed, Reason: nonEmpty(g.Reason),
				BytesUp: g.BytesUp, BytesDown: g.BytesDown, DurationMs: g.Duration.Milliseconds()})
		}
		out.Egress = &list
	}
	setStr(&out.AgentStatus, string(e.AgentStatus))
	setStr(&out.Error, e.Error)
	if !e.ReadyAt.IsZero() {
		out.ReadyAt = ptr(e.ReadyAt)
		out.ProvisionMs = ptr(e.ProvisionTime.Milliseconds())
	}
	out.Resources = toResources(e.Resources)
	if len(e.Labels) > 0 {
		out.Labels = ptr(maps.Clone(e.Labels))
	}
	if len(e.Secrets) > 0 {
		list := make([]restapi.EnvironmentSecretInfo, len(e.Secrets))
		for i, sec := range e.Secrets {
			list[i] = restapi.EnvironmentSecretInfo{Name: sec.Name, Host: sec.Spec.Address()}
		}
		out.Secrets = &list
	}
	if e.Hibernate != "" {
		out.Hibernate = ptr(restapi.HibernateMode(e.Hibernate.Of()))
	}
	if !e.HibernatedAt.IsZero() {
		out.HibernatedAt = ptr(e.HibernatedAt.UTC())
	}
	if e.SavedBytes > 0 {
		out.SavedBytes = ptr(e.SavedBytes)
	}
	setStr(&out.SleepReason, e.SleepReason)
	if !e.LastActivity.IsZero() {
		out.LastActivityAt = ptr(e.LastActivity.UTC())
	}
	setStr(&out.LastActivityKind, e.LastActivityKind)
	out.IdleAfter, out.DeleteAfter = toIdlePolicy(e.Idle)
	return out
}

// fromIdlePolicy reads a request's idle_after and delete_after (Go
// durations; absent, empty or "0" is off). A malformed or negative one is
// refused here, before the use case is asked.
func fromIdlePolicy(idleAfter, deleteAfter *string, subject string) (ports.IdlePolicy, *apiError) {
	var p ports.IdlePolicy
	for _, f := range []struct {
		name string
		v    *string
		dst  *time.Duration
	}{{"idle_after", idleAfter, &p.IdleAfter}, {"delete_after", deleteAfter, &p.DeleteAfter}} {
		if f.v == nil || *f.v == "" {
			continue
		}
		d, err := time.ParseDuration(*f.v)
		if err != nil {
			return p, badRequest("%s: field %s: %q is not a duration: a number and a unit (ns, us, ms, s, m, h), e.g. \"30m\" or \"1h30m\"", subject, f.name, clip(*f.v))
		}
		if d < 0 {
			return p, badRequest("%s: field %s: %q must not be negative (\"0\" or absent is off)", subject, f.name, clip(*f.v))
		}
		*f.dst = d
	}
	return p, nil
}

// toIdlePolicy is p as the API shows it: Go durations, nil when off.
func toIdlePolicy(p ports.IdlePolicy) (idleAfter, deleteAfter *string) {
	if p.IdleAfter > 0 {
		idleAfter = ptr(p.IdleAfter.String())
	}
	if p.DeleteAfter > 0 {
		deleteAfter = ptr(p.DeleteAfter.String())
	}
	return idleAfter, deleteAfter
}

// fromSecrets reads a create request's injected secrets; one without
// inject is refused (an environment takes no plain secrets).
func fromSecrets(in *[]restapi.EnvironmentSecret, subject string) ([]environment.SecretRequest, *apiError) {
	if in == nil {
		return nil, nil
	}
	out := make([]environment.SecretRequest, len(*in))
	for i, sec := range *in {
		if sec.Inject == nil {
			return nil, badRequest("%s: secrets[%d] (%s) has no inject: an environment takes injected secrets only (its value never enters the environment); a plain secret belongs in a task manifest", subject, i, clip(sec.Name))
		}
		out[i] = environment.SecretRequest{Name: sec.Name, Source: string(sec.Source), Key: deref(sec.Key),
			Host: sec.Inject.Host, Header: sec.Inject.Header, Format: deref(sec.Inject.Format), BaseURLEnv: deref(sec.Inject.BaseUrlEnv)}
	}
	return out, nil
}

// fromSpec reads what an environment is made of, from a create request or
// a pool's spec alike; subject names it in a refusal.
func fromSpec(sp restapi.PoolSpec, subject string) (ports.PoolSpec, error) {
	network, err := networkMode(sp.Network)
	if err != nil {
		return ports.PoolSpec{}, createEnvironmentError(err, subject)
	}
	res, apiErr := fromResources(sp.Resources)
	if apiErr != nil {
		return ports.PoolSpec{}, apiErr
	}
	return ports.PoolSpec{Image: deref(sp.Image), Profile: deref(sp.Profile), Resources: res, Network: network,
		AllowedHosts: deref(sp.AllowedHosts), ReadOnlyRoot: deref(sp.ReadOnlyRoot), Tier: deref(sp.Isolation),
		Placement: fromPlacement(sp.Placement)}, nil
}

// fromPlacement reads a request's placement; what a scheduler would refuse
// is for the runtime's capabilities to say (ports.RuntimeCapabilities.CheckSpec).
func fromPlacement(p *restapi.Placement) ports.Placement {
	if p == nil {
		return ports.Placement{}
	}
	out := ports.Placement{NodeSelector: deref(p.NodeSelector)}
	for _, t := range deref(p.Tolerations) {
		out.Tolerations = append(out.Tolerations, ports.Toleration{Key: deref(t.Key), Operator: string(deref(t.Operator)),
			Value: deref(t.Value), Effect: string(deref(t.Effect))})
	}
	return out
}

// toPlacement is p as the API shows it: nil when it asks for nothing.
func toPlacement(p ports.Placement) *restapi.Placement {
	if p.Empty() {
		return nil
	}
	out := &restapi.Placement{}
	if len(p.NodeSelector) > 0 {
		out.NodeSelector = ptr(maps.Clone(p.NodeSelector))
	}
	if len(p.Tolerations) > 0 {
		list := make([]restapi.Toleration, 0, len(p.Tolerations))
		for _, t := range p.Tolerations {
			item := restapi.Toleration{}
			setStr(&item.Key, t.Key)
			setStr(&item.Value, t.Value)
			if t.Operator != "" {
				item.Operator = ptr(restapi.TolerationOperator(t.Operator))
			}
			if t.Effect != "" {
				item.Effect = ptr(restapi.TolerationEffect(t.Effect))
			}
			list = append(list, item)
		}
		out.Tolerations = &list
	}
	return out
}

// fromResources reads a request's resources; negative numbers are refused.
func fromResources(res *restapi.Resources) (ports.Resources, *apiError) {
	var r ports.Resources
	if res == nil {
		return r, nil
	}
	if res.Cpus != nil {
		r.CPUs = float64(*res.Cpus)
	}
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
	}{{"memory_mb", res.MemoryMb, &r.MemoryMB}, {"pids", res.Pids, &r.PIDs}, {"disk_gb", res.DiskGb, &r.DiskGB}} {
		if f.v == nil {
			continue
		}
		if *f.v < 0 {
			return r, badRequest("field resources.%s: must not be negative", f.name)
		}
		*f.dst = *f.v
	}
	if r.CPUs < 0 {
		return r, badRequest("field resources.cpus: must not be negative")
	}
	return r, nil
}

// toResources is r as the API shows it: nil when all are defaults.
func toResources(r ports.Resources) *restapi.Resources {
	if r == (ports.Resources{}) {
		return nil
	}
	res := restapi.Resources{}
	if r.CPUs > 0 {
		res.Cpus = ptr(float32(r.CPUs))
	}
	if r.MemoryMB > 0 {
		res.MemoryMb = ptr(r.MemoryMB)
	}
	if r.PIDs > 0 {
		res.Pids = ptr(r.PIDs)
	}
	if r.DiskGB > 0 {
		res.DiskGb = ptr(r.DiskGB)
	}
	return &res
}

// setStr sets an optional field to v unless v is empty.
func setStr(dst **string, v string) {
	if v != "" {
		*dst = ptr(v)
	}
}

// deref is an optional field's value, the zero value when absent.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
