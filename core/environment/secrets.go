package environment

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Injected secrets of an environment (core/inject): every command started
// on its agent sees a placeholder in the secret's variable and the
// base-URL variable naming the agent's endpoint; the server keeps the value
// in Config.Injected, under the environment's name (its agent's id), while
// the environment lives. The references and placeholders (never a value)
// are kept with the environment itself (ports.LabelInjected).

// SecretSource resolves a secret reference (source env or file, key); ok
// is false when there is no such secret. The task use case reads its
// manifests' secrets through the same.
type SecretSource interface {
	Resolve(source, key string) (value string, ok bool, err error)
}

// Secret sources.
const (
	SecretFromEnv  = inject.SourceEnv
	SecretFromFile = inject.SourceFile
)

// SecretRequest is an injected secret as a create request gives it: the
// inject fields as core/inject.ParseSpec reads them.
type SecretRequest struct {
	Name, Source, Key                string
	Host, Header, Format, BaseURLEnv string
}

// InjectedSecret is an environment's injected secret: its reference and
// where its value goes (never the value).
type InjectedSecret struct {
	Name, Source, Key string
	Spec              inject.Spec
}

// ErrSecretUnresolved is an injected secret whose value the server cannot
// read; the error names the reference, never a value.
var ErrSecretUnresolved = errors.New("secret unresolved")

// CheckSecrets validates injected secret references as a task manifest's
// are (core/inject's rules: NameProblem, SourceProblem, KeyProblem,
// ParseSpec, Endpoints) and returns them with their inject specs; the key
// defaults to the name. The error names the field.
func CheckSecrets(reqs []SecretRequest) ([]InjectedSecret, error) {
	if len(reqs) > 64 {
		return nil, fmt.Errorf("%w: at most 64 secrets", ports.ErrInvalidSpec)
	}
	bad := func(at, why string) error { return fmt.Errorf("%w: %s %s", ports.ErrInvalidSpec, at, why) }
	out := make([]InjectedSecret, 0, len(reqs))
	names := map[string]bool{}
	for i, r := range reqs {
		at := fmt.Sprintf("secrets[%d]", i)
		if why := inject.NameProblem(r.Name); why != "" {
			return nil, bad(at+".name", why)
		}
		if names[r.Name] {
			return nil, bad(at+".name:", r.Name+" given twice")
		}
		names[r.Name] = true
		if why := inject.SourceProblem(r.Source); why != "" {
			return nil, bad(at+".source", why)
		}
		key := r.Key
		if key == "" {
			key = r.Name
		}
		if why := inject.KeyProblem(r.Source, key); why != "" {
			return nil, bad(at+".key", why)
		}
		spec, err := inject.ParseSpec(r.Host, r.Header, r.Format, r.BaseURLEnv)
		if err != nil {
			return nil, fmt.Errorf("%w: %s.%s", ports.ErrInvalidSpec, at, strings.TrimPrefix(err.Error(), inject.ErrBadSpec.Error()+": "))
		}
		out = append(out, InjectedSecret{Name: r.Name, Source: r.Source, Key: key, Spec: spec})
	}
	endpoints := inject.NewEndpoints(slices.Collect(maps.Keys(names)))
	for i, s := range out {
		if why := endpoints.Problem(s.Name, s.Spec.BaseURLEnv); why != "" {
			return nil, bad(fmt.Sprintf("secrets[%d].inject.base_url_env:", i), why)
		}
	}
	return out, nil
}

// checkInjected refuses secrets this server cannot serve: none are
// injected here, or a host outside its egress bound.
func (s *Service) checkInjected(secrets []InjectedSecret) error {
	if len(secrets) == 0 {
		return nil
	}
	if s.cfg.Injected == nil || s.cfg.Secrets == nil {
		return fmt.Errorf("%w: secrets: this server does not inject secrets", ports.ErrInvalidSpec)
	}
	for i, sec := range secrets {
		if s.cfg.EgressBound != nil {
			if _, ok := egress.Within([]egress.Rule{{Host: sec.Spec.Host, Port: sec.Spec.Port}}, s.cfg.EgressBound); !ok {
				return fmt.Errorf("%w: secrets[%d].inject.host: %s is not among the hosts this server allows (AGENTIC_EGRESS_ALLOWED_HOSTS)", ports.ErrInvalidSpec, i, sec.Spec.Address())
			}
		}
	}
	return nil
}

// resolveSecrets reads the values; the error names the reference only.
func (s *Service) resolveSecrets(secrets []InjectedSecret) ([]inject.Secret, error) {
	out := make([]inject.Secret, 0, len(secrets))
	for _, sec := range secrets {
		v, ok, err := s.cfg.Secrets.Resolve(sec.Source, sec.Key)
		if err != nil || !ok {
			why := "not found"
			if err != nil {
				why = err.Error()
			}
			return nil, fmt.Errorf("%w: secret %s (%s %s): %s", ErrSecretUnresolved, sec.Name, sec.Source, sec.Key, why)
		}
		out = append(out, inject.Secret{Name: sec.Name, Spec: sec.Spec, Value: v})
	}
	return out, nil
}

// registerInjected resolves the values and keeps them under name; it
// returns the placeholders by secret name.
func (s *Service) registerInjected(name string, secrets []InjectedSecret) (map[string]string, error) {
	values, err := s.resolveSecrets(secrets)
	if err != nil {
		return nil, err
	}
	random := s.cfg.Random
	if random == nil {
		random = func(b []byte) error { _, err := rand.Read(b); return err }
	}
	grants, err := s.cfg.Injected.Register(name, values, inject.Limits{}, random)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(grants))
	for _, g := range grants {
		out[g.Name] = g.Placeholder
	}
	return out, nil
}

// injectedLabel is what ports.LabelInjected keeps.
type injectedLabel struct {
	Name        string `json:"name"`
	Source      string `json:"source"`
	Key         string `json:"key"`
	Host        string `json:"host"`
	Port        int    `json:"port"`
	Header      string `json:"header"`
	Format      string `json:"format"`
	BaseURLEnv  string `json:"base_url_env"`
	Placeholder string `json:"placeholder"`
}

func encodeInjected(secrets []InjectedSecret, placeholders map[string]string) string {
	out := make([]injectedLabel, len(secrets))
	for i, s := range secrets {
		out[i] = injectedLabel{Name: s.Name, Source: s.Source, Key: s.Key, Host: s.Spec.Host, Port: s.Spec.Port,
			Header: s.Spec.Header, Format: s.Spec.Format, BaseURLEnv: s.Spec.BaseURLEnv, Placeholder: placeholders[s.Name]}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func decodeInjected(v string) ([]InjectedSecret, map[string]string, error) {
	var in []injectedLabel
	if err := json.Unmarshal([]byte(v), &in); err != nil {
		return nil, nil, err
	}
	secrets := make([]InjectedSecret, len(in))
	placeholders := make(map[string]string, len(in))
	for i, l := range in {
		secrets[i] = InjectedSecret{Name: l.Name, Source: l.Source, Key: l.Key, Spec: inject.Spec{Host: l.Host, Port: l.Port,
			Header: l.Header, Format: l.Format, BaseURLEnv: l.BaseURLEnv}}
		placeholders[l.Name] = l.Placeholder
	}
	return secrets, placeholders, nil
}

// restoreInjected gives a recovered environment's secrets their values
// back under the placeholders its workload holds. A value that is gone is
// logged: the environment goes on, its requests through the secrets are
// refused.
func (s *Service) restoreInjected(ctx context.Context, name string, secrets []InjectedSecret, placeholders map[string]string) {
	if len(secrets) == 0 {
		return
	}
	if s.cfg.Injected == nil || s.cfg.Secrets == nil {
		s.log.WarnContext(ctx, "environment's injected secrets not restored: this server does not inject secrets", "name", name)
		return
	}
	values, err := s.resolveSecrets(secrets)
	if err == nil {
		_, err = s.cfg.Injected.Restore(name, values, placeholders, inject.Limits{}, inject.Usage{})
	}
	if err != nil {
		s.log.WarnContext(ctx, "environment's injected secrets not restored; its requests through them are refused", "name", name, "err", err)
	}
}

// forgetInjected ends name's secrets: their placeholders fail from now on.
func (s *Service) forgetInjected(name string) {
	if s.cfg.Injected != nil {
		s.cfg.Injected.Forget(name)
	}
}

// InjectedEnv is what every command started on agentID's environment gets
// for its injected secrets: each secret's placeholder in its variable, and
// the base-URL variables its agent points at its endpoint (variable →
// secret name). Nil when the environment has none.
func (s *Service) InjectedEnv(agentID string) (env, endpoints map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.envs[agentID]
	if !ok || rec.pool != "" || len(rec.secrets) == 0 || rec.env.State == StateDeleting {
		return nil, nil
	}
	env, endpoints = map[string]string{}, map[string]string{}
	for _, sec := range rec.secrets {
		env[sec.Name] = rec.placeholders[sec.Name]
		endpoints[sec.Spec.BaseURLEnv] = sec.Name
	}
	return env, endpoints
}

// InjectedUsage is what the workloads of environment name used through its
// injected secrets so far (a task's own environment: its run's, which the
// task registers under the same agent id); false when they made no request
// through one, or the environment has no injected secrets.
func (s *Service) InjectedUsage(name string) (inject.Usage, bool) {
	if s.cfg.Injected == nil {
		return inject.Usage{}, false
	}
	u, _ := s.cfg.Injected.Usage(name)
	return u, u != (inject.Usage{})
}
