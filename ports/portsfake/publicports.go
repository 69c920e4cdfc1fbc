package portsfake

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// PublicPorts is a fake ports.PublicPorts in memory, with the file store's
// rules: expired marks are dropped on every write (by the wall clock, or
// the Now given), at most ports.MaxPublicPortsPerEnvironment live marks per
// environment. Reopen gives a new store over what it keeps.
type PublicPorts struct {
	kept *publicMarks
	// Now is the time of a write (nil: the wall clock).
	Now func() time.Time
}

type publicMarks struct {
	mu    sync.Mutex
	marks map[string]map[uint16]time.Time
}

var _ ports.PublicPorts = (*PublicPorts)(nil)

// NewPublicPorts returns an empty store.
func NewPublicPorts() *PublicPorts {
	return &PublicPorts{kept: &publicMarks{marks: map[string]map[uint16]time.Time{}}}
}

// Reopen returns a new store over what this one kept.
func (s *PublicPorts) Reopen() *PublicPorts { return &PublicPorts{kept: s.kept, Now: s.Now} }

func (s *PublicPorts) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// dropExpired removes the marks ended at now; the caller holds the lock.
func (s *PublicPorts) dropExpired(now time.Time) {
	for env, ms := range s.kept.marks {
		for p, until := range ms {
			if !now.Before(until) {
				delete(ms, p)
			}
		}
		if len(ms) == 0 {
			delete(s.kept.marks, env)
		}
	}
}

// SetPublic implements ports.PublicPorts.
func (s *PublicPorts) SetPublic(env string, port uint16, until time.Time) error {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	s.dropExpired(s.now())
	ms := s.kept.marks[env]
	if _, renew := ms[port]; !renew && len(ms) >= ports.MaxPublicPortsPerEnvironment {
		return ports.ErrTooManyPublicPorts
	}
	if ms == nil {
		ms = map[uint16]time.Time{}
		s.kept.marks[env] = ms
	}
	ms[port] = until
	s.dropExpired(s.now())
	return nil
}

// SetPrivate implements ports.PublicPorts.
func (s *PublicPorts) SetPrivate(env string, port uint16) error {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	delete(s.kept.marks[env], port)
	s.dropExpired(s.now())
	return nil
}

// PublicUntil implements ports.PublicPorts.
func (s *PublicPorts) PublicUntil(env string, port uint16, now time.Time) (time.Time, bool) {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	until, ok := s.kept.marks[env][port]
	if !ok || !now.Before(until) {
		return time.Time{}, false
	}
	return until, true
}

// Public implements ports.PublicPorts: by port.
func (s *PublicPorts) Public(env string, now time.Time) []ports.PublicPort {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	var out []ports.PublicPort
	ms := s.kept.marks[env]
	for _, p := range slices.Sorted(maps.Keys(ms)) {
		if now.Before(ms[p]) {
			out = append(out, ports.PublicPort{Environment: env, Port: p, Until: ms[p]})
		}
	}
	return out
}

// ForgetEnvironment implements ports.PublicPorts.
func (s *PublicPorts) ForgetEnvironment(env string) error {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	delete(s.kept.marks, env)
	s.dropExpired(s.now())
	return nil
}
