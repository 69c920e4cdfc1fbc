package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

// gvisorDockerd is a private dockerd with gVisor registered as the runtime
// runsc, as the README says (--host-uds=open; --network=none, since runsc's
// own network stack does not start on this machine kind).
func gvisorDockerd(t *testing.T) string {
	t.Helper()
	testreq.Command(t, "dockerd", "run make test-env")
	testreq.Command(t, "runsc", "run make test-env (or apt-get install -y runsc)")
	testreq.Root(t, "a private dockerd")
	runsc, err := exec.LookPath("runsc")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/tmp", "gv")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"runtimes": map[string]any{"runsc": map[string]any{
		"path": runsc, "runtimeArgs": []string{"--host-uds=open", "--network=none"}}}})
	config := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(config, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	host, stop, err := harness.StartDockerdWith(dir, "--config-file", config)
	if err != nil {
		t.Fatalf("private dockerd with runsc: %v", err)
	}
	t.Cleanup(stop)
	return host
}

// The gvisor tier through the whole server on a dockerd that has runsc:
// listed by the runtime, asked for by the CLI, shown by REST, the CLI and
// the dashboard, really gVisor inside, kept across a server restart, and a
// warm pool of the tier taken only by a create of the tier.
func TestDockerGVisorTierThroughTheServer(t *testing.T) {
	host := gvisorDockerd(t)
	dataDir := t.TempDir()
	env := []string{"DOCKER_HOST=" + host, "AGENTIC_RUNTIMES=docker"}
	s := startServer(t, 0, dataDir, env...)
	t.Cleanup(func() {
		for _, n := range []string{"gv-1", "gv-2", "plain-1"} {
			ctl(t, s.RESTURL, s.Token, "env", "rm", n)
		}
	})

	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "runtimes"); code != 0 || !strings.Contains(out, "isolation=gvisor") {
		t.Fatalf("env runtimes: exit %d %q %q, want docker offering isolation=gvisor", code, out, errOut)
	}
	out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "docker", "--isolation", "gvisor", "gv-1")
	if code != 0 || !strings.Contains(out, "gv-1: ready") {
		t.Fatalf("create gvisor: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	if out, _, _ := ctl(t, s.RESTURL, s.Token, "env", "list"); !strings.Contains(out, "docker:gvisor") {
		t.Fatalf("env list does not show the tier:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	got, err := s.Client().GetEnvironmentWithResponse(ctx, "gv-1")
	if err != nil || got.JSON200 == nil || got.JSON200.Isolation == nil || *got.JSON200.Isolation != "gvisor" {
		t.Fatalf("GET gv-1: %v %s, want isolation gvisor", err, got.Body)
	}
	inside := execOK(t, s, "gv-1", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "dmesg; uname -r"})})
	if !strings.Contains(inside.Stdout, "Starting gVisor...") {
		t.Fatalf("inside gv-1: %q, want gVisor's kernel log", inside.Stdout)
	}

	// The dashboard shows the tier beside the runtime.
	b := newBrowser(t)
	p := b.newPage()
	signInAs(p, s.RESTURL+"/", s.Token, "")
	p.do("environments", chromedp.Navigate(s.RESTURL+"/#/environments"), chromedp.WaitVisible(testid("env-isolation-gv-1")))
	if txt := p.eval(`document.querySelector('[data-testid="env-isolation-gv-1"]').innerText`); txt != "gvisor" {
		t.Fatalf("the dashboard shows %q beside gv-1's runtime", txt)
	}
	p.shot("isolation-gvisor")

	// A pool of the tier: a create of the tier takes its member, a plain
	// one does not.
	if _, errOut, code := ctl(t, s.RESTURL, s.Token, "pool", "put", "--runtime", "docker", "--size", "1", "--isolation", "gvisor", "gvp"); code != 0 {
		t.Fatalf("pool put: %q", errOut)
	}
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "pool", "rm", "gvp") })
	waitPool(t, s, "gvp", 1, 2*time.Minute)
	out, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "docker", "plain-1")
	if code != 0 || strings.Contains(errOut, "taken") {
		t.Fatalf("a plain create with a gvisor pool: exit %d %q %q", code, out, errOut)
	}
	out, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "docker", "--isolation", "gvisor", "gv-2")
	if code != 0 || !strings.Contains(errOut, "taken") {
		t.Fatalf("a gvisor create with a gvisor pool: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	if got := execOK(t, s, "gv-2", restapi.ExecRequest{Command: "dmesg"}); !strings.Contains(got.Stdout, "gVisor") {
		t.Fatalf("the taken member is not gVisor: %q", got.Stdout)
	}

	// A restarted server shows the tier again (kept with the container).
	s.Kill()
	s = startServer(t, 0, dataDir, env...)
	waitEnvReady(t, s, "gv-1", 2*time.Minute)
	got, err = s.Client().GetEnvironmentWithResponse(ctx, "gv-1")
	if err != nil || got.JSON200 == nil || got.JSON200.Isolation == nil || *got.JSON200.Isolation != "gvisor" {
		t.Fatalf("GET gv-1 after a restart: %v %s", err, got.Body)
	}
	if got, _ := s.Client().GetEnvironmentWithResponse(ctx, "plain-1"); got.JSON200 == nil || got.JSON200.Isolation != nil {
		t.Fatalf("plain-1 after a restart: %s", got.Body)
	}
}
