package agentrpc

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// authenticator checks who opens a stream: an agent by its id and secret
// (and the runtime kind pinned to its credential), the operator by the
// bearer token.
type authenticator struct {
	creds         ports.AgentCredentials
	clock         ports.Clock
	log           *slog.Logger
	operatorToken string
	// failedLogins rate-limits the log lines of failed logins.
	failedLogins loginLog
}

func (a *authenticator) authenticate(id, secret string) error {
	unauth := connect.NewError(connect.CodeUnauthenticated, errors.New("unknown agent or wrong secret"))
	if !ValidAgentID(id) || secret == "" {
		return unauth
	}
	ok, err := a.creds.Verify(id, secret)
	if err != nil {
		a.log.Error("agent credential store unreadable", "agent_id", id, "err", err)
		return connect.NewError(connect.CodeUnavailable, errors.New("credential store unavailable"))
	}
	if !ok {
		if log, left := a.failedLogins.allow(id, a.clock.Now()); log {
			a.log.Warn("agent authentication failed", "agent_id", id, "not_logged_since_last", left)
		}
		return unauth
	}
	return nil
}

// opened authenticates the agent opening a Transfer or Tunnel stream and
// reads the stream's first message (what names the transfer or the
// destination).
func opened[Req, Res any](a *authenticator, stream *connect.BidiStream[Req, Res], what string) (string, *Req, error) {
	id := stream.RequestHeader().Get(HeaderAgentID)
	if err := a.authenticate(id, stream.RequestHeader().Get(HeaderAgentSecret)); err != nil {
		return "", nil, err
	}
	first, err := stream.Receive()
	if err != nil {
		return "", nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("expected %s: %w", what, err))
	}
	return id, first, nil
}

// checkKind holds an agent to the runtime kind recorded with its credential:
// the isolation tier missions are routed by is never the agent's say.
func (a *authenticator) checkKind(id string, declared sandboxv1.RuntimeKind) error {
	kind := agentwire.RuntimeKindFromProto(declared)
	if !kind.Valid() {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("registration runtime %v: want host, container or vm", declared))
	}
	recorded, err := a.creds.PinKind(id, kind)
	if err != nil {
		a.log.Error("agent credential store unwritable", "agent_id", id, "err", err)
		return connect.NewError(connect.CodeUnavailable, errors.New("credential store unavailable"))
	}
	if recorded != kind {
		a.log.Warn("refused: an agent declared another runtime kind than its credential's", "agent_id", id, "declared", kind, "recorded", recorded)
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("agent %q is a %s agent; it cannot register as %s", id, recorded, kind))
	}
	return nil
}

func (a *authenticator) operatorAuthorized(header string) bool {
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || a.operatorToken == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(token), []byte(a.operatorToken)) == 1
}

// loginLog keeps the log from flooding with failed logins: at most one
// line per agent id per loginLogEvery, saying how many were left out.
type loginLog struct {
	mu   sync.Mutex
	last map[string]time.Time
	left map[string]int
}

const loginLogEvery = 10 * time.Second

// allow reports whether a failure for id may be logged now, and how many
// were not since the last line.
func (l *loginLog) allow(id string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil || len(l.last) > 4096 { // random ids cannot grow it without bound
		l.last, l.left = map[string]time.Time{}, map[string]int{}
	}
	if t, ok := l.last[id]; ok && now.Sub(t) < loginLogEvery {
		l.left[id]++
		return false, 0
	}
	n := l.left[id]
	l.last[id], l.left[id] = now, 0
	return true, n
}
