package main

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/promexport"
	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/core/mission"
	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/core/task"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// UseCases are the server's use cases, for the providers that take them
// all (the REST port, the app, the link's reports).
type UseCases struct {
	Missions     *mission.Service
	Sessions     *session.Service
	Environments *environment.Service
	Tasks        *task.Service
	// Audit is the audit log (not a use case: the REST port records into it).
	Audit ports.AuditLog
}

// linkReports is what the agent link reports to (ports.LinkReports and its
// egress policy). The cycle is real: every use case needs the link, and
// the link reports to them. So the link is given this router when it is
// made, and bindLinkReports binds it to the use cases once they all exist,
// before any listener serves (no agent can connect earlier). Asked before
// that, it answers as a server without use cases would: a session report
// is dropped, a permission question refused, every agent held (no work
// goes where nobody can say whether it is free), no egress, no environment
// to wake or keep awake. It is also the environments' use
// (ports.EnvironmentUse) for the decorators of the link (core/wakeful),
// which the use cases are made with, before the environments exist.
type linkReports struct {
	log     *slog.Logger
	metrics *promexport.EgressMetrics
	to      atomic.Pointer[linkTargets]
}

// linkTargets are the use cases behind the router.
type linkTargets struct {
	sessions     ports.SessionReconciler
	permissions  ports.PermissionAsker
	held         func(agentID string) bool
	egress       agentrpc.EgressPolicy
	recordEgress func(agentID string, e environment.EgressEntry)
	clock        ports.Clock
	// use wakes environments and keeps their idle clocks (nil: none).
	use ports.EnvironmentUse
	// awaited: the agent's environment sleeps (nil: none does).
	awaited func(agentID string) bool
}

var (
	_ ports.LinkReports     = (*linkReports)(nil)
	_ agentrpc.EgressPolicy = (*linkReports)(nil)
	_ ports.EnvironmentUse  = (*linkReports)(nil)
)

func provideLinkReports(log *slog.Logger, metrics *promexport.EgressMetrics) *linkReports {
	return &linkReports{log: log, metrics: metrics}
}

// LinkBound says the link's reports reach the use cases; the app takes it,
// so that Wire binds them before the app can serve.
type LinkBound struct{ reports *linkReports }

// bindLinkReports binds the router to the use cases, once.
func bindLinkReports(r *linkReports, uc UseCases, clock ports.Clock) LinkBound {
	r.bind(&linkTargets{
		sessions: uc.Sessions,
		// Claude's permission questions: a task's, else a mission's.
		permissions: ports.PermissionAskers{uc.Tasks, uc.Missions},
		// An idle pool member is held for whoever takes it.
		held:         uc.Environments.PoolMember,
		egress:       uc.Environments,
		recordEgress: uc.Environments.RecordEgress,
		clock:        clock,
		use:          uc.Environments,
		// A hibernated environment's agent is away until its wake: the
		// link keeps it, and its sessions and commands, past the grace.
		awaited: environmentAsleep(uc.Environments.Get),
	})
	return LinkBound{reports: r}
}

func (r *linkReports) bind(t *linkTargets) {
	if !r.to.CompareAndSwap(nil, t) {
		panic("the agent link's reports bound twice")
	}
}

// ReconcileSessions implements ports.SessionReconciler.
func (r *linkReports) ReconcileSessions(agentID string, reported []ports.ReportedSession) {
	t := r.to.Load()
	if t == nil {
		r.log.Error("an agent's session report came before the use cases were bound; dropped", "agent_id", agentID)
		return
	}
	t.sessions.ReconcileSessions(agentID, reported)
}

// PermissionAsked implements ports.PermissionAsker.
func (r *linkReports) PermissionAsked(req ports.PermissionRequest) bool {
	t := r.to.Load()
	return t != nil && t.permissions.PermissionAsked(req)
}

// AgentHeld implements ports.HeldAgents.
func (r *linkReports) AgentHeld(agentID string) bool {
	t := r.to.Load()
	return t == nil || t.held(agentID)
}

// AgentAwaited implements ports.AwaitedAgents.
func (r *linkReports) AgentAwaited(agentID string) bool {
	t := r.to.Load()
	return t != nil && t.awaited != nil && t.awaited(agentID)
}

// environmentAsleep says whether an agent's environment is hibernated, or
// on its way in or out (an environment's name is its agent's id).
func environmentAsleep(get func(string) (environment.Environment, bool)) func(string) bool {
	return func(agentID string) bool {
		e, ok := get(agentID)
		return ok && (e.State == environment.StateHibernated || e.State == environment.StateHibernating || e.State == environment.StateWaking)
	}
}

// EgressRules implements agentrpc.EgressPolicy.
func (r *linkReports) EgressRules(agentID string) ([]egress.Rule, bool) {
	t := r.to.Load()
	if t == nil {
		return nil, false
	}
	return t.egress.EgressRules(agentID)
}

// Use implements ports.EnvironmentUse.
func (r *linkReports) Use(ctx context.Context, agentID, kind string) (func(), error) {
	if t := r.to.Load(); t != nil && t.use != nil {
		return t.use.Use(ctx, agentID, kind)
	}
	return func() {}, nil
}

// Touch implements ports.EnvironmentUse.
func (r *linkReports) Touch(agentID, kind string) {
	if t := r.to.Load(); t != nil && t.use != nil {
		t.use.Touch(agentID, kind)
	}
}

// tunnelActive is a tunnel's traffic: it touches its environment.
func (r *linkReports) tunnelActive(agentID string) { r.Touch(agentID, ports.UseTunnel) }

// egressObserved counts a tunnel and keeps it with its environment.
func (r *linkReports) egressObserved(rec agentrpc.EgressRecord) {
	r.metrics.Observe(rec.Allowed, rec.BytesUp, rec.BytesDown)
	if t := r.to.Load(); t != nil {
		t.recordEgress(rec.AgentID, environment.EgressEntry{At: t.clock.Now().Add(-rec.Duration), Host: rec.Host, Port: rec.Port, Allowed: rec.Allowed,
			Reason: rec.Reason, BytesUp: rec.BytesUp, BytesDown: rec.BytesDown, Duration: rec.Duration})
	}
}

// linkEgress is the tunnels' configuration: the router's policy, and the
// test hook that resolves names to fixed addresses.
func linkEgress(cfg Config, log *slog.Logger, reports *linkReports) agentrpc.Egress {
	e := agentrpc.Egress{Policy: reports, Observe: reports.egressObserved, Active: reports.tunnelActive}
	if cfg.TestResolve != nil {
		log.Warn("AGENTIC_TEST_RESOLVE is set: egress resolves the names it lists to fixed addresses (a test hook)")
		e.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			if a, ok := cfg.TestResolve[strings.ToLower(host)]; ok {
				return []netip.Addr{a}, nil
			}
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	return e
}
