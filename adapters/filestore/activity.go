package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// ActivityStore keeps the environments' last activity, and what their
// records say of their sleep, in one small file, <dir>/activity.json,
// rewritten atomically on each batch the environment use case writes
// (every few seconds at most, and at a hibernation or a wake): one entry
// per environment.
type ActivityStore struct {
	path string
	mu   sync.Mutex
}

var _ ports.ActivityStore = (*ActivityStore)(nil)

// NewActivityStore opens (making its directory) the activity store in dir.
func NewActivityStore(dir string) (*ActivityStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &ActivityStore{path: filepath.Join(dir, "activity.json")}, nil
}

func (s *ActivityStore) read() (map[string]ports.Activity, error) {
	acts := map[string]ports.Activity{}
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return acts, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	if err := json.Unmarshal(b, &acts); err != nil {
		return nil, fmt.Errorf("%w: %s does not parse: %v", ports.ErrStoreUnavailable, s.path, err)
	}
	return acts, nil
}

func (s *ActivityStore) change(ctx context.Context, edit func(map[string]ports.Activity)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	acts, err := s.read()
	if err != nil {
		// A damaged file holds only times: starting afresh loses less
		// than never saving again.
		acts = map[string]ports.Activity{}
	}
	edit(acts)
	b, err := json.Marshal(acts)
	if err != nil {
		return err
	}
	if err := fsatomic.WriteFile(s.path, b, 0o600); err != nil {
		return fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	return nil
}

// Activities implements ports.ActivityStore.
func (s *ActivityStore) Activities(context.Context) (map[string]ports.Activity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.read()
}

// PutActivities implements ports.ActivityStore.
func (s *ActivityStore) PutActivities(ctx context.Context, acts map[string]ports.Activity) error {
	return s.change(ctx, func(all map[string]ports.Activity) { maps.Copy(all, acts) })
}

// DeleteActivity implements ports.ActivityStore.
func (s *ActivityStore) DeleteActivity(ctx context.Context, name string) error {
	return s.change(ctx, func(all map[string]ports.Activity) { delete(all, name) })
}
