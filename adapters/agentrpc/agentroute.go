package agentrpc

import (
	"net/http"

	"connectrpc.com/connect"
)

// agentRefusal is why an agent-port HTTP route (the data planes, the raw
// connections, injections) turns its caller away: the status and the text
// for it, or status 0 for a caller signed in.
type agentRefusal struct {
	status int
	code   string
	msg    string
}

// signIn authenticates the agent calling an agent-port HTTP route by its
// id and secret headers: 401 for an unknown agent or a wrong secret, 503
// while the credential store cannot be read (the agent retries that one
// rather than treating its secret as wrong). Every such route answers the
// same, whatever it carries.
func (s *Service) signIn(r *http.Request) (string, agentRefusal) {
	id := r.Header.Get(HeaderAgentID)
	if err := s.auth.authenticate(id, r.Header.Get(HeaderAgentSecret)); err != nil {
		if connect.CodeOf(err) == connect.CodeUnavailable {
			return "", agentRefusal{http.StatusServiceUnavailable, "unavailable", "credential store unavailable"}
		}
		return "", agentRefusal{http.StatusUnauthorized, "unauthorized", "unknown agent or wrong secret"}
	}
	return id, agentRefusal{}
}

// signedIn is signIn for a route that answers in plain text: it writes the
// refusal itself and reports whether the caller may go on.
func (s *Service) signedIn(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, no := s.signIn(r)
	if no.status != 0 {
		http.Error(w, no.msg, no.status)
		return "", false
	}
	return id, true
}

// upgradingTo reports whether r asks for an HTTP/1.1 upgrade to protocol,
// the only way onto a raw connection; otherwise it answers 426 naming it.
func upgradingTo(w http.ResponseWriter, r *http.Request, protocol string) bool {
	if r.ProtoMajor == 1 && headerHas(r.Header, "Connection", "upgrade") && headerHas(r.Header, "Upgrade", protocol) {
		return true
	}
	w.Header().Set("Upgrade", protocol)
	http.Error(w, "an HTTP/1.1 upgrade to "+protocol+" is required", http.StatusUpgradeRequired)
	return false
}
