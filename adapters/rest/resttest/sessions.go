package resttest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/claudefeed"
	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
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

// SessionLog is an in-memory ports.SessionLog bounded to Max bytes per
// session (0: unbounded); it drops the oldest bytes beyond.
type SessionLog struct {
	mu     sync.Mutex
	max    int
	logs   map[string]*memLog
	closed bool
}

type memLog struct {
	first uint64
	data  []byte
	// grew is closed and replaced on every append.
	grew chan struct{}
}

var _ ports.SessionLog = (*SessionLog)(nil)

// NewSessionLog returns a log holding at most max bytes per session.
func NewSessionLog(max int) *SessionLog {
	return &SessionLog{max: max, logs: map[string]*memLog{}}
}

func (l *SessionLog) get(id string) *memLog {
	m := l.logs[id]
	if m == nil {
		m = &memLog{grew: make(chan struct{})}
		l.logs[id] = m
	}
	return m
}

// Append implements ports.SessionLog.
func (l *SessionLog) Append(id string, data []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ports.ErrSessionLogClosed
	}
	m := l.get(id)
	off := m.first + uint64(len(m.data))
	m.data = append(m.data, data...)
	if l.max > 0 && len(m.data) > l.max {
		drop := len(m.data) - l.max
		m.first += uint64(drop) //nolint:gosec // drop is a slice length
		m.data = append([]byte(nil), m.data[drop:]...)
	}
	if len(data) > 0 {
		close(m.grew)
		m.grew = make(chan struct{})
	}
	return off, nil
}

// ReadFrom implements ports.SessionLog.
func (l *SessionLog) ReadFrom(id string, offset uint64, max int) ([]byte, uint64, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, 0, false, ports.ErrSessionLogClosed
	}
	m := l.get(id)
	end := m.first + uint64(len(m.data))
	if offset > end {
		return nil, 0, false, ports.ErrOffsetBeyondEnd
	}
	gap := false
	if offset < m.first {
		offset, gap = m.first, true
	}
	if max <= 0 {
		return nil, offset, gap, nil
	}
	b := m.data[offset-m.first:]
	if len(b) > max {
		b = b[:max]
	}
	return append([]byte(nil), b...), offset, gap, nil
}

// Bounds implements ports.SessionLog.
func (l *SessionLog) Bounds(id string) (uint64, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.get(id)
	return m.first, m.first + uint64(len(m.data))
}

// End implements ports.SessionLog.
func (l *SessionLog) End(id string) uint64 {
	_, end := l.Bounds(id)
	return end
}

// Wait implements ports.SessionLog.
func (l *SessionLog) Wait(ctx context.Context, id string, offset uint64) error {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return ports.ErrSessionLogClosed
		}
		m := l.get(id)
		if m.first+uint64(len(m.data)) > offset {
			l.mu.Unlock()
			return nil
		}
		ch := m.grew
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Release implements ports.SessionLog: nothing is held open here.
func (l *SessionLog) Release(string) error { return nil }

// Delete implements ports.SessionLog.
func (l *SessionLog) Delete(id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.logs, id)
	return nil
}

// Close implements ports.SessionLog.
func (l *SessionLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return nil
}

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
