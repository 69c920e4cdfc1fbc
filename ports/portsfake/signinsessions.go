package portsfake

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// SignInSessions is a fake ports.SignInSessions in memory, with the file
// store's rules: expired sessions are dropped on every write (by the wall
// clock, or the Now given), at most ports.MaxSignInSessions, the oldest
// dropped first. Reopen gives a new store over what it keeps.
type SignInSessions struct {
	kept *signInKept
	// Now is the time of a write (nil: the wall clock).
	Now func() time.Time
}

type signInKept struct {
	mu       sync.Mutex
	sessions map[string]ports.SignInSession
}

var _ ports.SignInSessions = (*SignInSessions)(nil)

// NewSignInSessions returns an empty store.
func NewSignInSessions() *SignInSessions {
	return &SignInSessions{kept: &signInKept{sessions: map[string]ports.SignInSession{}}}
}

// Reopen returns a new store over what this one kept.
func (s *SignInSessions) Reopen() *SignInSessions { return &SignInSessions{kept: s.kept, Now: s.Now} }

// tidy drops the ended sessions and the oldest past the bound; the caller
// holds the lock.
func (s *SignInSessions) tidy() {
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	m := s.kept.sessions
	for id, ss := range m {
		if !now.Before(ss.Expires) {
			delete(m, id)
		}
	}
	if len(m) <= ports.MaxSignInSessions {
		return
	}
	list := slices.Collect(maps.Values(m))
	slices.SortFunc(list, func(a, b ports.SignInSession) int {
		return cmp.Or(b.Created.Compare(a.Created), cmp.Compare(a.IDHash, b.IDHash))
	})
	for _, old := range list[ports.MaxSignInSessions:] {
		delete(m, old.IDHash)
	}
}

// Create implements ports.SignInSessions.
func (s *SignInSessions) Create(ss ports.SignInSession) error {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	s.kept.sessions[ss.IDHash] = ss
	s.tidy()
	return nil
}

// Lookup implements ports.SignInSessions.
func (s *SignInSessions) Lookup(idHash string, now time.Time) (ports.SignInSession, bool) {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	ss, ok := s.kept.sessions[idHash]
	if !ok || !now.Before(ss.Expires) {
		return ports.SignInSession{}, false
	}
	return ss, true
}

// Delete implements ports.SignInSessions.
func (s *SignInSessions) Delete(idHash string) error {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	delete(s.kept.sessions, idHash)
	s.tidy()
	return nil
}

// DeleteForToken implements ports.SignInSessions.
func (s *SignInSessions) DeleteForToken(tokenID string) error {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	for id, ss := range s.kept.sessions {
		if ss.TokenID == tokenID {
			delete(s.kept.sessions, id)
		}
	}
	s.tidy()
	return nil
}

// DeleteAll implements ports.SignInSessions.
func (s *SignInSessions) DeleteAll() error {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	clear(s.kept.sessions)
	return nil
}
