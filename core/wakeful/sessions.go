package wakeful

import (
	"context"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Sessions is the session use case with its environment's use: creating a
// session wakes its agent's environment first (the use case looks its
// agent up before it starts anything, and a hibernated environment's agent
// may be away), and a viewer that joins a session wakes it and holds it
// (ports.UseViewer) until the viewer leaves or the session ends. It serves
// the REST API and the client WebSocket alike.
type Sessions struct {
	*session.Service
	use ports.EnvironmentUse

	mu    sync.Mutex
	holds map[viewing]*viewerHold
}

// viewing is one viewer of one session.
type viewing struct{ session, viewer string }

// viewerHold is the hold of one viewing; stop ends its watch of the
// session's end.
type viewerHold struct {
	release func()
	stop    chan struct{}
}

// NewSessions decorates s.
func NewSessions(s *session.Service, use ports.EnvironmentUse) *Sessions {
	return &Sessions{Service: s, use: use, holds: map[viewing]*viewerHold{}}
}

// Create wakes spec's agent's environment, then creates the session.
func (s *Sessions) Create(ctx context.Context, spec session.Spec, cols, rows uint16) (session.Session, error) {
	release, err := s.use.Use(ctx, spec.AgentID, ports.UseSession)
	if err != nil {
		return session.Session{}, err
	}
	defer release()
	return s.Service.Create(ctx, spec, cols, rows)
}

// StartShell wakes agentID's environment, then opens its shell.
func (s *Sessions) StartShell(ctx context.Context, agentID, name string, cols, rows uint16) (session.Session, error) {
	release, err := s.use.Use(ctx, agentID, ports.UseSession)
	if err != nil {
		return session.Session{}, err
	}
	defer release()
	return s.Service.StartShell(ctx, agentID, name, cols, rows)
}

// Join wakes the session's environment and holds it for the viewer, then
// joins. A join that fails holds nothing (a viewer already joined keeps its
// hold).
func (s *Sessions) Join(id, viewerID string, want session.Role) (session.Role, error) {
	undo, err := s.hold(id, viewerID)
	if err != nil {
		return "", err
	}
	role, err := s.Service.Join(id, viewerID, want)
	if err != nil {
		undo()
	}
	return role, err
}

// TakeControl is Join as the controller, taking control from whoever has it.
func (s *Sessions) TakeControl(id, viewerID string) (session.Role, string, error) {
	undo, err := s.hold(id, viewerID)
	if err != nil {
		return "", "", err
	}
	role, prev, err := s.Service.TakeControl(id, viewerID)
	if err != nil {
		undo()
	}
	return role, prev, err
}

// Leave ends the viewer's hold.
func (s *Sessions) Leave(id, viewerID string) {
	s.Service.Leave(id, viewerID)
	s.drop(viewing{id, viewerID})
}

// Held counts the viewers holding environments now (for tests and
// metrics).
func (s *Sessions) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.holds)
}

// hold makes sure viewerID holds the environment of session id; undo
// drops a hold this call made (nothing when the viewer held it already).
// A session this server does not know holds nothing: the join that
// follows refuses it.
func (s *Sessions) hold(id, viewerID string) (undo func(), err error) {
	key := viewing{id, viewerID}
	s.mu.Lock()
	_, held := s.holds[key]
	s.mu.Unlock()
	sess, ok := s.Service.Get(id)
	if held || !ok {
		return func() {}, nil
	}
	// Join carries no context: the wake is bounded by the environment
	// use case's own bound (its WakeTimeout), and every caller of a wake
	// under way waits for that same wake.
	release, err := s.use.Use(context.Background(), sess.AgentID, ports.UseViewer)
	if err != nil {
		return nil, err
	}
	h := &viewerHold{release: release, stop: make(chan struct{})}
	s.mu.Lock()
	if _, dup := s.holds[key]; dup { // a join of the same viewer meanwhile
		s.mu.Unlock()
		release()
		return func() {}, nil
	}
	s.holds[key] = h
	s.mu.Unlock()
	// A session that ends is no reason to stay awake, even with a viewer
	// still on its last screen.
	if exited := s.Service.Exited(id); exited != nil {
		go func() {
			select {
			case <-exited:
				s.dropHold(key, h)
			case <-h.stop:
			}
		}()
	}
	return func() { s.dropHold(key, h) }, nil
}

// drop ends the hold of key, if any.
func (s *Sessions) drop(key viewing) {
	s.mu.Lock()
	h := s.holds[key]
	s.mu.Unlock()
	if h != nil {
		s.dropHold(key, h)
	}
}

// dropHold ends h, the hold of key, once.
func (s *Sessions) dropHold(key viewing, h *viewerHold) {
	s.mu.Lock()
	if s.holds[key] != h {
		s.mu.Unlock()
		return
	}
	delete(s.holds, key)
	s.mu.Unlock()
	close(h.stop)
	h.release()
}
