package agentrpc

import (
	"encoding/json"
	"maps"
	"net/http"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// InjectPath is where an agent carries a request its workload sent to the
// loopback endpoint of an injected secret: InjectPath + secret name +
// the request's own path (agentd's injectPath).
const InjectPath = agentwire.InjectPath

// InjectHandler serves one such request of the authenticated agent agentID
// for the secret named secret; path is the request's own (escaped, from /).
type InjectHandler func(w http.ResponseWriter, r *http.Request, agentID, secret, path string)

// SetInject sets who serves injected secrets' requests (nil: nobody; the
// agents' requests get 404).
func (s *Service) SetInject(h InjectHandler) {
	if h == nil {
		s.inject.Store(nil)
		return
	}
	s.inject.Store(&h)
}

// CommandEnv says what every command started on agentID gets for its
// environment's injected secrets: variables (placeholders) and the
// base-URL variables its agent points at its endpoint (variable → secret
// name); nil for none.
type CommandEnv func(agentID string) (env, endpoints map[string]string)

// SetCommandEnv sets who says so (nil: nobody). Start applies it to every
// command, whoever starts it (REST exec and commands, sessions, missions,
// tasks); its variables override the command's own of the same name.
func (s *Service) SetCommandEnv(f CommandEnv) {
	if f == nil {
		s.commandEnv.Store(nil)
		return
	}
	s.commandEnv.Store(&f)
}

// withInjected is spec with agentID's injected secrets' variables.
func (s *Service) withInjected(agentID string, spec ports.CommandSpec) ports.CommandSpec {
	f := s.commandEnv.Load()
	if f == nil {
		return spec
	}
	env, endpoints := (*f)(agentID)
	if len(env) == 0 && len(endpoints) == 0 {
		return spec
	}
	spec.Env = maps.Clone(spec.Env)
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	maps.Copy(spec.Env, env)
	spec.InjectEndpoints = maps.Clone(spec.InjectEndpoints)
	if spec.InjectEndpoints == nil {
		spec.InjectEndpoints = map[string]string{}
	}
	maps.Copy(spec.InjectEndpoints, endpoints)
	return spec
}

// serveInject takes an agent's request for an injected secret: signed in
// as the agent (its credentials go no further), then handed on.
func (s *Service) serveInject(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, code, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": code})
	}
	id, no := s.signIn(r)
	if no.status != 0 {
		fail(no.status, no.code, no.msg)
		return
	}
	r.Header.Del(HeaderAgentID)
	r.Header.Del(HeaderAgentSecret)
	h := s.inject.Load()
	if h == nil {
		fail(http.StatusNotFound, "secret_unknown", "this server injects no secrets")
		return
	}
	secret, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), InjectPath), "/")
	if secret == "" {
		fail(http.StatusNotFound, "secret_unknown", "the path names no injected secret")
		return
	}
	(*h)(w, r, id, secret, "/"+rest)
}
