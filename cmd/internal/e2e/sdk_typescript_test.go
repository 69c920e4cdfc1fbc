package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

// The TypeScript SDK (sdk/typescript) against the real server: its own
// tests (node's test runner, `npm test`: agents, exec, files, sessions,
// environments on the host runtime, typed errors, the README's quickstart
// example) run with the server's URL and token in the environment.
func TestSDKTypeScript(t *testing.T) {
	testreq.Command(t, "npm", "apt-get install -y npm (make deps installs it)")
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "sdk", "typescript"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// `make generate` installs the SDK's packages; a fresh clone tested
	// without it (or one whose lockfile changed since) installs them here.
	if !installed(dir) {
		out, err := npm(ctx, dir, nil, "ci", "--no-audit", "--no-fund", "--loglevel=error")
		if err != nil {
			t.Fatalf("npm ci in %s (needs the npm registry): %v\n%s", dir, err, out)
		}
	}

	s := startServer(t, 1, "")
	out, err := npm(ctx, dir, []string{"AGENTIC_URL=" + s.RESTURL, "AGENTIC_TOKEN=" + s.Token, "AGENTIC_AGENT=host-01"}, "test")
	if err != nil {
		t.Fatalf("npm test: %v\n%s", err, out)
	}
	// Every test ran and passed (a runner that found none would pass too).
	count := func(what string) int {
		m := regexp.MustCompile(`(?m)^(?:# |ℹ )` + what + ` (\d+)$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("npm test printed no %q count:\n%s", what, out)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	if pass, fail := count("pass"), count("fail"); pass < 7 || fail != 0 {
		t.Fatalf("npm test: %d passed, %d failed; want the 7 tests passed:\n%s", pass, fail, out)
	}
	t.Logf("npm test:\n%s", out)
}

// npm runs npm in dir with env added, and returns its output.
func npm(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "npm", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// installed reports whether dir's node_modules were installed from its
// package-lock.json as it is now.
func installed(dir string) bool {
	got, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err != nil {
		return false
	}
	want, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	return err == nil && !got.ModTime().Before(want.ModTime())
}
