package filestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// TestSignInSessionsFile: one JSON file in the data dir, private to the
// server's user, holding the live sessions by the hash of their id, the
// oldest dropped past the bound, no temporary file left.
func TestSignInSessionsFile(t *testing.T) {
	dir := t.TempDir()
	s, err := NewSignInSessions(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	s.max = 3
	for i := range 5 {
		ss := ports.SignInSession{IDHash: fmt.Sprintf("%064d", i), TokenID: "operator", Binding: "bind", Created: now.Add(time.Duration(i) * time.Second), Expires: now.Add(time.Hour)}
		if err := s.Create(ss); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Create(ports.SignInSession{IDHash: "ended", Created: now.Add(time.Minute), Expires: now}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "signin-sessions.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("sessions.json: %v %v", fi, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "signin-sessions.json"))
	if strings.Contains(string(b), "ended") || strings.Count(string(b), `"id_sha256"`) != 3 {
		t.Fatalf("file keeps the wrong sessions: %s", b)
	}
	again, err := NewSignInSessions(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		_, ok := again.Lookup(fmt.Sprintf("%064d", i), now)
		if ok != (i >= 2) {
			t.Errorf("session %d kept: %v (the two oldest go past the bound of 3)", i, ok)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("files left in the data dir: %v", entries)
	}
	if err := os.WriteFile(filepath.Join(dir, "signin-sessions.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewSignInSessions(dir); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("a damaged file: %v, want ErrStoreUnavailable", err)
	}
}
