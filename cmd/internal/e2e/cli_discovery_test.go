package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// A server whose data dir is a clone's .state (as `make run` makes it)
// prints the dashboard's URL and how agenticctl finds it, and leaves its
// REST URL beside the token; agenticctl run in the clone, or below it,
// then needs no flag and no variable.
func TestBannerAndTheCLIFindingMakeRunsServer(t *testing.T) {
	clone := t.TempDir()
	state := filepath.Join(clone, ".state")
	s := startServer(t, 0, state)
	if !testkit.Within(patience, func() bool { return strings.Contains(s.Log(), "agenticctl: ") }) {
		t.Fatalf("no banner:\n%s", s.Log())
	}
	for _, want := range []string{
		"dashboard: " + s.RESTURL + "/ ",
		"REST API:  " + s.RESTURL + "/api/v1",
		"runtimes:  host",
		"agenticctl: finds this server and its token when run in " + clone + " or below; elsewhere: export SECRETS_DIR=" + filepath.Join(state, "secrets"),
	} {
		if !strings.Contains(s.Log(), want) {
			t.Errorf("banner lacks %q:\n%s", want, s.Log())
		}
	}
	if b, err := os.ReadFile(filepath.Join(state, "rest-url")); err != nil || strings.TrimSpace(string(b)) != s.RESTURL {
		t.Fatalf("rest-url: %q %v; want %s", b, err, s.RESTURL)
	}
	below := filepath.Join(clone, "cmd", "deep")
	if err := os.MkdirAll(below, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{clone, below} {
		cmd := exec.Command(bins.Ctl, "env", "runtimes")
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "host") {
			t.Fatalf("agenticctl in %s with nothing set: %v\n%s", dir, err, out)
		}
	}
}
