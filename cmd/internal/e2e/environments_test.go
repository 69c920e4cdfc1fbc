package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

func ctl(t *testing.T, url, token string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bins.Ctl, append([]string{"--server", url, "--token", token}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// An environment on the host runtime through the CLI and REST: created with
// progress until its agent is ready, used, stopped, started, deleted, with
// its provision time in /metrics; it survives a restart of agentic-mgmt.
func TestEnvironmentsOnTheHostRuntime(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 0, dataDir)
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", "hb-1") })

	out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "runtimes")
	if code != 0 || !strings.Contains(out, "host") {
		t.Fatalf("runtimes: %d %q %q", code, out, errOut)
	}
	out, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "host", "hb-1")
	if code != 0 || !strings.Contains(out, "hb-1: ready") || !strings.Contains(errOut, "agent_ready") {
		t.Fatalf("create: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	exe, err := s.Client().ExecCommandWithResponse(ctx, "hb-1", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "echo from-$AGENT_RUNTIME"})})
	if err != nil || exe.JSON200 == nil || !strings.Contains(exe.JSON200.Stdout, "from-host") {
		t.Fatalf("exec in the environment: %v %s", err, exe.Body)
	}
	out, _, _ = ctl(t, s.RESTURL, s.Token, "env", "list")
	if !strings.Contains(out, "hb-1") || !strings.Contains(out, "ready") {
		t.Fatalf("list: %q", out)
	}
	metrics := readMetrics(t, s.RESTURL)
	if !strings.Contains(metrics, `agentic_environment_provision_seconds_count{runtime="host"} 1`) {
		t.Fatalf("no provision time in /metrics:\n%s", metrics)
	}

	// Bad requests are refused with their reasons and leave nothing.
	_, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "docker", "hb-2")
	if code == 0 || !strings.Contains(errOut, "unknown_runtime") {
		t.Fatalf("unconfigured runtime: %d %q", code, errOut)
	}
	_, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "host", "hb-1")
	if code == 0 || !strings.Contains(errOut, "environment_exists") {
		t.Fatalf("duplicate: %d %q", code, errOut)
	}
	_, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "host", "bad/name")
	if code == 0 || !strings.Contains(errOut, "invalid_request") {
		t.Fatalf("bad name: %d %q", code, errOut)
	}
	// What the runtime does not declare is refused, not ignored.
	_, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "host", "--memory", "256", "hb-3")
	if code == 0 || !strings.Contains(errOut, "invalid_request") || !strings.Contains(errOut, "memory_mb is not enforced") {
		t.Fatalf("undeclared limit: %d %q", code, errOut)
	}
	if got, _ := s.Client().GetEnvironmentWithResponse(context.Background(), "hb-3"); got.StatusCode() != 404 {
		t.Fatalf("a refused create left %s", got.Body)
	}
	_, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "pause", "hb-1")
	if code == 0 || !strings.Contains(errOut, "not_supported") {
		t.Fatalf("pause on the host runtime: %d %q", code, errOut)
	}
	// Nor can it hibernate (hibernate: none): refused, and so is an idle
	// policy that would need it; a wake of one awake answers it as it is;
	// /metrics counts no hibernated environment.
	_, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "hibernate", "hb-1")
	if code == 0 || !strings.Contains(errOut, "not_supported") || !strings.Contains(errOut, "cannot hibernate") {
		t.Fatalf("hibernate on the host runtime: %d %q", code, errOut)
	}
	if out, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "wake", "hb-1"); code != 0 || strings.TrimSpace(out) != "hb-1: ready" {
		t.Fatalf("wake of an awake environment: %d %q %q", code, out, errOut)
	}
	_, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "host", "--idle-after", "10m", "hb-4")
	if code == 0 || !strings.Contains(errOut, "invalid_request") || !strings.Contains(errOut, "cannot hibernate") {
		t.Fatalf("idle_after on the host runtime: %d %q", code, errOut)
	}
	if m := readMetrics(t, s.RESTURL); !strings.Contains(m, "\nagentic_environments_hibernated 0\n") || !strings.Contains(m, "\nagentic_hibernated_saved_bytes 0\n") {
		t.Fatalf("no sleep metrics in /metrics:\n%s", m)
	}

	// The environment outlives agentic-mgmt and is found again.
	stop(t, s)
	s2 := restart(t, s)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := s2.Client().GetEnvironmentWithResponse(context.Background(), "hb-1")
		if err == nil && got.JSON200 != nil && got.JSON200.State == restapi.EnvReady {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("environment not ready again after the restart: %v %s", err, got.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	out, errOut, code = ctl(t, s2.RESTURL, s2.Token, "env", "stop", "hb-1")
	if code != 0 {
		t.Fatalf("stop: %q %q", out, errOut)
	}
	waitEnvState(t, s2.Client(), "hb-1", restapi.EnvStopped)
	if _, _, code = ctl(t, s2.RESTURL, s2.Token, "env", "start", "hb-1"); code != 0 {
		t.Fatal("start failed")
	}
	waitEnvState(t, s2.Client(), "hb-1", restapi.EnvReady)
	if out, errOut, code = ctl(t, s2.RESTURL, s2.Token, "env", "rm", "hb-1"); code != 0 {
		t.Fatalf("rm: %q %q", out, errOut)
	}
	if got, _ := s2.Client().GetEnvironmentWithResponse(context.Background(), "hb-1"); got.StatusCode() != 404 {
		t.Fatalf("after rm: %d %s", got.StatusCode(), got.Body)
	}
}

func waitEnvState(t *testing.T, c *restapi.ClientWithResponses, name string, want restapi.EnvironmentState) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := c.GetEnvironmentWithResponse(context.Background(), name)
		if err == nil && got.JSON200 != nil && got.JSON200.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not %s: %v %s", name, want, err, got.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func readMetrics(t *testing.T, restURL string) string {
	t.Helper()
	resp, err := http.Get(restURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Containers through the real server on a private dockerd: the agent runs
// as nobody without a network and reaches the server through the mounted
// socket; a container killed from outside shows failed and its agent gone;
// a restarted agentic-mgmt recovers the running one.
func TestEnvironmentsInDocker(t *testing.T) {
	host := privateDockerd(t)
	docker := func(args ...string) string {
		out, err := exec.Command("docker", append([]string{"-H", host}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	dataDir := t.TempDir()
	s := startServer(t, 0, dataDir, "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=host,docker")

	out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "runtimes")
	if code != 0 || !strings.Contains(out, "docker") || !strings.Contains(out, "container") {
		t.Fatalf("runtimes: %d %q %q", code, out, errOut)
	}
	for _, name := range []string{"dk-1", "dk-2"} {
		out, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "docker", name)
		if code != 0 || !strings.Contains(out, name+": ready") {
			t.Fatalf("create %s: exit %d\nstdout %q\nstderr %q", name, code, out, errOut)
		}
	}
	// Listed a page at a time.
	one := 1
	first, err := s.Client().ListEnvironmentsWithResponse(context.Background(), &restapi.ListEnvironmentsParams{Limit: &one})
	if err != nil || first.JSON200 == nil || len(first.JSON200.Environments) != 1 || first.JSON200.Environments[0].Name != "dk-1" || first.JSON200.NextCursor == nil {
		t.Fatalf("first page: %v %s", err, first.Body)
	}
	second, err := s.Client().ListEnvironmentsWithResponse(context.Background(), &restapi.ListEnvironmentsParams{Limit: &one, Cursor: first.JSON200.NextCursor})
	if err != nil || second.JSON200 == nil || len(second.JSON200.Environments) != 1 || second.JSON200.Environments[0].Name != "dk-2" || second.JSON200.NextCursor != nil {
		t.Fatalf("second page: %v %s", err, second.Body)
	}
	run := func(s *harness.Server, name, script string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		exe, err := s.Client().ExecCommandWithResponse(ctx, name, restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", script})})
		if err != nil || exe.JSON200 == nil {
			t.Fatalf("exec in %s: %v %s", name, err, exe.Body)
		}
		return exe.JSON200.Stdout
	}
	if got := run(s, "dk-1", "echo from-$AGENT_RUNTIME uid-$(id -u); ls /sys/class/net"); !strings.Contains(got, "from-container uid-65534") || strings.Contains(got, "eth0") {
		t.Fatalf("inside the container: %q; want commands as nobody and no network but lo", got)
	}
	// A workload looks for its agent's secret everywhere it could be: its
	// environment, every process's environ and memory map, the secret
	// file, docker's init. It finds none of it.
	secrets, _ := filepath.Glob(filepath.Join(dataDir, "docker-secrets", "*.dk-1.secret"))
	if len(secrets) != 1 {
		t.Fatalf("secret files %v", secrets)
	}
	raw, err := os.ReadFile(secrets[0])
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(string(raw))
	probe := `env; for p in /proc/[0-9]*; do cat $p/environ; cat $p/cmdline; head -c 65536 $p/mem; done; cat /run/agentic-secret; grep -r . /run /etc/agentic-sandbox 2>/dev/null; echo probed`
	if got := run(s, "dk-1", probe+" 2>&1"); !strings.Contains(got, "probed") || strings.Contains(got, secret) {
		t.Fatalf("a workload found its agent's secret (or the probe did not run): %q", got)
	}
	if inspect := docker("inspect", docker("ps", "-q", "--filter", "label=io.agentic-sandbox.env=dk-1")); strings.Contains(inspect, secret) {
		t.Fatal("the secret is in the container's configuration")
	}
	if !strings.Contains(readMetrics(t, s.RESTURL), `agentic_environment_provision_seconds_count{runtime="docker"} 2`) {
		t.Fatal("no docker provision times in /metrics")
	}
	// The server, not the caller, decides which networks containers get.
	_, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "docker", "--network", "bridge", "dk-3")
	if code == 0 || !strings.Contains(errOut, "not allowed on this server") {
		t.Fatalf("a bridge by default: %d %q", code, errOut)
	}
	_, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "docker", "--disk", "2", "dk-3")
	if code == 0 || !strings.Contains(errOut, "disk_gb is not enforced") {
		t.Fatalf("undeclared disk limit: %d %q", code, errOut)
	}

	// Paused, its processes are frozen; resumed, the agent works again.
	if out, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "pause", "dk-1"); code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("pause: %d %q %q", code, out, errOut)
	}
	waitEnvState(t, s.Client(), "dk-1", restapi.EnvPaused)
	if state := docker("inspect", "-f", "{{.State.Status}}", docker("ps", "-q", "--filter", "label=io.agentic-sandbox.env=dk-1")); state != "paused" {
		t.Fatalf("the engine says %q, want paused", state)
	}
	if out, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "resume", "dk-1"); code != 0 || !strings.Contains(out, "resumed") {
		t.Fatalf("resume: %d %q %q", code, out, errOut)
	}
	waitEnvState(t, s.Client(), "dk-1", restapi.EnvReady)
	if got := run(s, "dk-1", "echo thawed"); !strings.Contains(got, "thawed") {
		t.Fatalf("after resume: %q", got)
	}

	// Killed from outside.
	docker("kill", docker("ps", "-q", "--filter", "label=io.agentic-sandbox.env=dk-2"))
	waitEnvState(t, s.Client(), "dk-2", restapi.EnvFailed)
	deadline := time.Now().Add(30 * time.Second)
	for {
		a, err := s.Client().GetAgentWithResponse(context.Background(), "dk-2")
		if err == nil && (a.StatusCode() == 404 || (a.JSON200 != nil && a.JSON200.Status == "disconnected")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent of the killed container still %s", a.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// agentic-mgmt restarts; the running container is recovered and its
	// agent comes back through the new socket.
	stop(t, s)
	s2 := restart(t, s)
	waitEnvState(t, s2.Client(), "dk-1", restapi.EnvReady)
	if got := run(s2, "dk-1", "echo again"); !strings.Contains(got, "again") {
		t.Fatalf("after the restart: %q", got)
	}
	for _, name := range []string{"dk-1", "dk-2"} {
		if out, errOut, code := ctl(t, s2.RESTURL, s2.Token, "env", "rm", name); code != 0 {
			t.Fatalf("rm %s: %q %q", name, out, errOut)
		}
	}
	if left := docker("ps", "-aq", "--filter", "label=io.agentic-sandbox.managed=true"); left != "" {
		t.Fatalf("containers left: %s", left)
	}
}

// startLibvirtServer runs the server with only the libvirt runtime, on the
// machine's libvirtd (make test-env) and the tiny image (make vm-image),
// under TCG.
func startLibvirtServer(t *testing.T, env ...string) *harness.Server {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	imageDir := filepath.Join(root, "build", "vm")
	testreq.File(t, filepath.Join(imageDir, "initrd.img"), "the tiny VM image", "run make vm-image")
	testreq.File(t, "/var/run/libvirt/libvirt-sock", "libvirtd", "run make test-env")
	dataDir := t.TempDir()
	// Last, after the server is killed: no domain of this server left on
	// the machine's libvirtd, which outlives it (a pool's members are
	// destroyed in the background after `pool rm` answers).
	t.Cleanup(func() { undefineLeft(t, dataDir) })
	// QEMU runs as libvirt-qemu and must reach the data dir's vms/.
	for d := filepath.Dir(dataDir); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return startServer(t, 0, dataDir, append([]string{"AGENTIC_RUNTIMES=libvirt", "AGENTIC_VM_IMAGE_DIR=" + imageDir, "AGENTIC_LIBVIRT_ACCEL=tcg"}, env...)...)
}

// A VM through the real server on the machine's libvirtd (make test-env),
// booting the project's tiny image (make vm-image) under TCG: its progress
// shows while it boots, its agent comes over the virtio-serial channel, and
// rm leaves no domain.
func TestEnvironmentsInLibvirt(t *testing.T) {
	s := startLibvirtServer(t)
	name := fmt.Sprintf("vm-%d", time.Now().UnixNano()%100000)
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", name) })

	// The progress while it boots, as a client polling sees it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A caller cannot boot a host file of its choosing.
	shadow := "/etc/shadow"
	refused, err := s.Client().CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: "libvirt", Name: name + "-x", Image: &shadow})
	if err != nil || refused.StatusCode() != 400 || !strings.Contains(string(refused.Body), "images come only from") {
		t.Fatalf("an image outside AGENTIC_IMAGE_DIR: %v %d %s", err, refused.StatusCode(), refused.Body)
	}
	created, err := s.Client().CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: "libvirt", Name: name})
	if err != nil || created.JSON202 == nil {
		t.Fatalf("create: %v %s", err, created.Body)
	}
	states := map[restapi.EnvironmentState]bool{}
	var last *restapi.Environment
	for last == nil || last.State != restapi.EnvReady {
		got, err := s.Client().GetEnvironmentWithResponse(ctx, name)
		if err != nil || got.JSON200 == nil {
			t.Fatalf("get: %v %s", err, got.Body)
		}
		last = got.JSON200
		states[last.State] = true
		if last.State == restapi.EnvFailed {
			t.Fatalf("VM failed: %s", got.Body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !states[restapi.EnvBooting] {
		t.Errorf("never saw booting, saw %v", states)
	}
	steps := map[string]bool{}
	for _, e := range last.Events {
		steps[e.Step] = true
	}
	if !steps["agent_ready"] || len(last.Events) < 3 {
		t.Errorf("events %+v; want the steps up to agent_ready", last.Events)
	}
	exe, err := s.Client().ExecCommandWithResponse(ctx, name, restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "echo from-$AGENT_RUNTIME; ls /sys/class/net"})})
	if err != nil || exe.JSON200 == nil || !strings.Contains(exe.JSON200.Stdout, "from-vm") || strings.Contains(exe.JSON200.Stdout, "eth0") {
		t.Fatalf("exec in the VM: %v %s", err, exe.Body)
	}
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "rm", name); code != 0 {
		t.Fatalf("rm: %q %q", out, errOut)
	}
	out, err := exec.Command("virsh", "-c", "qemu:///system", "list", "--all", "--name").CombinedOutput()
	if err != nil || strings.Contains(string(out), name) {
		t.Fatalf("domain left after rm: %v %s", err, out)
	}
}

// undefineLeft powers off and undefines every domain on the machine's
// libvirtd whose environment kept its state under dataDir (a server's data
// directory), saying so: what a killed or failed server left behind.
func undefineLeft(t *testing.T, dataDir string) {
	virsh := func(args ...string) ([]byte, error) {
		return exec.Command("virsh", append([]string{"-c", "qemu:///system"}, args...)...).CombinedOutput()
	}
	names, err := virsh("list", "--all", "--name")
	if err != nil {
		t.Logf("listing domains: %v %s", err, names)
		return
	}
	for _, dom := range strings.Fields(string(names)) {
		if !strings.HasPrefix(dom, "agentic-") {
			continue
		}
		xml, err := virsh("dumpxml", dom)
		if err != nil || !strings.Contains(string(xml), dataDir+"/") {
			continue
		}
		_, _ = virsh("destroy", dom)
		out, err := virsh("undefine", "--managed-save", dom)
		t.Logf("domain %s was left; undefined: %v %s", dom, err, out)
	}
}
