package portsfake

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// taskID is the ids a task store takes: the file store names files by them.
var taskID = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,127}$`)

// TaskStore is a fake ports.TaskStore in memory. It keeps copies, so a
// caller changing a record after Put changes nothing stored. Reopen gives
// a new store over what it keeps.
type TaskStore struct{ kept *taskRecords }

type taskRecords struct {
	mu   sync.Mutex
	recs map[string]ports.TaskRecord
}

var _ ports.TaskStore = (*TaskStore)(nil)

// NewTaskStore returns a store holding recs.
func NewTaskStore(recs ...ports.TaskRecord) *TaskStore {
	s := &TaskStore{kept: &taskRecords{recs: map[string]ports.TaskRecord{}}}
	for _, r := range recs {
		s.kept.recs[r.ID] = r.Clone()
	}
	return s
}

// Reopen returns a new store over what this one kept.
func (s *TaskStore) Reopen() *TaskStore { return &TaskStore{kept: s.kept} }

func checkTaskID(id string) error {
	if !taskID.MatchString(id) || strings.Contains(id, "..") {
		return fmt.Errorf("%w: bad id %q", ports.ErrTaskNotFound, id)
	}
	return nil
}

// Put implements ports.TaskStore.
func (s *TaskStore) Put(ctx context.Context, r ports.TaskRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkTaskID(r.ID); err != nil {
		return err
	}
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	s.kept.recs[r.ID] = r.Clone()
	return nil
}

// Get implements ports.TaskStore.
func (s *TaskStore) Get(_ context.Context, id string) (ports.TaskRecord, error) {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	r, ok := s.kept.recs[id]
	if !ok {
		return ports.TaskRecord{}, fmt.Errorf("%w: %s", ports.ErrTaskNotFound, id)
	}
	return r.Clone(), nil
}

// List implements ports.TaskStore.
func (s *TaskStore) List(context.Context) ([]ports.TaskRecord, error) {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	out := make([]ports.TaskRecord, 0, len(s.kept.recs))
	for _, r := range s.kept.recs {
		out = append(out, r.Clone())
	}
	return out, nil
}

// Delete implements ports.TaskStore.
func (s *TaskStore) Delete(_ context.Context, id string) error {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	delete(s.kept.recs, id)
	return nil
}

// PoolStore is a fake ports.PoolStore in memory. Reopen gives a new store
// over what it keeps.
type PoolStore struct{ kept *pools }

type pools struct {
	mu     sync.Mutex
	pools  map[string]ports.Pool
	claims map[string]string
}

var _ ports.PoolStore = (*PoolStore)(nil)

// NewPoolStore returns an empty store.
func NewPoolStore() *PoolStore {
	return &PoolStore{kept: &pools{pools: map[string]ports.Pool{}, claims: map[string]string{}}}
}

// Reopen returns a new store over what this one kept.
func (s *PoolStore) Reopen() *PoolStore { return &PoolStore{kept: s.kept} }

// Pools implements ports.PoolStore: by name.
func (s *PoolStore) Pools(context.Context) ([]ports.Pool, error) {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	out := slices.Collect(maps.Values(s.kept.pools))
	slices.SortFunc(out, func(a, b ports.Pool) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// PutPool implements ports.PoolStore.
func (s *PoolStore) PutPool(_ context.Context, p ports.Pool) error {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	s.kept.pools[p.Name] = p
	return nil
}

// DeletePool implements ports.PoolStore.
func (s *PoolStore) DeletePool(_ context.Context, name string) error {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	delete(s.kept.pools, name)
	return nil
}

// Claims implements ports.PoolStore.
func (s *PoolStore) Claims(context.Context) (map[string]string, error) {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	return maps.Clone(s.kept.claims), nil
}

// PutClaim implements ports.PoolStore.
func (s *PoolStore) PutClaim(_ context.Context, member, env string) error {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	s.kept.claims[member] = env
	return nil
}

// DeleteClaim implements ports.PoolStore.
func (s *PoolStore) DeleteClaim(_ context.Context, member string) error {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	delete(s.kept.claims, member)
	return nil
}
