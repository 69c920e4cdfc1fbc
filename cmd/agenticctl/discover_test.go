package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The package's tests never find a `.state` of the machine's (a clone
// running make run): the search starts where there is none, unless a test
// says otherwise.
func init() { getwd = func() (string, error) { return "/nonexistent-agenticctl-test", nil } }

// inDir makes the search for .state start in dir for the test.
func inDir(t *testing.T, dir string) {
	t.Helper()
	prev := getwd
	getwd = func() (string, error) { return dir, nil }
	t.Cleanup(func() { getwd = prev })
}

// makeRunState is a clone after `make run`: root/.state with the token and
// the REST URL the server left there.
func makeRunState(t *testing.T, url string) (root string) {
	t.Helper()
	root = t.TempDir()
	state := filepath.Join(root, ".state")
	if err := os.MkdirAll(filepath.Join(root, "cmd", "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"operator-token": token + "\n", "rest-url": url + "\n"} {
		if err := os.WriteFile(filepath.Join(state, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// In a clone running `make run` (or any directory below it), agenticctl
// needs no flag and no variable: the server's URL and token are in .state.
func TestFindsMakeRunsServerAndTokenFromTheClone(t *testing.T) {
	f := newFixture(t)
	root := makeRunState(t, f.url)
	for _, dir := range []string{root, filepath.Join(root, "cmd", "deep")} {
		inDir(t, dir)
		if got, err := dataDir(envOf()); err != nil || got != filepath.Join(root, ".state") {
			t.Fatalf("from %s: data dir %q %v", dir, got, err)
		}
		r := runWith(t, envOf(), "", "agents", "list")
		if r.code != 0 || !strings.Contains(r.stdout, "host-01") {
			t.Fatalf("from %s with nothing set: %+v", dir, r)
		}
	}
	// What is given beats what is found: SECRETS_DIR names another data
	// dir (here without a token), AGENTIC_SERVER another server.
	other := t.TempDir()
	r := runWith(t, envOf("SECRETS_DIR", filepath.Join(other, "secrets")), "", "agents", "list")
	if r.code != exitError || !strings.Contains(r.stderr, filepath.Join(other, "operator-token")) {
		t.Fatalf("SECRETS_DIR must beat .state: %+v", r)
	}
	r = runWith(t, envOf("AGENTIC_SERVER", "http://127.0.0.1:1"), "", "agents", "list")
	if r.code != exitError || !strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Fatalf("AGENTIC_SERVER must beat rest-url: %+v", r)
	}
}

// Outside any clone nothing is found, and a .state without a token, or a
// rest-url that is not an http(s) URL, is passed over.
func TestNoStateNoDiscovery(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, ".state"), 0o700); err != nil {
		t.Fatal(err)
	}
	inDir(t, root)
	if d, ok := stateDir(); ok {
		t.Fatalf("a .state without operator-token found: %s", d)
	}
	bad := makeRunState(t, "ftp://x")
	inDir(t, bad)
	if s := discoveredServer(envOf()); s != "" {
		t.Fatalf("rest-url %q taken", s)
	}
}
