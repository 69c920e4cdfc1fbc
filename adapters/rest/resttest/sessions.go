package resttest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/claudefeed"
	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// Sessions is a fake of the session use case (rest.Sessions). Sessions it
// creates stay running until the test ends them with Exit; their output is
// what the test appends to the SessionLog.
type Sessions struct {
	mu        sync.Mutex
	now       time.Time
	next      int
	order     []string
	sessions  map[string]session.Session
	exited    map[string]chan struct{}
	activity  map[string][]claudefeed.Event
	summary   map[string]claudefeed.Summary
	createErr error
	specs     []session.Spec
	// Log receives output the test writes with Output.
	Log *SessionLog
	// OnCreate, when set, runs (in its own goroutine) after each Create.
	OnCreate func(s session.Session)
}

// NewSessions returns an empty fake with its own session log.
func NewSessions(log *SessionLog) *Sessions {
	return &Sessions{
		now: time.Date(2026, 5, 9, 7, 13, 22, 0, time.UTC), sessions: map[string]session.Session{},
		exited: map[string]chan struct{}{}, activity: map[string][]claudefeed.Event{},
		summary: map[string]claudefeed.Summary{}, Log: log,
	}
}

// SetCreateError makes every Create fail with err.
func (f *Sessions) SetCreateError(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.createErr = err
}

// Specs returns the specs Create was called with.
func (f *Sessions) Specs() []session.Spec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]session.Spec(nil), f.specs...)
}

// Create implements rest.Sessions.
func (f *Sessions) Create(_ context.Context, spec session.Spec, _, _ uint16) (session.Session, error) {
	f.mu.Lock()
	f.specs = append(f.specs, spec)
	if f.createErr != nil {
		err := f.createErr
		f.mu.Unlock()
		return session.Session{}, err
	}
	if spec.AgentID == "missing" {
		f.mu.Unlock()
		return session.Session{}, ports.ErrAgentNotFound
	}
	f.next++
	id := fmt.Sprintf("s%d", f.next)
	if spec.Name == "" {
		spec.Name = fmt.Sprintf("%s-%d", spec.Type, f.next)
	}
	for _, o := range f.sessions {
		if o.AgentID == spec.AgentID && o.Name == spec.Name && o.State.Live() {
			f.mu.Unlock()
			return session.Session{}, session.ErrNameTaken
		}
	}
	s := session.Session{ID: id, AgentID: spec.AgentID, Name: spec.Name, Type: spec.Type, Command: spec.Command,
		Args: spec.Args, Cwd: spec.Cwd, Env: spec.Env, PTY: true, State: session.Running, CreatedAt: f.now, StartedAt: f.now}
	f.sessions[id] = s
	f.order = append(f.order, id)
	f.exited[id] = make(chan struct{})
	on := f.OnCreate
	f.mu.Unlock()
	if on != nil {
		go on(s)
	}
	return s, nil
}

// Add records a session as is (state and all), for list and get tests.
func (f *Sessions) Add(s session.Session) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions[s.ID] = s
	f.order = append(f.order, s.ID)
	ch := make(chan struct{})
	if s.State.Ended() {
		close(ch)
	}
	f.exited[s.ID] = ch
}

// Output appends data to the session's log.
func (f *Sessions) Output(id string, data string) {
	if _, err := f.Log.Append(id, []byte(data)); err != nil {
		panic(err)
	}
}

// Exit ends a running session with the exit code.
func (f *Sessions) Exit(id string, code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sessions[id]
	s.State, s.ExitCode, s.EndedAt = session.Exited, &code, f.now.Add(time.Second)
	f.sessions[id] = s
	close(f.exited[id])
}

// SetActivity sets the feed of a (headless) session.
func (f *Sessions) SetActivity(id string, evs []claudefeed.Event, sum claudefeed.Summary) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.activity[id], f.summary[id] = evs, sum
}

// List implements rest.Sessions.
func (f *Sessions) List(agentID string) []session.Session {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []session.Session
	for _, id := range f.order {
		if s := f.sessions[id]; agentID == "" || s.AgentID == agentID {
			out = append(out, s)
		}
	}
	return out
}

// Get implements rest.Sessions.
func (f *Sessions) Get(id string) (session.Session, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sessions[id]
	return s, ok
}

// Exited implements rest.Sessions.
func (f *Sessions) Exited(id string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.exited[id]
}

// Activity implements rest.Sessions.
func (f *Sessions) Activity(id string, after int) ([]claudefeed.Event, claudefeed.Summary, int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sessions[id]
	if !ok || s.Type != ports.SessionHeadless {
		return nil, claudefeed.Summary{}, 0, false
	}
	var out []claudefeed.Event
	for _, e := range f.activity[id] {
		if e.Seq > after {
			out = append(out, e)
		}
	}
	return out, f.summary[id], 0, true
}

// SessionLog is an in-memory ports.SessionLog bounded to a number of bytes
// per session (0: unbounded); it drops the oldest bytes beyond.
type SessionLog = portsfake.SessionLog

// NewSessionLog returns a log holding at most max bytes per session.
func NewSessionLog(max int) *SessionLog { return portsfake.NewSessionLog(max) }

// Kill implements rest.Sessions: a live session ends killed (137).
func (f *Sessions) Kill(_ context.Context, id string) error {
	if s, ok := f.Get(id); !ok || s.State.Ended() {
		return session.ErrNotFound
	}
	f.Exit(id, 137)
	return nil
}

// Viewers implements rest.Sessions: nobody watches the fake's sessions.
func (f *Sessions) Viewers(string) []session.Viewer { return nil }
