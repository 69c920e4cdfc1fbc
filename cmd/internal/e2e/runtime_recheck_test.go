package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

// A server started while its dockerd is not running says, to a request for
// a container, why there is none and how to get one; once a dockerd starts
// on DOCKER_HOST, the server finds it by itself (nobody asks: /readyz only
// reads) and containers are made and used without a restart.
func TestRuntimeStartedAfterTheServerIsUsedWithoutARestart(t *testing.T) {
	testreq.Command(t, "dockerd", "run make test-env")
	testreq.Root(t, "a private dockerd")
	dir, err := os.MkdirTemp("/tmp", "bd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	host, _ := harness.DockerdArgs(dir)
	s := startServer(t, 0, "", "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=host,docker")

	_, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "docker", "late-1")
	if code == 0 || !strings.Contains(errOut, "docker does not answer") || !strings.Contains(errOut, "make docker") {
		t.Fatalf("create with no dockerd: exit %d, stderr %q; want a refusal saying `make docker`", code, errOut)
	}
	if got := runtimeNames(t, s); !slices.Equal(got, []string{"host"}) {
		t.Fatalf("runtimes with no dockerd: %v", got)
	}
	// The list says what is not offered, why and how to get it.
	out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "runtimes")
	if code != 0 || !strings.Contains(out, "not offered: docker: docker does not answer") || !strings.Contains(out, "make docker") ||
		!strings.Contains(out, "not offered: libvirt: AGENTIC_RUNTIMES (host,docker) does not name libvirt") {
		t.Fatalf("env runtimes with no dockerd: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	if ready, detail := dockerReadiness(t, s); ready || !strings.Contains(detail, "unreachable") {
		t.Fatalf("readiness of docker with no dockerd: %v %q", ready, detail)
	}

	if _, stop, err := harness.StartDockerdIn(dir); err != nil {
		t.Fatalf("private dockerd (make test-env installs it): %v", err)
	} else {
		t.Cleanup(stop)
	}
	// The periodic re-check (every 15 s) finds it; readiness only reads.
	if !testkit.Within(patience, func() bool { ready, _ := dockerReadiness(t, s); return ready }) {
		_, detail := dockerReadiness(t, s)
		t.Fatalf("docker never became available after its dockerd started: %s", detail)
	}
	// Readiness says it answers only once the environments offer it
	// (what it holds recovered): the list names it at once, not later.
	if got := runtimeNames(t, s); !slices.Equal(got, []string{"docker", "host"}) {
		t.Fatalf("runtimes right after readiness says docker answers: %v", got)
	}
	if out, _, _ := ctl(t, s.RESTURL, s.Token, "env", "runtimes"); strings.Contains(out, "not offered: docker") {
		t.Fatalf("env runtimes once dockerd runs still says docker is not offered:\n%s", out)
	}
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", "late-1") })
	out, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "docker", "late-1")
	if code != 0 || !strings.Contains(out, "late-1: ready") {
		t.Fatalf("create once dockerd runs: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	exe, err := s.Client().ExecCommandWithResponse(ctx, "late-1", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "echo in-$AGENT_RUNTIME"})})
	if err != nil || exe.JSON200 == nil || strings.TrimSpace(exe.JSON200.Stdout) != "in-container" {
		t.Fatalf("exec in the container: %v %s", err, exe.Body)
	}
	// A task naming no runtime now runs in a container too, to its end.
	manifest := filepath.Join(t.TempDir(), "task.yaml")
	if err := os.WriteFile(manifest, []byte("metadata: {name: late-task}\ncommand: {argv: [sh, -c, 'echo in-$AGENT_RUNTIME']}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = ctl(t, s.RESTURL, s.Token, "task", "submit", "-f", manifest, "--follow")
	if code != 0 || !strings.Contains(out, "in-container") {
		t.Fatalf("a task naming no runtime once dockerd runs: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
}

// runtimeNames are the runtimes GET /api/v1/runtimes lists.
func runtimeNames(t *testing.T, s *harness.Server) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	r, err := s.Client().ListRuntimesWithResponse(ctx)
	if err != nil || r.JSON200 == nil {
		t.Fatalf("runtimes: %v %s", err, r.Body)
	}
	var out []string
	for _, rt := range r.JSON200.Runtimes {
		out = append(out, rt.Runtime)
	}
	slices.Sort(out)
	return out
}

// dockerReadiness is /readyz's check of the docker runtime.
func dockerReadiness(t *testing.T, s *harness.Server) (bool, string) {
	t.Helper()
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(s.RESTURL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r restapi.Readiness
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Components {
		if c.Name == "runtime_docker" {
			d := ""
			if c.Detail != nil {
				d = *c.Detail
			}
			return c.Ready, d
		}
	}
	t.Fatalf("readyz has no runtime_docker: %+v", r.Components)
	return false, ""
}

// make docker (scripts/docker.sh) starts a private dockerd in the state
// dir, says what to set, starts no second one, and make docker-stop ends
// it and what it kept under /run.
func TestMakeDockerStartsAPrivateDaemon(t *testing.T) {
	testreq.Command(t, "dockerd", "run make test-env")
	testreq.Root(t, "a private dockerd")
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	state, err := os.MkdirTemp("/tmp", "mdk")
	if err != nil {
		t.Fatal(err)
	}
	host, _ := harness.DockerdArgs(filepath.Join(state, "docker"))
	script := func(action string) (string, int) {
		t.Helper()
		cmd := exec.Command(filepath.Join(root, "scripts", "docker.sh"), state, action)
		// A system dockerd is not looked for when DOCKER_HOST names this one.
		cmd.Env = append(os.Environ(), "DOCKER_HOST="+host)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	t.Cleanup(func() {
		script("stop")
		_ = os.RemoveAll(state)
	})
	out, code := script("start")
	if code != 0 || !strings.Contains(out, "export DOCKER_HOST="+host) || !strings.Contains(out, "make docker-stop") {
		t.Fatalf("make docker: exit %d\n%s", code, out)
	}
	if b, err := exec.Command("docker", "-H", host, "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		t.Fatalf("the daemon it started does not answer on %s: %v %s", host, err, b)
	}
	if out, code = script("start"); code != 0 || !strings.Contains(out, "already runs") {
		t.Fatalf("make docker again: exit %d\n%s", code, out)
	}
	if out, code = script("stop"); code != 0 || !strings.Contains(out, "stopped") {
		t.Fatalf("make docker-stop: exit %d\n%s", code, out)
	}
	if out, code = script("status"); code == 0 || !strings.Contains(out, "not running") {
		t.Fatalf("status after stop: exit %d\n%s", code, out)
	}
	// Its exec root is /run/agentic-dockerd-<cksum of its dir>.
	sum, err := exec.Command("sh", "-c", `printf %s "$1" | cksum | cut -d' ' -f1`, "sh", filepath.Join(state, "docker")).Output()
	if err != nil {
		t.Fatal(err)
	}
	execRoot := "/run/agentic-dockerd-" + strings.TrimSpace(string(sum))
	if _, err := os.Stat(execRoot); !os.IsNotExist(err) {
		t.Fatalf("its exec root %s is left after make docker-stop: %v", execRoot, err)
	}
}
