package environment

// An environment whose agent disconnected and whose runtime then says it
// failed or stopped (its agent process, container or VM is gone) is marked
// so at once, and what its agent ran ends as lost with it
// (ports.AgentDowner), instead of when someone next looks at it and after
// the link's disconnect grace: an exec on it answers in seconds, not
// minutes. An agent away on purpose (hibernation, a wake, a pool's idle
// member) is left alone, and so is one that comes back.

import (
	"context"
	"errors"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// agentDownLooks is how many times the runtime of an environment whose
// agent disconnected is asked (AgentDownBackoff, doubled each time: about
// 16 s at the default): a runtime may still say running for a moment after
// the agent's process died. An environment it says runs all along lost
// only its link; its agent's commands wait for it as before.
const agentDownLooks = 7

// agentDownInspectTimeout bounds one look at the runtime.
const agentDownInspectTimeout = 30 * time.Second

// AgentGoneWith reports whether an environment's agent is gone with the
// environment (what it ran is lost): its agent is disconnected and its
// runtime no longer runs it (failed, stopped, or removed). One away on
// purpose, or being made or deleted, is not.
func AgentGoneWith(current State, o Observation) bool {
	if o.AgentConnected || awayOnPurpose(current) {
		return false
	}
	return o.Gone || o.Runtime == ports.EnvFailed || o.Runtime == ports.EnvStopped
}

// awayOnPurpose: in these states the environment's agent is away, or not
// there yet, because of what is being done to it.
func awayOnPurpose(st State) bool {
	return st == StateProvisioning || st == StateDeleting || asleep(st)
}

// watchAgents looks at the environments' agents every AgentWatchEvery
// until Close. seen keeps, for each environment whose agent is
// disconnected, when it disconnected: each disconnect is looked into once.
func (s *Service) watchAgents() {
	defer s.wg.Done()
	seen := map[string]time.Time{}
	s.every(s.cfg.AgentWatchEvery, func() { s.agentRound(seen) })
}

// agentRound starts a look into each agent that disconnected since the
// last round (lookAgentDown). A disconnect seen while its environment is
// away on purpose is its transition's, and is not looked into even if
// the transition fails afterwards.
func (s *Service) agentRound(seen map[string]time.Time) {
	type watched struct {
		name string
		away bool
	}
	s.mu.Lock()
	envs := make([]watched, 0, len(s.envs))
	for name, rec := range s.envs {
		if rec.pool == "" { // a pool's idle member: its keeper tends it
			envs = append(envs, watched{name, rec.transition != nil || awayOnPurpose(rec.env.State)})
		}
	}
	s.mu.Unlock()
	down := make(map[string]bool, len(seen))
	for _, e := range envs {
		a, ok := s.cfg.Agents.Agent(e.name)
		if !ok || a.Status != ports.AgentDisconnected {
			continue
		}
		down[e.name] = true
		if at, looked := seen[e.name]; looked && at.Equal(a.DisconnectedAt) {
			continue
		}
		seen[e.name] = a.DisconnectedAt
		if e.away {
			continue
		}
		s.wg.Add(1)
		go s.lookAgentDown(e.name, a.DisconnectedAt)
	}
	for name := range seen {
		if !down[name] {
			delete(seen, name)
		}
	}
}

// lookAgentDown asks name's runtime, up to agentDownLooks times with
// backoff while its agent stays away from the disconnect at, whether the
// environment is gone; once it is, marks it so and ends its agent's
// commands.
func (s *Service) lookAgentDown(name string, at time.Time) {
	defer s.wg.Done()
	wait := s.cfg.AgentDownBackoff
	for look := 0; look < agentDownLooks; look++ {
		if look > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-s.life.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			wait *= 2
		}
		if s.agentDown(name, at) {
			return
		}
	}
}

// agentDown looks once; true when there is nothing more to look for (the
// agent came back, the environment is away on purpose or gone from this
// service, or its commands were ended).
func (s *Service) agentDown(name string, at time.Time) (settled bool) {
	if a, ok := s.cfg.Agents.Agent(name); !ok || a.Status != ports.AgentDisconnected || !a.DisconnectedAt.Equal(at) {
		return true
	}
	f, ok := s.get(name)
	if !ok || f.pool != "" || awayOnPurpose(f.State) {
		return true
	}
	rt, ok := s.runtime(f.Runtime)
	if !ok {
		return true
	}
	ctx, cancel := context.WithTimeout(s.life, agentDownInspectTimeout)
	defer cancel()
	re, err := rt.Inspect(ctx, f.runtimeName)
	if err != nil && !errors.Is(err, ports.ErrEnvNotFound) {
		return false // unknown now; look again
	}
	obs := Observation{Gone: err != nil, Runtime: re.State}
	if !AgentGoneWith(f.State, obs) {
		return false
	}
	// Decided and recorded in one hold of the lock, on the state the look
	// was made in: a start, a hibernation or a delete since owns the
	// environment (a refresh by Inspect is looked at again).
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	rec, ok := s.envs[name]
	if !ok || rec.pool != "" || rec.transition != nil {
		s.mu.Unlock()
		return true
	}
	if rec.env.State != f.State {
		s.mu.Unlock()
		return false
	}
	observe(&rec.env, obs, re.Detail, now)
	s.mu.Unlock()
	s.changed()
	why := observedWhy(obs, re.Detail)
	if why == "" {
		why = string(re.State)
	}
	s.log.Info("environment's agent gone with it: its commands end as lost", "name", name, "runtime", f.Runtime, "why", why)
	s.cfg.AgentDown.AgentDown(ctx, name, why)
	return true
}
