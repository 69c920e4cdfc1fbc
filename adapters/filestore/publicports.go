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

// PublicPorts keeps the environments' public preview marks in one small
// file, <dir>/public-ports.json, rewritten atomically on every change and
// read once at open: a preview request asks it on every request, from
// memory. Marks that have ended are dropped on every write, and an
// environment holds at most ports.MaxPublicPortsPerEnvironment live ones.
type PublicPorts struct {
	path string
	// now is the time of a write, which drops the marks ended by then.
	now   func() time.Time
	mu    sync.RWMutex
	marks map[string]map[uint16]time.Time
}

var _ ports.PublicPorts = (*PublicPorts)(nil)

// publicPortsFile is the file's shape.
type publicPortsFile struct {
	Marks []publicMark `json:"marks"`
}

type publicMark struct {
	Environment string    `json:"environment"`
	Port        uint16    `json:"port"`
	Until       time.Time `json:"until"`
}

// NewPublicPorts opens (making its directory) the public marks in dir.
func NewPublicPorts(dir string) (*PublicPorts, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &PublicPorts{path: filepath.Join(dir, "public-ports.json"), now: time.Now, marks: map[string]map[uint16]time.Time{}}
	b, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	var f publicPortsFile
	// A damaged file is refused rather than read as empty: starting with
	// no marks would be safe (private), but it would lose them silently.
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%w: %s does not parse: %v", ports.ErrStoreUnavailable, s.path, err)
	}
	for _, m := range f.Marks {
		if m.Environment == "" || m.Port == 0 {
			continue
		}
		if s.marks[m.Environment] == nil {
			s.marks[m.Environment] = map[uint16]time.Time{}
		}
		s.marks[m.Environment][m.Port] = m.Until
	}
	return s, nil
}

// change edits a copy of the marks, drops the ended ones, writes the file
// and only then makes the copy current: a failed write changes nothing.
func (s *PublicPorts) change(edit func(marks map[string]map[uint16]time.Time) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]map[uint16]time.Time, len(s.marks))
	for env, ms := range s.marks {
		next[env] = maps.Clone(ms)
	}
	if err := edit(next); err != nil {
		return err
	}
	now := s.now()
	var f publicPortsFile
	for env, ms := range next {
		for p, until := range ms {
			if !now.Before(until) {
				delete(ms, p)
				continue
			}
			f.Marks = append(f.Marks, publicMark{Environment: env, Port: p, Until: until.UTC()})
		}
		if len(ms) == 0 {
			delete(next, env)
		}
	}
	slices.SortFunc(f.Marks, func(a, b publicMark) int {
		return cmp.Or(cmp.Compare(a.Environment, b.Environment), cmp.Compare(a.Port, b.Port))
	})
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if err := fsatomic.WriteFile(s.path, b, 0o600); err != nil {
		return fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	s.marks = next
	return nil
}

// SetPublic implements ports.PublicPorts.
func (s *PublicPorts) SetPublic(env string, port uint16, until time.Time) error {
	return s.change(func(marks map[string]map[uint16]time.Time) error {
		ms := marks[env]
		if _, renew := ms[port]; !renew {
			now, live := s.now(), 0
			for _, u := range ms {
				if now.Before(u) {
					live++
				}
			}
			if live >= ports.MaxPublicPortsPerEnvironment {
				return fmt.Errorf("%w: %q has %d public ports, the most it may (make one private first)",
					ports.ErrTooManyPublicPorts, env, live)
			}
		}
		if ms == nil {
			ms = map[uint16]time.Time{}
			marks[env] = ms
		}
		ms[port] = until.UTC()
		return nil
	})
}

// SetPrivate implements ports.PublicPorts.
func (s *PublicPorts) SetPrivate(env string, port uint16) error {
	s.mu.RLock()
	_, ok := s.marks[env][port]
	s.mu.RUnlock()
	if !ok {
		return nil // nothing to write
	}
	return s.change(func(marks map[string]map[uint16]time.Time) error {
		delete(marks[env], port)
		return nil
	})
}

// PublicUntil implements ports.PublicPorts.
func (s *PublicPorts) PublicUntil(env string, port uint16, now time.Time) (time.Time, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	until, ok := s.marks[env][port]
	if !ok || !now.Before(until) {
		return time.Time{}, false
	}
	return until, true
}

// Public implements ports.PublicPorts: by port.
func (s *PublicPorts) Public(env string, now time.Time) []ports.PublicPort {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ms := s.marks[env]
	var out []ports.PublicPort
	for _, p := range slices.Sorted(maps.Keys(ms)) {
		if now.Before(ms[p]) {
			out = append(out, ports.PublicPort{Environment: env, Port: p, Until: ms[p]})
		}
	}
	return out
}

// ForgetEnvironment implements ports.PublicPorts.
func (s *PublicPorts) ForgetEnvironment(env string) error {
	s.mu.RLock()
	_, ok := s.marks[env]
	s.mu.RUnlock()
	if !ok {
		return nil
	}
	return s.change(func(marks map[string]map[uint16]time.Time) error {
		delete(marks, env)
		return nil
	})
}
