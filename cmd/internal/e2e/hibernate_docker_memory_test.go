package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/docker"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

// checkpointDockerd starts a private dockerd that checkpoints containers
// (harness.CheckpointDockerd: --experimental, criu first in its PATH,
// --init-path) and returns its DOCKER_HOST and its data root. Without
// criu the test fails in CI (make test-env builds it) and skips, saying
// so, elsewhere; a criu that does not work fails it everywhere.
func checkpointDockerd(t *testing.T) (host, root string) {
	t.Helper()
	testreq.Command(t, "dockerd", "run make test-env")
	testreq.Root(t, "a private dockerd")
	testreq.File(t, filepath.Join(harness.CriuSbin, "criu"), "criu 4.1.1", "run make test-env (scripts/criu/build-criu.sh)")
	dir, err := os.MkdirTemp("/tmp", "ck")
	if err != nil {
		t.Fatal(err)
	}
	host, stop, err := harness.StartCheckpointDockerd(dir)
	if err != nil {
		t.Fatalf("a private dockerd that checkpoints: %v", err)
	}
	t.Cleanup(stop)
	return host, filepath.Join(dir, "root")
}

// dockerCLI runs the docker CLI on host and returns its output; a failure
// fails the test.
func dockerCLI(t *testing.T, host string, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", append([]string{"-H", host}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// countNow reads the counter the background session writes; the file
// rewritten ten times a second may be read empty (or not be there yet):
// read again then.
func countNow(t *testing.T, s *harness.Server, name string) int {
	t.Helper()
	for range 20 {
		out := strings.TrimSpace(execOut(t, s, name, "cat /tmp/counter 2>/dev/null; true"))
		if n, err := strconv.Atoi(out); err == nil {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the counter file stays empty or missing")
	return 0
}

// dockerRunning reports whether environment name's container runs.
func dockerRunning(t *testing.T, host, name string) bool {
	t.Helper()
	out, err := exec.Command("docker", "-H", host, "ps", "-a", "--filter", "label="+docker.LabelEnv+"="+name, "--format", "{{.State}}").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("docker ps for %s: %v %q", name, err, out)
	}
	return strings.TrimSpace(string(out)) == "running"
}

// waitHibernateCapability waits until the server's docker runtime says
// hibernate want (the checkpoint probe runs in the background at start).
func waitHibernateCapability(t *testing.T, s *harness.Server, want string) {
	t.Helper()
	got := ""
	if !testkit.Within(2*time.Minute, func() bool {
		r, err := s.Client().ListRuntimesWithResponse(context.Background())
		if err != nil || r.JSON200 == nil {
			return false
		}
		for _, rt := range r.JSON200.Runtimes {
			if rt.Runtime == "docker" {
				got = string(rt.Hibernate)
			}
		}
		return got == want
	}) {
		t.Fatalf("the docker runtime says hibernate %q, want %q:\n%s", got, want, s.Log())
	}
}

// A container hibernates with its memory where the engine checkpoints
// (CRIU) and wakes where it was: a background session writing a counter
// every 100 ms goes on after a restart of agentic-mgmt and a wake by an
// exec (not from zero), a small HTTP server inside still answers, the container does not run while it sleeps, the
// session's log has no gap and no duplicate, the agent comes back as
// itself, and the runtime says hibernate memory. Its checkpoint removed
// behind its back, a wake leaves it failed with the reason; deleted, it
// takes its checkpoint with it.
func TestAContainerHibernatesWithItsMemoryAndWakesWhereItWas(t *testing.T) {
	host, root := checkpointDockerd(t)
	s := startServer(t, 0, t.TempDir(), "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=docker")
	waitHibernateCapability(t, s, "memory")
	name := fmt.Sprintf("crc-%d", time.Now().UnixNano()%100000)
	e := createReady(t, s, "docker", name, "")
	if e.Hibernate != "memory" {
		t.Fatalf("the environment says hibernate %q, want memory", e.Hibernate)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bg := restapi.SessionBackground
	sess := createSession(t, s, name, restapi.CreateSessionRequest{Type: &bg, Name: ptr("counter"), Command: "sh",
		Args: ptr([]string{"-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; echo n$i; sleep 0.1; done"})})
	execOut(t, s, name, "mkdir -p /tmp/www && echo still-serving > /tmp/www/index.html && (busybox httpd -p 127.0.0.1:8000 -h /tmp/www &) && sleep 0.2")
	if got := execOut(t, s, name, "busybox wget -qO- http://127.0.0.1:8000/"); !strings.Contains(got, "still-serving") {
		t.Fatalf("the HTTP server inside does not answer: %q", got)
	}
	if !testkit.Within(patience, func() bool { return countNow(t, s, name) >= 10 }) {
		t.Fatal("the counter does not count")
	}

	t0 := time.Now()
	st, e, body := envCall(t, s, "POST", name, "/hibernate", "")
	took := time.Since(t0)
	if st != 200 || e.State != "hibernated" || e.SavedBytes <= 0 || e.SleepReason != "requested" {
		t.Fatalf("hibernate: %d %s\n%s", st, body, s.Log())
	}
	if dockerRunning(t, host, name) {
		t.Fatal("the hibernated container still runs: its memory is still held")
	}
	t.Logf("hibernate (criu checkpoint) took %s, %d bytes saved", took.Round(time.Millisecond), e.SavedBytes)

	// agentic-mgmt restarts meanwhile: the environment is still hibernated.
	stop(t, s)
	s = restart(t, s)
	e = waitEnv(t, s, name, "hibernated")
	if e.SavedBytes <= 0 {
		t.Fatalf("after a restart the saved state's size is unknown: %+v", e)
	}
	waitHibernateCapability(t, s, "memory")

	// Woken by an exec: the counter goes on from where it was.
	t1 := time.Now()
	first := countNow(t, s, name)
	t.Logf("wake by an exec → its output: %s", time.Since(t1).Round(time.Millisecond))
	if first < 10 {
		t.Fatalf("the counter started again: %d", first)
	}
	if e := waitEnv(t, s, name, "ready"); !hasStep(e, "woke") {
		t.Fatalf("no woke event: %+v", e.Events)
	}
	if !dockerRunning(t, host, name) {
		t.Fatal("the woken container does not run")
	}
	if !testkit.Within(patience, func() bool { return countNow(t, s, name) > first+5 }) {
		t.Fatal("the counter stopped after the wake")
	}
	if got := execOut(t, s, name, "busybox wget -qO- http://127.0.0.1:8000/"); !strings.Contains(got, "still-serving") {
		t.Fatalf("the HTTP server inside does not answer after the wake: %q", got)
	}
	if got := strings.TrimSpace(execOut(t, s, name, "echo $AGENT_ID")); got != name {
		t.Fatalf("the agent came back as %q", got)
	}
	agent, err := s.Client().GetAgentWithResponse(ctx, name)
	if err != nil || agent.JSON200 == nil || (agent.JSON200.Status != restapi.Ready && agent.JSON200.Status != restapi.Busy) {
		t.Fatalf("agent after the wake: %v %s", err, agent.Body)
	}

	// The session's log: every number once, in order.
	sessionCountsOnFrom(t, s, sess.SessionId, first)

	// The host failing the restore with the checkpoint there (its
	// processes cannot be made again under a pids limit of 1): the wake
	// fails, saying why, the environment stays hibernated with its
	// checkpoint, and once the limit is back the next wake works.
	hibernated(t, s, name)
	cid := strings.TrimSpace(dockerCLI(t, host, "ps", "-aq", "--filter", "label="+docker.LabelEnv+"="+name))
	pids := strings.TrimSpace(dockerCLI(t, host, "inspect", "--format", "{{.HostConfig.PidsLimit}}", cid))
	if pids == "" || pids == "<nil>" || pids == "0" {
		pids = "-1"
	}
	dockerCLI(t, host, "update", "--pids-limit", "1", cid)
	st, _, body = envCall(t, s, "POST", name, "/wake", "")
	if st != 503 || !strings.Contains(string(body), "wake_failed") {
		t.Fatalf("wake under a pids limit of 1: %d %s", st, body)
	}
	_, e, body = envCall(t, s, "GET", name, "", "")
	if e.State != "hibernated" || !strings.HasPrefix(e.Error, "wake: ") || e.SavedBytes <= 0 || !hasStep(e, "wake_failed") {
		t.Fatalf("after a wake the host failed: %s", body)
	}
	t.Logf("a restore the host failed: %s", e.Error)
	if dockerRunning(t, host, name) {
		t.Fatal("a failed restore left the container running")
	}
	if cps, _ := filepath.Glob(filepath.Join(root, "containers", "*", "checkpoints", "*", "inventory.img")); len(cps) != 1 {
		t.Fatalf("checkpoints after a restore the host failed: %v, want the one kept", cps)
	}
	dockerCLI(t, host, "update", "--pids-limit", pids, cid)
	if st, e, body := envCall(t, s, "POST", name, "/wake", ""); st != 200 || e.State != "ready" || e.Error != "" {
		t.Fatalf("the wake after the host's failure: %d %s", st, body)
	}
	if n := countNow(t, s, name); n < first {
		t.Fatalf("the counter after the second wake: %d, it was at %d", n, first)
	}

	// Its checkpoint removed behind its back: the wake fails, saying why.
	if st, e, body := envCall(t, s, "POST", name, "/hibernate", ""); st != 200 || e.State != "hibernated" {
		t.Fatalf("second hibernate: %d %s", st, body)
	}
	cps, _ := filepath.Glob(filepath.Join(root, "containers", "*", "checkpoints", "*"))
	if len(cps) != 1 {
		t.Fatalf("checkpoints on the engine: %v, want the one of the second hibernation (the first is spent)", cps)
	}
	if err := os.RemoveAll(cps[0]); err != nil {
		t.Fatal(err)
	}
	e = wakeLeavesFailed(t, s, name, "wake without its checkpoint", "saved state", "checkpoint")
	if dockerRunning(t, host, name) {
		t.Fatal("a failed restore left the container running (a fresh start posing as a wake?)")
	}
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "rm", name); code != 0 {
		t.Fatalf("rm: %q %q", out, errOut)
	}
	if left, _ := filepath.Glob(filepath.Join(root, "containers", "*", "checkpoints")); len(left) > 0 {
		t.Fatalf("checkpoints outlived their environment: %v", left)
	}
}
