package task

import (
	"crypto/rand"
	"fmt"

	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Injected secrets (core/inject): the run's variable holds a placeholder,
// its base-URL variable names its agent's endpoint, and the server keeps the
// value in the registry, under the run's agent, for the run's life only.

// checkInjected refuses at submit an injected secret this server cannot
// serve: none are served, or its host is outside the server's egress bound.
func (s *Service) checkInjected(m Manifest) error {
	for i, sec := range m.Secrets {
		if sec.Inject == nil {
			continue
		}
		if s.cfg.Injected == nil {
			return fmt.Errorf("%w: secrets[%d].inject: this server does not inject secrets", ErrInvalidManifest, i)
		}
		if s.cfg.EgressBound != nil {
			if _, ok := egress.Within([]egress.Rule{{Host: sec.Inject.Host, Port: sec.Inject.Port}}, s.cfg.EgressBound); !ok {
				return fmt.Errorf("%w: secrets[%d].inject.host: %s is not among the hosts this server allows (AGENTIC_EGRESS_ALLOWED_HOSTS)", ErrInvalidManifest, i, sec.Inject.Address())
			}
		}
	}
	return nil
}

// resolveInjected reads the values of the manifest's injected secrets; a
// secret not required and not found is left out.
func (s *Service) resolveInjected(m Manifest) ([]inject.Secret, error) {
	var out []inject.Secret
	for _, sec := range m.Secrets {
		if sec.Inject == nil {
			continue
		}
		v, ok, err := s.cfg.Secrets.Resolve(sec.Source, sec.Key)
		if err != nil || (!ok && sec.Required) {
			why := "not found"
			if err != nil {
				why = err.Error()
			}
			return nil, fmt.Errorf("secret %s (%s %s): %s", sec.Name, sec.Source, sec.Key, why)
		}
		if ok {
			out = append(out, inject.Secret{Name: sec.Name, Spec: *sec.Inject, Value: v})
		}
	}
	return out, nil
}

func injectLimits(m Manifest) inject.Limits { return inject.Limits{MaxCostUSD: m.Lifecycle.MaxCostUSD} }

// grantInjected keeps the run's injected secrets under its agent and
// returns what the run's environment gets: each secret's placeholder in its
// variable, and the base-URL variables the agent points at its endpoint.
func (s *Service) grantInjected(e *entry, agentID string) (env, endpoints map[string]string, reason Reason, err error) {
	secrets, err := s.resolveInjected(e.manifest)
	if err != nil {
		return nil, nil, ReasonSecretUnresolved, err
	}
	if len(secrets) == 0 {
		return nil, nil, "", nil
	}
	random := s.cfg.Random
	if random == nil {
		random = func(b []byte) error { _, err := rand.Read(b); return err }
	}
	grants, err := s.cfg.Injected.Register(agentID, secrets, injectLimits(e.manifest), random)
	if err != nil {
		return nil, nil, ReasonInternal, err
	}
	env, endpoints = map[string]string{}, map[string]string{}
	placeholders := map[string]string{}
	for _, g := range grants {
		env[g.Name], endpoints[g.BaseURLEnv], placeholders[g.Name] = g.Placeholder, g.Name, g.Placeholder
	}
	s.update(e, func(r *ports.TaskRecord) { r.Placeholders = placeholders })
	return env, endpoints, "", nil
}

// restoreInjected gives a run bound again after a restart its secrets back
// under the placeholders it holds, with the usage counted so far.
func (s *Service) restoreInjected(e *entry) {
	s.mu.Lock()
	agentID, placeholders, used := e.rec.AgentID, e.rec.Placeholders, e.rec.Usage
	s.mu.Unlock()
	if s.cfg.Injected == nil || len(placeholders) == 0 || s.cfg.Injected.Names(agentID) != nil {
		return
	}
	secrets, err := s.resolveInjected(e.manifest)
	if err == nil {
		_, err = s.cfg.Injected.Restore(agentID, secrets, placeholders, injectLimits(e.manifest), inject.Usage{
			Requests: used.Requests, InputTokens: used.InputTokens, OutputTokens: used.OutputTokens,
			CacheCreationInputTokens: used.CacheCreationInputTokens, CacheReadInputTokens: used.CacheReadInputTokens, CostUSD: used.CostUSD,
			BytesSent: used.BytesSent, BytesReceived: used.BytesReceived,
		})
	}
	if err != nil {
		// The run goes on; its requests through the secrets are refused.
		s.log.Warn("task's injected secrets not restored", "task_id", e.rec.ID, "err", err)
	}
}

// injectedUsage copies the run's usage into its record (when it changed)
// and tells whether its budget is spent.
func (s *Service) injectedUsage(e *entry) (overBudget bool) {
	if s.cfg.Injected == nil {
		return false
	}
	s.mu.Lock()
	agentID, had := e.rec.AgentID, e.rec.Usage
	s.mu.Unlock()
	u, over := s.cfg.Injected.Usage(agentID)
	now := ports.TaskUsage{Requests: u.Requests, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens, CacheReadInputTokens: u.CacheReadInputTokens, CostUSD: u.CostUSD,
		BytesSent: u.BytesSent, BytesReceived: u.BytesReceived}
	if u.Requests > 0 && now != had {
		s.update(e, func(r *ports.TaskRecord) { r.Usage = now })
	}
	return over
}

// forgetInjected ends the run's secrets: their placeholders fail from now on.
func (s *Service) forgetInjected(e *entry) {
	if s.cfg.Injected == nil {
		return
	}
	s.mu.Lock()
	agentID, had := e.rec.AgentID, len(e.rec.Placeholders) > 0
	s.mu.Unlock()
	if had {
		s.injectedUsage(e)
		s.cfg.Injected.Forget(agentID)
	}
}
