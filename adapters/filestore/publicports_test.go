package filestore

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// TestPublicPortsFile: one JSON file in the data dir, private to the
// server's user, holding only the live marks, with no temporary file left.
func TestPublicPortsFile(t *testing.T) {
	dir := t.TempDir()
	s, err := NewPublicPorts(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	for _, m := range []struct {
		env   string
		port  uint16
		until time.Time
	}{
		{"dev", 8080, now.Add(time.Hour)},
		{"dev", 5173, now.Add(2 * time.Hour)},
		{"old", 3000, now.Add(time.Minute)},
	} {
		if err := s.SetPublic(m.env, m.port, m.until); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(30 * time.Minute) // old:3000 has ended
	if err := s.SetPrivate("dev", 8080); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "public-ports.json")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f publicPortsFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if len(f.Marks) != 1 || f.Marks[0].Environment != "dev" || f.Marks[0].Port != 5173 || !f.Marks[0].Until.Equal(now.Add(90*time.Minute)) {
		t.Fatalf("the file holds %s, want only dev:5173 (the ended mark dropped on write)", b)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("the dir holds %d entries, want only public-ports.json: %v", len(entries), entries)
	}
}

// TestPublicPortsDamagedFileIsRefused: a file that does not parse is not
// read as "no marks" (which would drop them silently) but refused.
func TestPublicPortsDamagedFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "public-ports.json"), []byte(`{"marks": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewPublicPorts(dir); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("opening a damaged file: %v, want ErrStoreUnavailable", err)
	}
}

// TestPublicPortsFailedWriteChangesNothing: when the file cannot be
// written, the change is refused and the marks stay as they were.
func TestPublicPortsFailedWriteChangesNothing(t *testing.T) {
	dir := t.TempDir()
	s, err := NewPublicPorts(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := s.SetPublic("dev", 5173, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// A directory where the file goes: the rename over it fails, root or not.
	path := filepath.Join(dir, "public-ports.json")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "keep"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPublic("dev", 8080, now.Add(time.Hour)); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("SetPublic with the file unwritable: %v, want ErrStoreUnavailable", err)
	}
	if err := s.SetPrivate("dev", 5173); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("SetPrivate with the file unwritable: %v, want ErrStoreUnavailable", err)
	}
	if _, ok := s.PublicUntil("dev", 8080, now); ok {
		t.Fatal("a mark that was not written is public")
	}
	if _, ok := s.PublicUntil("dev", 5173, now); !ok {
		t.Fatal("a removal that was not written took effect")
	}
}

// TestPublicPortsTooManySaysWhy: the refusal names the environment and the
// way out.
func TestPublicPortsTooManySaysWhy(t *testing.T) {
	s, err := NewPublicPorts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour)
	for p := range ports.MaxPublicPortsPerEnvironment {
		if err := s.SetPublic("dev", uint16(1+p), until); err != nil {
			t.Fatal(err)
		}
	}
	err = s.SetPublic("dev", 9999, until)
	if !errors.Is(err, ports.ErrTooManyPublicPorts) {
		t.Fatalf("%v, want ErrTooManyPublicPorts", err)
	}
	const want = `too many public ports in this environment: "dev" has 64 public ports, the most it may (make one private first)`
	if err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}
