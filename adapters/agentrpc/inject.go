package agentrpc

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
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

// serveInject takes an agent's request for an injected secret: signed in
// as the agent (its credentials go no further), then handed on.
func (s *Service) serveInject(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, code, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": code})
	}
	id := r.Header.Get(HeaderAgentID)
	if err := s.auth.authenticate(id, r.Header.Get(HeaderAgentSecret)); err != nil {
		fail(http.StatusUnauthorized, "unauthorized", "unknown agent or wrong secret")
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
