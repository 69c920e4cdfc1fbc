package filestore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func newHashes(t *testing.T) (*AgentHashes, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data", "secrets")
	h, err := NewAgentHashes(dir)
	if err != nil {
		t.Fatal(err)
	}
	return h, dir
}

func mustVerify(t *testing.T, h *AgentHashes, id, secret string, want bool) {
	t.Helper()
	ok, err := h.Verify(id, secret)
	if err != nil || ok != want {
		t.Fatalf("Verify(%q, %q) = %v, %v; want %v, nil", id, secret, ok, err, want)
	}
}

func TestAgentHashesPutVerifyDelete(t *testing.T) {
	h, dir := newHashes(t)
	if m := testkit.Mode(t, dir); m != 0o700 {
		t.Fatalf("secrets dir mode %v", m)
	}
	mustVerify(t, h, "host-01", "s", false) // no file yet

	if err := h.Put("host-01", "secret-1"); err != nil {
		t.Fatal(err)
	}
	if err := h.Put("host-02", "secret-2"); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, h, "host-01", "secret-1", true)
	mustVerify(t, h, "host-01", "secret-2", false)
	mustVerify(t, h, "host-01", "", false)
	mustVerify(t, h, "unknown", "secret-1", false)
	mustVerify(t, h, "host-02", "secret-2", true)

	p := filepath.Join(dir, AgentHashesFile)
	if m := testkit.Mode(t, p); m != 0o600 {
		t.Fatalf("hash file mode %v", m)
	}
	var onDisk map[string]string
	data, _ := os.ReadFile(p)
	if err := json.Unmarshal(data, &onDisk); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"host-01": hashOf("secret-1"), "host-02": hashOf("secret-2")}
	if fmt.Sprint(onDisk) != fmt.Sprint(want) {
		t.Fatalf("file %s, want %v", data, want)
	}
	if bytes.Contains(data, []byte("secret-1")) {
		t.Fatal("plain secret on disk")
	}

	// Replacing a secret invalidates the old one.
	if err := h.Put("host-01", "secret-1b"); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, h, "host-01", "secret-1", false)
	mustVerify(t, h, "host-01", "secret-1b", true)

	if err := h.Delete("host-01"); err != nil {
		t.Fatal(err)
	}
	if err := h.Delete("never-existed"); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, h, "host-01", "secret-1b", false)
	mustVerify(t, h, "host-02", "secret-2", true)

	if err := h.Put("", "x"); err == nil {
		t.Fatal("want error for empty id")
	}
	if err := h.Put("a", ""); err == nil {
		t.Fatal("want error for empty secret")
	}
	testkit.OnlyFiles(t, dir, ".agent-hashes.lock", AgentHashesFile)
}

func TestAgentHashesSeesOtherWriters(t *testing.T) {
	h, dir := newHashes(t)
	p := filepath.Join(dir, AgentHashesFile)
	if err := h.Put("a", "one"); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, h, "a", "one", true)

	// Another process replaces the file atomically.
	write := func(m map[string]string) {
		data, _ := json.Marshal(m)
		if err := fsatomic.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(map[string]string{"a": hashOf("two"), "b": hashOf("bee")})
	mustVerify(t, h, "a", "two", true)
	mustVerify(t, h, "b", "bee", true)

	// Another process rewrites it in place with the same size: the mtime
	// tells (set explicitly, since the rewrite may land in the same tick).
	data, _ := json.Marshal(map[string]string{"a": hashOf("six"), "b": hashOf("bee")})
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, h, "a", "six", true)

	// A second instance (as in another process) sees our writes and we see its.
	h2, err := NewAgentHashes(dir)
	if err != nil {
		t.Fatal(err)
	}
	mustVerify(t, h2, "a", "six", true)
	if err := h2.Put("c", "sea"); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, h, "c", "sea", true)
	mustVerify(t, h, "b", "bee", true) // not lost by h2's rewrite

	// Uppercase hex from a provisioner is fine.
	write(map[string]string{"u": strings.ToUpper(hashOf("up"))})
	mustVerify(t, h, "u", "up", true)

	// The file disappearing means no agents.
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, h, "u", "up", false)
}

func TestAgentHashesCorruptFile(t *testing.T) {
	for _, content := range []string{
		`{"a": "` + hashOf("x") + `"`, // truncated
		`{"a": 1}`,
		`null`,
		`[]`,
		`{"a": "` + hashOf("x") + `"} {}`,
		"\x00\x01garbage",
	} {
		t.Run(fmt.Sprintf("%.12q", content), func(t *testing.T) {
			h, dir := newHashes(t)
			p := filepath.Join(dir, AgentHashesFile)
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if ok, err := h.Verify("a", "x"); err == nil || ok {
				t.Fatalf("Verify = %v, %v; want an error", ok, err)
			}
			if err := h.Put("b", "y"); err == nil {
				t.Fatal("Put overwrote a corrupt file")
			}
			if err := h.Delete("a"); err == nil {
				t.Fatal("Delete overwrote a corrupt file")
			}
			if got, _ := os.ReadFile(p); string(got) != content {
				t.Fatalf("file changed to %q", got)
			}
			// Once repaired, it works again.
			if err := fsatomic.WriteFile(p, []byte(`{"a": "`+hashOf("x")+`"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			mustVerify(t, h, "a", "x", true)
		})
	}
}

func TestAgentHashesEmptyFileAndBadEntry(t *testing.T) {
	h, dir := newHashes(t)
	p := filepath.Join(dir, AgentHashesFile)
	if err := os.WriteFile(p, nil, 0o644); err != nil { // as `touch` leaves it
		t.Fatal(err)
	}
	mustVerify(t, h, "a", "x", false)
	if err := h.Put("a", "x"); err != nil {
		t.Fatal(err)
	}
	if m := testkit.Mode(t, p); m != 0o600 {
		t.Fatalf("rewritten file mode %v", m)
	}

	// One malformed hash fails only its own agent, and survives other writes.
	data := fmt.Sprintf(`{"a": %q, "bad": "zz"}`, hashOf("x"))
	if err := fsatomic.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Verify("bad", "x"); err == nil {
		t.Fatal("want an error for a malformed stored hash")
	}
	mustVerify(t, h, "a", "x", true)
	if err := h.Put("c", "z"); err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	raw, _ := os.ReadFile(p)
	if err := json.Unmarshal(raw, &m); err != nil || m["bad"] != "zz" {
		t.Fatalf("malformed entry lost: %s", raw)
	}
}

func TestAgentHashesConcurrent(t *testing.T) {
	h, dir := newHashes(t)
	h2, err := NewAgentHashes(dir) // a second instance contends through the file lock
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 6, 15
	var wg sync.WaitGroup
	for w := range workers {
		store := h
		if w%2 == 1 {
			store = h2
		}
		wg.Go(func() {
			id := fmt.Sprintf("agent-%d", w)
			for r := range rounds {
				secret := fmt.Sprintf("s-%d-%d", w, r)
				if err := store.Put(id, secret); err != nil {
					t.Error(err)
					return
				}
				for _, s := range []*AgentHashes{h, h2} {
					if ok, err := s.Verify(id, secret); err != nil || !ok {
						t.Errorf("Verify(%s, %s) = %v, %v", id, secret, ok, err)
						return
					}
				}
				if r%5 == 4 {
					if err := store.Delete(id); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	// Each worker's last round was a Put (rounds-1 = 14, 14%5 == 4 → deleted).
	for w := range workers {
		mustVerify(t, h, fmt.Sprintf("agent-%d", w), fmt.Sprintf("s-%d-%d", w, rounds-1), false)
	}
	for w := range workers {
		if err := h.Put(fmt.Sprintf("agent-%d", w), "final"); err != nil {
			t.Fatal(err)
		}
	}
	for w := range workers {
		mustVerify(t, h2, fmt.Sprintf("agent-%d", w), "final", true)
	}
}

func TestOperatorToken(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	tok, err := LoadOrCreateOperatorToken(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 43 || strings.ContainsAny(tok, "+/= \n") {
		t.Fatalf("token %q", tok)
	}
	p := filepath.Join(dataDir, OperatorTokenFile)
	if m := testkit.Mode(t, p); m != 0o600 {
		t.Fatalf("token file mode %v", m)
	}
	if m := testkit.Mode(t, dataDir); m != 0o700 {
		t.Fatalf("data dir mode %v", m)
	}
	again, err := LoadOrCreateOperatorToken(dataDir)
	if err != nil || again != tok {
		t.Fatalf("second load %q, %v; want %q", again, err, tok)
	}
	testkit.OnlyFiles(t, dataDir, OperatorTokenFile)

	// An operator-provided token is trimmed.
	if err := os.WriteFile(p, []byte("  my-token \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := LoadOrCreateOperatorToken(dataDir); got != "my-token" {
		t.Fatalf("got %q", got)
	}

	// A blank file is replaced by a fresh token.
	if err := os.WriteFile(p, []byte(" \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fresh, err := LoadOrCreateOperatorToken(dataDir)
	if err != nil || len(fresh) != 43 {
		t.Fatalf("got %q, %v", fresh, err)
	}
	if raw, _ := os.ReadFile(p); strings.TrimSpace(string(raw)) != fresh || testkit.Mode(t, p) != 0o600 {
		t.Fatalf("file %q mode %v", raw, testkit.Mode(t, p))
	}

	if _, err := LoadOrCreateOperatorToken(filepath.Join(p, "sub")); err == nil {
		t.Fatal("want an error when the data dir is a file")
	}
}

func TestOperatorTokenRace(t *testing.T) {
	dataDir := t.TempDir()
	agreeOnFirstStart(t, dataDir, LoadOrCreateOperatorToken)
	testkit.OnlyFiles(t, dataDir, OperatorTokenFile)
}

// agreeOnFirstStart runs creators of dataDir's file at once and fails t
// unless they all return the same value.
func agreeOnFirstStart(t *testing.T, dataDir string, load func(dataDir string) (string, error)) {
	t.Helper()
	const n = 8
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			v, err := load(dataDir)
			if err != nil {
				t.Error(err)
			}
			got[i] = v
		})
	}
	wg.Wait()
	for _, v := range got {
		if v != got[0] || v == "" {
			t.Fatalf("racing creators disagree: %q", got)
		}
	}
}

func TestDefaultSecretsDir(t *testing.T) {
	tests := []struct {
		euid      int
		xdg, home string
		want      string
	}{
		{0, "/x", "/root", "/var/lib/agentic-sandbox/secrets"},
		{1000, "/xdg/state", "/home/u", "/xdg/state/agentic-sandbox/secrets"},
		{1000, "", "/home/u", "/home/u/.local/state/agentic-sandbox/secrets"},
		{1000, "relative/state", "/home/u", "/home/u/.local/state/agentic-sandbox/secrets"},
		{1000, "", "", "/var/lib/agentic-sandbox/secrets"},
	}
	for _, tt := range tests {
		if got := defaultSecretsDir(tt.euid, tt.xdg, tt.home); got != tt.want {
			t.Errorf("defaultSecretsDir(%d, %q, %q) = %q, want %q", tt.euid, tt.xdg, tt.home, got, tt.want)
		}
	}
	if os.Geteuid() != 0 {
		t.Setenv("XDG_STATE_HOME", "/tmp/xdg-test")
		if got := DefaultSecretsDir(); got != "/tmp/xdg-test/agentic-sandbox/secrets" {
			t.Errorf("DefaultSecretsDir() = %q", got)
		}
	} else if got := DefaultSecretsDir(); got != "/var/lib/agentic-sandbox/secrets" {
		t.Errorf("DefaultSecretsDir() as root = %q", got)
	}
	if got := DataDir("/var/lib/agentic-sandbox/secrets/"); got != "/var/lib/agentic-sandbox" {
		t.Errorf("DataDir = %q", got)
	}
}

func TestAgentHashesCreateNeverReplaces(t *testing.T) {
	h, _ := newHashes(t)
	if err := h.Put("hand-made", "theirs"); err != nil {
		t.Fatal(err)
	}
	if err := h.Create("hand-made", "mine"); !errors.Is(err, ports.ErrCredentialExists) {
		t.Fatalf("Create over an existing credential: %v", err)
	}
	mustVerify(t, h, "hand-made", "theirs", true)
	mustVerify(t, h, "hand-made", "mine", false)

	// Racing creators of one new id: exactly one wins, and its secret is the one stored.
	const n = 8
	var wg sync.WaitGroup
	won := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			secret := fmt.Sprintf("s%d", i)
			if err := h.Create("new", secret); err == nil {
				won <- secret
			} else if !errors.Is(err, ports.ErrCredentialExists) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	close(won)
	var winners []string
	for w := range won {
		winners = append(winners, w)
	}
	if len(winners) != 1 {
		t.Fatalf("winners %v", winners)
	}
	mustVerify(t, h, "new", winners[0], true)
}

func TestAgentHashesPinKind(t *testing.T) {
	h, dir := newHashes(t)
	if k, err := h.PinKind("a", ports.KindContainer); err != nil || k != ports.KindContainer {
		t.Fatalf("first pin: %q %v", k, err)
	}
	if k, err := h.PinKind("a", ports.KindVM); err != nil || k != ports.KindContainer {
		t.Fatalf("a later pin changed the kind: %q %v", k, err)
	}
	if _, err := h.PinKind("b", "mainframe"); err == nil {
		t.Fatal("an unknown kind was recorded")
	}
	// Another process sees it, and Delete forgets it with the credential.
	h2, _ := NewAgentHashes(dir)
	if k, _ := h2.PinKind("a", ports.KindVM); k != ports.KindContainer {
		t.Fatalf("another store sees %q", k)
	}
	if err := h.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if k, _ := h.PinKind("a", ports.KindVM); k != ports.KindVM {
		t.Fatalf("after Delete the old kind remained: %q", k)
	}
	if m := testkit.Mode(t, filepath.Join(dir, AgentKindsFile)); m != 0o600 {
		t.Fatalf("kinds file mode %v", m)
	}
	// A corrupt kinds file is never overwritten.
	if err := os.WriteFile(filepath.Join(dir, AgentKindsFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := h.PinKind("c", ports.KindHost); err == nil {
		t.Fatal("pinned into a corrupt file")
	}
	if raw, _ := os.ReadFile(filepath.Join(dir, AgentKindsFile)); string(raw) != "{not json" {
		t.Fatalf("the corrupt file was changed: %q", raw)
	}
}

// Many agents registering at once: every first pin lands (in few writes),
// two pins of one agent agree on one kind, and a kind another process
// recorded first is the one returned.
func TestAgentHashesPinKindConcurrently(t *testing.T) {
	h, dir := newHashes(t)
	other, _ := NewAgentHashes(dir)
	if _, err := other.PinKind("early", ports.KindVM); err != nil {
		t.Fatal(err)
	}
	const n = 500
	got := make([]ports.RuntimeKind, n)
	twins := make([]ports.RuntimeKind, 2)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := h.PinKind(fmt.Sprintf("a-%d", i), ports.KindContainer)
			if err != nil {
				t.Error(err)
			}
			got[i] = k
		}()
	}
	for i, k := range []ports.RuntimeKind{ports.KindHost, ports.KindVM} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			twins[i], _ = h.PinKind("twin", k)
		}()
	}
	wg.Add(1)
	var early ports.RuntimeKind
	go func() { defer wg.Done(); early, _ = h.PinKind("early", ports.KindHost) }()
	wg.Wait()
	for i, k := range got {
		if k != ports.KindContainer {
			t.Fatalf("agent %d: %q", i, k)
		}
	}
	if twins[0] != twins[1] {
		t.Fatalf("one agent pinned as two kinds: %v", twins)
	}
	if early != ports.KindVM {
		t.Fatalf("the kind another process recorded first: %q", early)
	}
	fresh, _ := NewAgentHashes(dir)
	for i := range n {
		if k, _ := fresh.PinKind(fmt.Sprintf("a-%d", i), ports.KindVM); k != ports.KindContainer {
			t.Fatalf("agent %d on disk: %q", i, k)
		}
	}
}
