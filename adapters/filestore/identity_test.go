package filestore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

func TestIdentityCreateAndReuse(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	id, err := LoadOrCreateIdentity(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 || u.String() != id {
		t.Fatalf("id %q (%v) is not a canonical UUIDv7", id, err)
	}
	p := filepath.Join(dataDir, IdentityFile)
	if raw, _ := os.ReadFile(p); string(raw) != id+"\n" {
		t.Fatalf("file holds %q", raw)
	}
	if m := testkit.Mode(t, p); m != 0o644 {
		t.Fatalf("identity mode %v", m)
	}
	if m := testkit.Mode(t, dataDir); m != 0o700 {
		t.Fatalf("data dir mode %v", m)
	}
	for range 3 {
		if again, err := LoadOrCreateIdentity(dataDir); err != nil || again != id {
			t.Fatalf("reload = %q, %v; want %q", again, err, id)
		}
	}
	testkit.OnlyFiles(t, dataDir, IdentityFile)

	// One written by hand, without a newline or in upper case, is the same id.
	if err := os.WriteFile(p, []byte("  "+strings.ToUpper(id)), 0o644); err != nil {
		t.Fatal(err)
	}
	if again, err := LoadOrCreateIdentity(dataDir); err != nil || again != id {
		t.Fatalf("reload = %q, %v; want %q", again, err, id)
	}
}

func TestIdentityGarbage(t *testing.T) {
	for _, content := range []string{"", "\n", "not-a-uuid\n", "{" + uuid.NewString() + "}", "urn:uuid:" + uuid.NewString(), "\x00\x01"} {
		dataDir := t.TempDir()
		p := filepath.Join(dataDir, IdentityFile)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		id, err := LoadOrCreateIdentity(dataDir)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Fatalf("%q: got %q, %v; want an error naming %s", content, id, err, p)
		}
		if raw, _ := os.ReadFile(p); string(raw) != content {
			t.Fatalf("%q: file replaced by %q", content, raw)
		}
	}
	if _, err := LoadOrCreateIdentity(""); err == nil {
		t.Fatal("want an error for an empty data dir")
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	if _, err := LoadOrCreateIdentity(filepath.Join(file, "sub")); err == nil {
		t.Fatal("want an error when the data dir is a file")
	}
}

// Concurrent first starts agree on one id.
func TestIdentityConcurrentFirstStart(t *testing.T) {
	for range 5 {
		dataDir := filepath.Join(t.TempDir(), "data")
		agreeOnFirstStart(t, dataDir, LoadOrCreateIdentity)
		testkit.OnlyFiles(t, dataDir, IdentityFile)
	}
}
