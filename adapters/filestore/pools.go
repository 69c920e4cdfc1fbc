package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// PoolStore keeps the pools and the claims on their members in one small
// file, <dir>/pools.json, rewritten atomically on every change: there are
// a few pools and a claim per environment taken from one.
type PoolStore struct {
	path string
	mu   sync.Mutex
}

var _ ports.PoolStore = (*PoolStore)(nil)

type poolFile struct {
	Pools  map[string]ports.Pool `json:"pools"`
	Claims map[string]string     `json:"claims"`
}

// NewPoolStore opens (making its directory) the pool store in dir.
func NewPoolStore(dir string) (*PoolStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &PoolStore{path: filepath.Join(dir, "pools.json")}
	if _, err := s.read(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *PoolStore) read() (poolFile, error) {
	f := poolFile{Pools: map[string]ports.Pool{}, Claims: map[string]string{}}
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	// Refusing a damaged file (rather than starting empty) keeps the claims
	// that say which environments are whose.
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%w: %s does not parse: %v", ports.ErrStoreUnavailable, s.path, err)
	}
	if f.Pools == nil {
		f.Pools = map[string]ports.Pool{}
	}
	if f.Claims == nil {
		f.Claims = map[string]string{}
	}
	return f, nil
}

func (s *PoolStore) change(ctx context.Context, edit func(*poolFile)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := s.read()
	if err != nil {
		return err
	}
	edit(&f)
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if err := fsatomic.WriteFile(s.path, b, 0o600); err != nil {
		return fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	return nil
}

// Pools implements ports.PoolStore, by name.
func (s *PoolStore) Pools(context.Context) ([]ports.Pool, error) {
	s.mu.Lock()
	f, err := s.read()
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out := make([]ports.Pool, 0, len(f.Pools))
	for _, p := range f.Pools {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// PutPool implements ports.PoolStore.
func (s *PoolStore) PutPool(ctx context.Context, p ports.Pool) error {
	return s.change(ctx, func(f *poolFile) { f.Pools[p.Name] = p })
}

// DeletePool implements ports.PoolStore.
func (s *PoolStore) DeletePool(ctx context.Context, name string) error {
	return s.change(ctx, func(f *poolFile) { delete(f.Pools, name) })
}

// Claims implements ports.PoolStore.
func (s *PoolStore) Claims(context.Context) (map[string]string, error) {
	s.mu.Lock()
	f, err := s.read()
	s.mu.Unlock()
	return f.Claims, err
}

// PutClaim implements ports.PoolStore.
func (s *PoolStore) PutClaim(ctx context.Context, member, environment string) error {
	return s.change(ctx, func(f *poolFile) { f.Claims[member] = environment })
}

// DeleteClaim implements ports.PoolStore.
func (s *PoolStore) DeleteClaim(ctx context.Context, member string) error {
	return s.change(ctx, func(f *poolFile) { delete(f.Claims, member) })
}
