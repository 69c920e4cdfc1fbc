package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/promexport"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/core/mission"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func provideProvisionTimes() *promexport.ProvisionTimes { return promexport.NewProvisionTimes() }
func provideTaskMetrics() *promexport.TaskMetrics       { return promexport.NewTaskMetrics() }
func provideEgressMetrics() *promexport.EgressMetrics   { return promexport.NewEgressMetrics() }
func providePoolMetrics() *promexport.PoolMetrics       { return promexport.NewPoolMetrics() }
func provideSleepMetrics() *promexport.SleepMetrics     { return promexport.NewSleepMetrics() }

// retirers retire an agent in each part of the server, in order.
type retirers []ports.AgentRetirer

func (rs retirers) RetireAgent(ctx context.Context, agentID, reason string) {
	for _, r := range rs {
		r.RetireAgent(ctx, agentID, reason)
	}
}

func provideEnvironments(cfg Config, rts *Runtimes, svc *agentrpc.Service, ms *mission.Service, creds ports.AgentCredentials, clock ports.Clock, log *slog.Logger, times *promexport.ProvisionTimes, poolMetrics *promexport.PoolMetrics, sleep *promexport.SleepMetrics, ch ports.ChangeNotifier, public *filestore.PublicPorts, dir DataDir, injected *inject.Registry, hold *agentrpc.LinkHold) (*environment.Service, func(), error) {
	pools, err := filestore.NewPoolStore(filepath.Join(cfg.DataDir, "pools"))
	if err != nil {
		return nil, nil, fmt.Errorf("pool store: %w", err)
	}
	// Each environment's last activity, so that its idle clock outlives
	// a restart (written every few seconds at most, and at shutdown).
	activity, err := filestore.NewActivityStore(filepath.Join(cfg.DataDir, "environments"))
	if err != nil {
		return nil, nil, fmt.Errorf("activity store: %w", err)
	}
	var bin string
	// Only runtimes that hand environments the host's agent need it (not
	// kubernetes', whose pods take it from the agent image).
	if slices.ContainsFunc(rts.wanted(), func(name string) bool { e, ok := catalogEntry(name); return ok && !e.AgentInImage }) {
		b, err := agentBinary(cfg.AgentBinary)
		if err != nil {
			log.Error("environments cannot be provisioned without the agent binary", "err", err)
		}
		bin = b
	}
	envs := environment.New(environment.Config{
		Runtimes: rts.snapshot(), Discover: rts.discover, Offered: rts.offered, DiscoverEvery: discoverEvery, Unavailable: rts.unavailable, Known: runtimeNames(),
		Agents: svc, Credentials: creds, Clock: clock, Logger: log,
		Bootstrap:        ports.AgentBootstrap{Binary: bin, ServerURL: cfg.agentServerURL(), Socket: cfg.AgentSocket},
		ObserveProvision: times.Observe,
		AllowedNetworks:  cfg.AllowedNetworks,
		EgressBound:      cfg.EgressBound,
		Changes:          ch,
		PublicPorts:      public,
		// Missions first, so they fail with the reason before their
		// sessions end under them.
		Retire:        retirers{ms, svc},
		Pools:         pools,
		StartPools:    cfg.Pools,
		Renamer:       svc,
		ObserveRefill: poolMetrics.ObserveRefill,
		Link:          svc,
		Injected:      injected,
		Secrets:       secretSource(dir),

		HibernateMaxBytes: cfg.HibernateMaxBytes,
		LinkQuiet:         hold,
		WakeTimeout:       cfg.WakeTimeout,
		ObserveHibernate:  sleep.ObserveHibernate,
		ObserveWake:       sleep.ObserveWake,
		Activity:          activity,

		// What ran on an agent whose environment failed or stopped ends
		// with it, not after the disconnect grace.
		AgentDown: svc,
	})
	// Every command on an environment with injected secrets holds their
	// placeholders and endpoints, whoever starts it.
	svc.SetCommandEnv(envs.InjectedEnv)
	return envs, envs.Close, nil
}
