package portsfake

import (
	"context"
	"slices"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// MissionStore is a fake ports.MissionStore in memory. It keeps copies, and
// never archives by itself: a test moves a mission to the archive with
// Archive, as retention would. Reopen gives a new store over what it keeps.
type MissionStore struct {
	kept  *missions
	onPut func(ports.Mission)

	mu     sync.Mutex
	closed bool
}

type missions struct {
	mu          sync.Mutex
	live        map[string]ports.Mission
	archived    map[string]ports.Mission
	puts        []ports.Mission
	putCalls    int
	putErr      error
	loadErr     error
	archivedErr error
	beforePut   func([]ports.Mission)
}

var _ ports.MissionStore = (*MissionStore)(nil)

// MissionStoreOption shapes a MissionStore.
type MissionStoreOption func(*MissionStore)

// OnPut passes every mission a Put stores to f, in order, while the store
// is held (f must not call it).
func OnPut(f func(ports.Mission)) MissionStoreOption { return func(s *MissionStore) { s.onPut = f } }

// NewMissionStore returns an empty store.
func NewMissionStore(opts ...MissionStoreOption) *MissionStore {
	s := &MissionStore{kept: &missions{live: map[string]ports.Mission{}, archived: map[string]ports.Mission{}}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Reopen returns a new store over what this one kept, with its options.
func (s *MissionStore) Reopen() *MissionStore { return &MissionStore{kept: s.kept, onPut: s.onPut} }

// Load implements ports.MissionStore: by CreatedAt; it fails with the
// error SetLoadErr gave.
func (s *MissionStore) Load() ([]ports.Mission, error) {
	k := s.kept
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.loadErr != nil {
		return nil, k.loadErr
	}
	out := make([]ports.Mission, 0, len(k.live))
	for _, m := range k.live {
		out = append(out, m.Clone())
	}
	slices.SortFunc(out, func(a, b ports.Mission) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// Put implements ports.MissionStore. The BeforePut hook runs first,
// outside the store's lock (it may block); then it fails with the error
// SetPutErr gave, if any.
func (s *MissionStore) Put(_ context.Context, ms ...ports.Mission) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ports.ErrStoreUnavailable
	}
	k := s.kept
	k.mu.Lock()
	before, err := k.beforePut, k.putErr
	k.putCalls++
	k.mu.Unlock()
	if before != nil {
		before(ms)
	}
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range ms {
		m = m.Clone()
		k.live[m.ID] = m
		k.puts = append(k.puts, m)
		if s.onPut != nil {
			s.onPut(m)
		}
	}
	return nil
}

// Archived implements ports.MissionStore; it fails with the error
// SetArchivedErr gave.
func (s *MissionStore) Archived(id string) (ports.Mission, bool, error) {
	k := s.kept
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.archivedErr != nil {
		return ports.Mission{}, false, k.archivedErr
	}
	m, ok := k.archived[id]
	return m.Clone(), ok, nil
}

// Close implements ports.MissionStore: later Puts fail with
// ErrStoreUnavailable.
func (s *MissionStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// SetPutErr makes every later Put fail with err (nil: succeed).
func (s *MissionStore) SetPutErr(err error) { s.set(func(k *missions) { k.putErr = err }) }

// SetLoadErr makes every later Load fail with err (nil: succeed).
func (s *MissionStore) SetLoadErr(err error) { s.set(func(k *missions) { k.loadErr = err }) }

// SetArchivedErr makes every later Archived fail with err (nil: succeed).
func (s *MissionStore) SetArchivedErr(err error) { s.set(func(k *missions) { k.archivedErr = err }) }

// SetBeforePut sets a hook that runs at the start of every Put, outside
// the store's lock (nil removes it).
func (s *MissionStore) SetBeforePut(f func([]ports.Mission)) {
	s.set(func(k *missions) { k.beforePut = f })
}

func (s *MissionStore) set(f func(*missions)) {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	f(s.kept)
}

// Seed stores missions as if an earlier run had put them (no Put is
// counted or seen).
func (s *MissionStore) Seed(ms ...ports.Mission) {
	s.set(func(k *missions) {
		for _, m := range ms {
			k.live[m.ID] = m.Clone()
		}
	})
}

// Archive moves a mission to the archive, as retention does.
func (s *MissionStore) Archive(id string) {
	s.set(func(k *missions) {
		if m, ok := k.live[id]; ok {
			k.archived[id] = m
			delete(k.live, id)
		}
	})
}

// PutArchived stores m in the archive only.
func (s *MissionStore) PutArchived(m ports.Mission) {
	s.set(func(k *missions) { k.archived[m.ID] = m.Clone() })
}

// Get returns the live mission id.
func (s *MissionStore) Get(id string) (ports.Mission, bool) {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	m, ok := s.kept.live[id]
	return m.Clone(), ok
}

// Puts returns every mission of every successful Put, in order.
func (s *MissionStore) Puts() []ports.Mission {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	out := make([]ports.Mission, len(s.kept.puts))
	for i, m := range s.kept.puts {
		out[i] = m.Clone()
	}
	return out
}

// PutCalls is how many times Put was called, failed ones included.
func (s *MissionStore) PutCalls() int {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	return s.kept.putCalls
}
