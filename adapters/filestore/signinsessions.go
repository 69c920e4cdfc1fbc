package filestore

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// SignInSessions keeps the dashboard's sign-in sessions in one small file,
// <dir>/signin-sessions.json (mode 0600), rewritten atomically on every change and
// read once at open: every request with the cookie asks it, from memory.
// The file holds the hash of each session's id, never the id. Expired
// sessions are dropped on every write, and past ports.MaxSignInSessions
// the oldest go.
type SignInSessions struct {
	path string
	// now is the time of a write, which drops the sessions ended by then.
	now func() time.Time
	// max is the most sessions kept (ports.MaxSignInSessions).
	max      int
	mu       sync.RWMutex
	sessions map[string]ports.SignInSession
}

var _ ports.SignInSessions = (*SignInSessions)(nil)

type signInSessionsFile struct {
	Sessions []signInSessionRecord `json:"sessions"`
}

type signInSessionRecord struct {
	IDHash  string    `json:"id_sha256"`
	TokenID string    `json:"token_id"`
	Binding string    `json:"binding"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
}

// NewSignInSessions opens (making its directory) the sessions kept in dir.
func NewSignInSessions(dir string) (*SignInSessions, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &SignInSessions{path: filepath.Join(dir, "signin-sessions.json"), now: time.Now, max: ports.MaxSignInSessions, sessions: map[string]ports.SignInSession{}}
	b, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	var f signInSessionsFile
	// A damaged file is refused rather than read as empty, like the other
	// stores: the operator decides (deleting it signs every browser out).
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%w: %s does not parse: %v", ports.ErrStoreUnavailable, s.path, err)
	}
	for _, r := range f.Sessions {
		if r.IDHash == "" {
			continue
		}
		s.sessions[r.IDHash] = ports.SignInSession{IDHash: r.IDHash, TokenID: r.TokenID, Binding: r.Binding, Created: r.Created, Expires: r.Expires}
	}
	return s, nil
}

// change edits a copy of the sessions, drops the ended ones and the oldest
// past the bound, writes the file and only then makes the copy current: a
// failed write changes nothing.
func (s *SignInSessions) change(edit func(m map[string]ports.SignInSession)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := maps.Clone(s.sessions)
	edit(next)
	now := s.now()
	for id, ss := range next {
		if !now.Before(ss.Expires) {
			delete(next, id)
		}
	}
	list := slices.Collect(maps.Values(next))
	// Newest first: what is past the bound is the oldest.
	slices.SortFunc(list, func(a, b ports.SignInSession) int {
		return cmp.Or(b.Created.Compare(a.Created), cmp.Compare(a.IDHash, b.IDHash))
	})
	if len(list) > s.max {
		for _, old := range list[s.max:] {
			delete(next, old.IDHash)
		}
		list = list[:s.max]
	}
	f := signInSessionsFile{Sessions: make([]signInSessionRecord, 0, len(list))}
	for _, ss := range list {
		f.Sessions = append(f.Sessions, signInSessionRecord{IDHash: ss.IDHash, TokenID: ss.TokenID, Binding: ss.Binding, Created: ss.Created.UTC(), Expires: ss.Expires.UTC()})
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if err := fsatomic.WriteFile(s.path, b, 0o600); err != nil {
		return fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	s.sessions = next
	return nil
}

// Create implements ports.SignInSessions.
func (s *SignInSessions) Create(ss ports.SignInSession) error {
	if ss.IDHash == "" {
		return errors.New("filestore: a sign-in session needs its id hash")
	}
	return s.change(func(m map[string]ports.SignInSession) { m[ss.IDHash] = ss })
}

// Lookup implements ports.SignInSessions.
func (s *SignInSessions) Lookup(idHash string, now time.Time) (ports.SignInSession, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ss, ok := s.sessions[idHash]
	if !ok || !now.Before(ss.Expires) {
		return ports.SignInSession{}, false
	}
	return ss, true
}

// Delete implements ports.SignInSessions.
func (s *SignInSessions) Delete(idHash string) error {
	s.mu.RLock()
	_, ok := s.sessions[idHash]
	s.mu.RUnlock()
	if !ok {
		return nil
	}
	return s.change(func(m map[string]ports.SignInSession) { delete(m, idHash) })
}

// DeleteForToken implements ports.SignInSessions.
func (s *SignInSessions) DeleteForToken(tokenID string) error {
	return s.change(func(m map[string]ports.SignInSession) {
		for id, ss := range m {
			if ss.TokenID == tokenID {
				delete(m, id)
			}
		}
	})
}

// DeleteAll implements ports.SignInSessions.
func (s *SignInSessions) DeleteAll() error {
	return s.change(func(m map[string]ports.SignInSession) { clear(m) })
}
