package filestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A damaged file is refused, not replaced: its claims say which
// environments belong to whom.
func TestPoolStoreRefusesADamagedFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pools.json")
	if err := os.WriteFile(path, []byte(`{"claims":{"m":"x"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewPoolStore(dir); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("open: %v", err)
	}
	s := &PoolStore{path: path}
	if err := s.PutClaim(context.Background(), "a", "b"); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("put over a damaged file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != `{"claims":{"m":"x"` {
		t.Fatalf("the damaged file was changed: %s", b)
	}
}
