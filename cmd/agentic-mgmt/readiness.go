package main

import (
	"fmt"
	"sort"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/aiwg"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest"
)

// Listeners /readyz follows: each is ready only while it serves.
const (
	listenerAgentRPC    = "agent_rpc"
	listenerAgentSocket = "agent_socket"
	listenerREST        = "rest"
	listenerWS          = "ws"
)

// Readiness is every check /readyz reports, in one place: the listeners
// while they serve, the host agents asked for, the AIWG link and the
// runtimes.
type Readiness struct {
	cfg      Config
	agents   *agentrpc.Service
	link     *aiwg.Client
	runtimes *Runtimes

	mu      sync.Mutex
	serving map[string]bool
}

func provideReadiness(cfg Config, agents *agentrpc.Service, link *aiwg.Client, rts *Runtimes) *Readiness {
	return &Readiness{cfg: cfg, agents: agents, link: link, runtimes: rts,
		serving: map[string]bool{listenerAgentRPC: false, listenerREST: false, listenerWS: false}}
}

func (r *Readiness) setServing(name string, up bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.serving[name] = up
}

// Checks lists the checks by name; the server is ready when all are.
func (r *Readiness) Checks() []rest.ReadinessCheck {
	var checks []rest.ReadinessCheck
	r.mu.Lock()
	for name, up := range r.serving {
		detail := "serving"
		if !up {
			detail = "not serving"
		}
		checks = append(checks, rest.ReadinessCheck{Name: name, Ready: up, Detail: detail})
	}
	r.mu.Unlock()

	if r.cfg.HostAgents > 0 {
		// The supervisor's own agents only: host environments' agents are
		// host agents too, and counting them said "4 of 2 connected".
		connected := 0
		for n := 1; n <= r.cfg.HostAgents; n++ {
			if a, ok := r.agents.Agent(hostsup.AgentID(n)); ok && a.Status.Connected() {
				connected++
			}
		}
		checks = append(checks, rest.ReadinessCheck{
			Name:   "host_agents",
			Ready:  connected >= r.cfg.HostAgents,
			Detail: fmt.Sprintf("%d of %d connected", connected, r.cfg.HostAgents),
		})
	}

	// With the integration on, missions arrive only over a live executor
	// stream: until it is up, this server cannot do what it is there for.
	st := r.link.Status()
	aiwgCheck := rest.ReadinessCheck{Name: "aiwg", Ready: true, Detail: "integration off"}
	if st.Configured {
		aiwgCheck.Ready = st.Connected
		aiwgCheck.Detail = "executor stream connected"
		if !st.Connected {
			aiwgCheck.Detail = "executor stream not connected"
			if st.ExecutorRegisterError != "" {
				aiwgCheck.Detail += ": " + st.ExecutorRegisterError
			}
		}
	}
	checks = append(checks, aiwgCheck)
	checks = append(checks, r.runtimes.readiness()...)
	sort.Slice(checks, func(i, j int) bool { return checks[i].Name < checks[j].Name })
	return checks
}
