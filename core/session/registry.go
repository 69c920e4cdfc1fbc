package session

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Spec is what a caller asks for when it creates a session.
type Spec struct {
	AgentID string
	// Name is optional: empty gets "<type>-<first 8 chars of the id>".
	Name    string
	Type    ports.SessionType
	Command string
	Args    []string
	Cwd     string
	Env     map[string]string
	// PTY is forced on for interactive sessions.
	PTY bool
}

type record struct {
	s Session
	// viewers maps viewer id to role; controller is "" when nobody controls.
	viewers    map[string]Role
	controller string
}

// Registry holds the sessions the server knows. It is not safe for
// concurrent use: the caller serialises access (one mutex in the use-case).
type Registry struct {
	ids     ports.IDGenerator
	byID    map[string]*record
	byAgent map[string]map[string]string // agent -> live session name -> id
}

// NewRegistry returns an empty registry that takes session ids from ids.
func NewRegistry(ids ports.IDGenerator) *Registry {
	return &Registry{ids: ids, byID: map[string]*record{}, byAgent: map[string]map[string]string{}}
}

// Create records a new session in state starting. Names are unique among
// the live (starting or running) sessions of an agent only: a name frees up
// when its session ends, like the tmux session name it maps to.
func (r *Registry) Create(spec Spec, now time.Time) (Session, error) {
	if !spec.Type.Valid() {
		return Session{}, fmt.Errorf("%w: %q", ErrInvalidType, spec.Type)
	}
	if spec.AgentID == "" {
		return Session{}, fmt.Errorf("%w: no agent", ErrInvalidSpec)
	}
	if spec.Type != ports.SessionInteractive && spec.Command == "" {
		// Interactive sessions default to the agent's shell; the others have nothing to run.
		return Session{}, fmt.Errorf("%w: %s session without a command", ErrInvalidSpec, spec.Type)
	}
	if n := commandLineBytes(spec); n > MaxCommandLineBytes {
		return Session{}, fmt.Errorf("%w: command line of %d bytes is over %d", ErrInvalidSpec, n, MaxCommandLineBytes)
	}
	id := r.newID()
	name := spec.Name
	if name == "" {
		name = r.defaultName(spec.AgentID, spec.Type, id)
	}
	if err := ValidName(name); err != nil {
		return Session{}, err
	}
	if _, taken := r.byAgent[spec.AgentID][name]; taken {
		return Session{}, fmt.Errorf("%w: %q on agent %q", ErrNameTaken, name, spec.AgentID)
	}
	if n := r.live(spec.AgentID); n >= MaxLiveSessionsPerAgent {
		return Session{}, fmt.Errorf("%w: agent %q runs %d, the limit is %d", ErrQuota, spec.AgentID, n, MaxLiveSessionsPerAgent)
	}
	s := Session{
		ID: id, AgentID: spec.AgentID, Name: name, Type: spec.Type,
		Command: spec.Command, Args: spec.Args, Cwd: spec.Cwd, Env: spec.Env,
		PTY: spec.PTY || spec.Type == ports.SessionInteractive, State: Starting, CreatedAt: now,
	}
	s = s.clone() // the caller's slices and maps are not ours to keep
	r.insert(s)
	return s.clone(), nil
}

// newID returns an id that is not in use; a generator repeating itself must
// not make two sessions share a log.
func (r *Registry) newID() string {
	for {
		id := r.ids.NewID()
		if _, dup := r.byID[id]; !dup && id != "" {
			return id
		}
	}
}

func (r *Registry) defaultName(agentID string, t ports.SessionType, id string) string {
	// The end of the id: a UUIDv7 starts with its timestamp, so its first
	// characters repeat for a minute; the name is also the agent's tmux
	// session name, where a repeat would attach to another session.
	short := strings.ReplaceAll(id, "-", "")
	if len(short) > 12 {
		short = short[len(short)-12:]
	}
	for _, name := range []string{string(t) + "-" + short, string(t) + "-" + id} {
		if _, taken := r.byAgent[agentID][name]; !taken && ValidName(name) == nil {
			return name
		}
	}
	return string(t) + "-" + id // invalid or taken: Create reports it
}

func (r *Registry) insert(s Session) {
	r.byID[s.ID] = &record{s: s, viewers: map[string]Role{}}
	if s.State.Live() {
		names := r.byAgent[s.AgentID]
		if names == nil {
			names = map[string]string{}
			r.byAgent[s.AgentID] = names
		}
		names[s.Name] = s.ID
	}
}

// Get returns a copy of session id.
func (r *Registry) Get(id string) (Session, bool) {
	rec, ok := r.byID[id]
	if !ok {
		return Session{}, false
	}
	return rec.s.clone(), true
}

// ByName finds the live session called name on an agent.
func (r *Registry) ByName(agentID, name string) (Session, bool) {
	id, ok := r.byAgent[agentID][name]
	if !ok {
		return Session{}, false
	}
	return r.Get(id)
}

// List returns the sessions of agentID (every agent when empty), oldest first.
func (r *Registry) List(agentID string) []Session {
	var out []Session
	for _, rec := range r.byID {
		if agentID == "" || rec.s.AgentID == agentID {
			out = append(out, rec.s.clone())
		}
	}
	sortSessions(out)
	return out
}

func sortSessions(ss []Session) {
	sort.Slice(ss, func(i, j int) bool {
		if !ss[i].CreatedAt.Equal(ss[j].CreatedAt) {
			return ss[i].CreatedAt.Before(ss[j].CreatedAt)
		}
		return ss[i].ID < ss[j].ID
	})
}

// Started records that the agent runs the session.
func (r *Registry) Started(id string, now time.Time) (Session, error) {
	return r.move(id, Running, now, func(s *Session) { s.StartedAt = now })
}

// Exited records that the session's process ended by itself.
func (r *Registry) Exited(id string, exitCode int, now time.Time) (Session, error) {
	return r.move(id, Exited, now, func(s *Session) { s.ExitCode = &exitCode })
}

// Killed records that the session ended because the server killed it.
func (r *Registry) Killed(id string, exitCode int, now time.Time) (Session, error) {
	return r.move(id, Killed, now, func(s *Session) { s.ExitCode = &exitCode })
}

// Lost records that the session's agent no longer runs it.
func (r *Registry) Lost(id, reason string, now time.Time) (Session, error) {
	return r.move(id, Lost, now, func(s *Session) { s.Reason = reason })
}

// move is the only place a session changes state: it checks the table,
// applies set and keeps the name index to live sessions.
func (r *Registry) move(id string, to State, now time.Time, set func(*Session)) (Session, error) {
	rec, ok := r.byID[id]
	if !ok {
		return Session{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if !CanTransition(rec.s.State, to) {
		return rec.s.clone(), fmt.Errorf("%w: %s -> %s", ErrIllegalTransition, rec.s.State, to)
	}
	rec.s.State = to
	set(&rec.s)
	if to.Ended() {
		rec.s.EndedAt = now // StartedAt stays zero for a session that never ran
		r.dropName(rec.s)
	}
	return rec.s.clone(), nil
}

func (r *Registry) dropName(s Session) {
	names := r.byAgent[s.AgentID]
	if names[s.Name] == s.ID {
		delete(names, s.Name)
		if len(names) == 0 {
			delete(r.byAgent, s.AgentID)
		}
	}
}

// Forget removes an ended session and its viewers; retention is the
// caller's choice. A live session cannot be forgotten: it must end first.
func (r *Registry) Forget(id string) error {
	rec, ok := r.byID[id]
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if !rec.s.State.Ended() {
		return fmt.Errorf("%w: %s is %s", ErrNotEnded, id, rec.s.State)
	}
	delete(r.byID, id)
	return nil
}

// MaxCommandLineBytes bounds a session's command, arguments and environment:
// a session kept in tmux passes them on tmux's own command line, which
// refuses (after a long stall) what is much larger.
const MaxCommandLineBytes = 32 << 10

func commandLineBytes(spec Spec) int {
	n := len(spec.Command) + len(spec.Cwd)
	for _, a := range spec.Args {
		n += len(a) + 1
	}
	for k, v := range spec.Env {
		n += len(k) + len(v) + 2
	}
	return n
}

// live counts agentID's live sessions.
func (r *Registry) live(agentID string) int {
	return len(r.byAgent[agentID])
}
