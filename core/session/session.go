// Package session is the model of sessions on agents: their types, the
// states they move through and the one table of allowed transitions, names
// unique per agent, viewer roles (one controller, any number of observers),
// and the reconciliation of the server's records with an agent's report of
// what it runs. It is pure: time and ids come in as arguments, results are
// values and decisions; the caller serialises access and does the I/O.
package session

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// AcceptsInput reports whether sessions of type t take stdin at all.
func AcceptsInput(t ports.SessionType) bool { return t != ports.SessionHeadless }

// State is where a session is in its lifecycle.
type State string

const (
	Starting State = "starting"
	Running  State = "running"
	Exited   State = "exited"
	// Killed is a session that ended because the server killed it.
	Killed State = "killed"
	// Lost is a session the server expected but its agent no longer runs.
	Lost State = "lost"
)

// States lists every state, in lifecycle order.
var States = []State{Starting, Running, Exited, Killed, Lost}

// Valid reports whether s is a known state.
func (s State) Valid() bool { return slices.Contains(States, s) }

// Ended reports whether no transition leaves s.
func (s State) Ended() bool { return s == Exited || s == Killed || s == Lost }

// Live reports whether the session may still be running on its agent.
func (s State) Live() bool { return s == Starting || s == Running }

// transitions is the one place that says which moves are allowed. A session
// may end from starting (it exits at once, is killed before it runs, or its
// agent never started it) as well as from running. Ended states are final:
// a session that reappears after it was marked lost is killed by Reconcile
// rather than revived, because viewers were already told it is gone.
var transitions = map[State][]State{
	Starting: {Running, Exited, Killed, Lost},
	Running:  {Exited, Killed, Lost},
}

// CanTransition reports whether a session may move from one state to another.
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Errors of the registry. ErrNotFound is ports.ErrSessionNotFound itself, so
// the REST adapter's existing mapping (404) applies unchanged.
var (
	ErrNotFound          = ports.ErrSessionNotFound
	ErrIllegalTransition = errors.New("illegal session state transition")
	ErrInvalidName       = errors.New("invalid session name (1-64 of A-Z a-z 0-9 _ -, not starting with - or _)")
	ErrNameTaken         = errors.New("session name already used by a live session of this agent")
	ErrInvalidType       = errors.New("invalid session type")
	ErrInvalidSpec       = errors.New("invalid session spec")
	ErrNotEnded          = errors.New("session has not ended")
	ErrNotJoined         = errors.New("viewer has not joined the session")
	ErrNotController     = errors.New("viewer is not the session's controller")
	ErrInvalidRole       = errors.New("invalid viewer role")
	// ErrQuota is a new session beyond an agent's live-session quota.
	ErrQuota = errors.New("too many live sessions on this agent")
)

// MaxLiveSessionsPerAgent bounds an agent's live sessions, created or
// adopted from its reports: one report cannot make the server keep tens of
// thousands of sessions.
const MaxLiveSessionsPerAgent = 128

// Session is the server's record of one session.
type Session struct {
	// ID is stable for the session's life, across agent and server restarts.
	ID      string
	AgentID string
	// Name is unique among the live sessions of its agent.
	Name    string
	Type    ports.SessionType
	Command string
	Args    []string
	Cwd     string
	Env     map[string]string
	PTY     bool
	State   State
	// ExitCode is set once the session exited or was killed (128+N for signal N).
	ExitCode *int
	// Reason says why a session was lost.
	Reason string
	// Adopted is set for a session the server learned of from an agent's report.
	Adopted   bool
	CreatedAt time.Time
	StartedAt time.Time
	EndedAt   time.Time
}

func (s Session) clone() Session {
	if s.Args != nil {
		s.Args = append([]string(nil), s.Args...)
	}
	if s.Env != nil {
		env := make(map[string]string, len(s.Env))
		for k, v := range s.Env {
			env[k] = v
		}
		s.Env = env
	}
	if s.ExitCode != nil {
		c := *s.ExitCode
		s.ExitCode = &c
	}
	return s
}

// AgentNamePrefix marks, on the agent, the processes and tmux sessions this
// server started: the tmux session of a session named "dev" is "as-dev".
// Reconcile adopts unknown sessions carrying it and kills the others it is
// told about (the agent reports only what it considers its own; anything it
// reports without the prefix is a leftover it should not keep).
const AgentNamePrefix = "as-"

// AgentName is the name a session has on its agent (tmux session name).
func AgentName(name string) string { return AgentNamePrefix + name }

// ParseAgentName returns the session name inside an agent-side name, and
// whether it is one of ours at all.
func ParseAgentName(agentName string) (string, bool) {
	name, ok := strings.CutPrefix(agentName, AgentNamePrefix)
	if !ok || ValidName(name) != nil {
		return "", false
	}
	return name, true
}

// ValidName checks a session name. The charset is what tmux accepts in a
// session name unchanged (no '.' or ':') and what is safe in a path or a
// shell word, so the same name works everywhere on the agent.
func ValidName(name string) error {
	if !validToken(name, 64) || name[0] == '-' || name[0] == '_' {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	return nil
}

// validToken reports whether s is 1..max chars of [A-Za-z0-9_-].
func validToken(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
