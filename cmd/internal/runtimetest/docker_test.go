package runtimetest

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/docker"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// TestDocker runs everything against one private dockerd: the conformance
// suite, then what only the docker runtime promises. One daemon for all
// subtests keeps the run short (a daemon start is about half a second, its
// stop more).
func TestDocker(t *testing.T) {
	d := startDockerd(t)
	t.Run("Conformance", func(t *testing.T) {
		link := StartLink(t, linkDir(t))
		rt := d.runtime(t, "conf")
		base := ports.EnvironmentSpec{
			ReadOnlyRoot: true,
			Resources:    ports.Resources{CPUs: 1, MemoryMB: 256, PIDs: 128},
		}
		h := link.Harness(rt, base, d.leftovers)
		portstest.RunRuntimeSuite(t, h)
	})
	t.Run("Hardening", func(t *testing.T) { dockerHardening(t, d) })
	t.Run("AnyImage", func(t *testing.T) { dockerAnyImage(t, d) })
	t.Run("HostNetwork", func(t *testing.T) { dockerHostNetwork(t, d) })
	t.Run("ExternalKill", func(t *testing.T) { dockerExternalKill(t, d) })
	t.Run("Recover", func(t *testing.T) { dockerRecover(t, d) })
	t.Run("ServerRestart", func(t *testing.T) { dockerServerRestart(t, d) })
	t.Run("Timings", func(t *testing.T) { dockerTimings(t, d) })
	t.Run("Hibernate", func(t *testing.T) { dockerHibernate(t, d) })
	// After the others: it restarts the daemon.
	t.Run("DaemonRestart", func(t *testing.T) { dockerDaemonRestart(t, d) })
	// Every subtest destroyed what it made; the engine holds nothing more.
	t.Run("NothingLeft", func(t *testing.T) {
		list, err := d.cli.ContainerList(context.Background(), container.ListOptions{All: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list {
			t.Errorf("container left: %v (%s)", c.Names, c.State)
		}
		if m := d.containerMounts(); len(m) > 0 {
			t.Errorf("mounts left: %v", m)
		}
	})
}

// dockerd is a private daemon of one test run.
type dockerd struct {
	bin  string
	host string
	dir  string
	cli  *client.Client // the "outside" client: anything not the adapter
	logf *os.File

	cmd    *exec.Cmd
	exited chan struct{}
	// extra are arguments of the daemon's beyond harness.DockerdArgs'.
	extra []string
}

// startDockerd starts a private dockerd, with extra arguments if given.
func startDockerd(t *testing.T, extra ...string) *dockerd {
	t.Helper()
	testreq.Command(t, "dockerd", "run make test-env (or apt-get install -y docker.io busybox-static)")
	testreq.Command(t, "busybox", "run make test-env (or apt-get install -y busybox-static)")
	testreq.Root(t, "a private dockerd")
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		t.Fatal(err)
	}
	// Short: the socket path must fit in 108 bytes.
	dir, err := os.MkdirTemp("/tmp", "dk")
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	host, _ := harness.DockerdArgs(dir)
	d := &dockerd{bin: bin, host: host, dir: dir, logf: logf, extra: extra}
	t.Cleanup(func() {
		if d.cli != nil && d.cmd != nil {
			// Whatever a failed test left; the daemon would stop them anyway.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true}); err == nil {
				for _, c := range list {
					_ = d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
				}
			}
			cancel()
		}
		d.stop(t)
		if d.cli != nil {
			d.cli.Close()
		}
		logf.Close()
		d.checkGone(t)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	cli, err := client.NewClientWithOpts(client.WithHost(d.host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	d.cli = cli
	d.start(t)
	return d
}

// start runs the daemon on d's directories and waits until it answers.
func (d *dockerd) start(t *testing.T) {
	t.Helper()
	_, args := harness.DockerdArgs(d.dir)
	cmd := exec.Command(d.bin, append(args, d.extra...)...)
	cmd.Stdout, cmd.Stderr = d.logf, d.logf
	// A test binary that dies (panic, timeout) takes its daemon along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start dockerd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	d.cmd, d.exited = cmd, exited
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := d.cli.Ping(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			d.cmd = nil
			t.Fatalf("private dockerd exited before answering (%s; %s):\n%s", cmd.ProcessState, strings.Join(cmd.Args, " "), d.log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Since(start) > patience {
			t.Fatalf("dockerd did not answer within %v (%v):\n%s", patience, err, d.log())
		}
	}
	t.Logf("private dockerd ready in %s at %s", time.Since(start).Round(time.Millisecond), d.host)
}

// stop ends the daemon (its containers stop with it).
func (d *dockerd) stop(t *testing.T) {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(patience):
		_ = d.cmd.Process.Kill()
		<-d.exited
		t.Errorf("dockerd ignored SIGTERM for %v:\n%s", patience, d.log())
	}
	d.cmd = nil
	unmountUnder(t, d.dir)
}

func (d *dockerd) log() string {
	b, _ := os.ReadFile(d.logf.Name())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// checkGone fails the test if, after the daemon stopped, any process
// (its containerd, a shim, a container's process) still runs off d's
// directory or anything is mounted under it, and then ends those processes
// (all started by this test's daemon) so that none outlives the run.
func (d *dockerd) checkGone(t *testing.T) {
	var procs []int
	var mounts []string
	// A stopping containerd takes its shims down within a moment.
	for deadline := time.Now().Add(patience); ; {
		procs, mounts = procsUsing(d.dir), mountsUnder(d.dir)
		if len(procs) == 0 && len(mounts) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, pid := range procs {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		t.Errorf("process %d outlived the private dockerd: %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(mounts) > 0 {
		t.Errorf("still mounted after the daemon stopped: %v", mounts)
		unmountUnder(t, d.dir)
	}
}

// procsUsing lists the processes whose command line names dir (zombies
// have none and hold nothing).
func procsUsing(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(b, []byte(dir+"/")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// mountsUnder lists the mount points in or below dir.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	return points
}

// containerMounts lists the mounts of a running daemon that belong to
// containers (root filesystems, network namespaces, shm): everything under
// its directory but its own data-root bind and the host network namespace
// it keeps for "host" containers.
func (d *dockerd) containerMounts() []string {
	var out []string
	for _, m := range mountsUnder(d.dir) {
		if m != d.dir+"/root" && m != d.dir+"/exec/netns/default" {
			out = append(out, m)
		}
	}
	return out
}

// unmountUnder detaches what dockerd left mounted in dir (it keeps the
// host's netns bound at exec/netns/default after it exits).
func unmountUnder(t *testing.T, dir string) {
	points := mountsUnder(dir)
	// Deepest first.
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			t.Logf("unmount %s: %v", p, err)
		}
	}
}

// runtime is an adapter on d for one owner, closed at the end of t.
func (d *dockerd) runtime(t *testing.T, owner string) *docker.Runtime {
	t.Helper()
	return d.runtimeWith(t, docker.Config{Owner: owner, StopTimeout: 5 * time.Second})
}

func (d *dockerd) runtimeWith(t *testing.T, cfg docker.Config) *docker.Runtime {
	t.Helper()
	cfg.Host = d.host
	rt, err := docker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// leftovers lists every container, any owner, any state, labelled for
// name; and, when the engine holds no container at all (mounts cannot be
// told apart by name), the containers' mounts it still has.
func (d *dockerd) leftovers(t *testing.T, name string) []string {
	t.Helper()
	list, err := d.cli.ContainerList(context.Background(), container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelEnv+"="+name)),
	})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	var out []string
	for _, c := range list {
		out = append(out, strings.Join(c.Names, ",")+" ("+c.State+")")
	}
	all, err := d.cli.ContainerList(context.Background(), container.ListOptions{All: true})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	if len(all) == 0 {
		for _, m := range d.containerMounts() {
			out = append(out, "mount "+m)
		}
	}
	return out
}

// linkDir is a socket directory the containers' agent (nobody) can enter.
func provision(t *testing.T, rt *docker.Runtime, spec ports.EnvironmentSpec) ports.Environment {
	t.Helper()
	env, err := rt.Provision(context.Background(), spec)
	if err != nil {
		t.Fatalf("Provision %s: %v", spec.Name, err)
	}
	t.Cleanup(func() { _ = rt.Destroy(context.Background(), spec.Name) })
	return env
}

// dockerHardening checks the container the engine holds and, from inside,
// what the agent's commands can do.
func dockerHardening(t *testing.T, d *dockerd) {
	ctx := context.Background()
	link := StartLink(t, linkDir(t))
	// A Stop that sat out this timeout is told apart from a prompt one even
	// on a loaded machine.
	// A stop timeout far beyond patience: a Stop that waited it out (a
	// paused agent cannot act on SIGTERM) is told apart at any speed.
	rt := d.runtimeWith(t, docker.Config{Owner: "hard", StopTimeout: 5 * time.Minute})
	spec := envSpec(t, link, "hard-1")
	spec.ReadOnlyRoot = true
	spec.Resources = ports.Resources{CPUs: 0.5, MemoryMB: 128}
	env := provision(t, rt, spec)
	info := waitStatus(t, link, "hard-1", patience, "ready")
	if info.Runtime != "container" || info.Hostname != "hard-1" {
		t.Errorf("agent registered as runtime %q host %q, want container, hard-1", info.Runtime, info.Hostname)
	}

	c, err := d.cli.ContainerInspect(ctx, env.RuntimeID)
	if err != nil {
		t.Fatal(err)
	}
	h := c.HostConfig
	// The agent keeps what starting and signalling its commands as nobody
	// takes; the commands themselves get nothing (checked from inside).
	if !slices.Contains(h.CapDrop, "ALL") || len(h.CapAdd) != 3 || h.Privileged {
		t.Errorf("capabilities: drop %v add %v privileged %v; want ALL dropped, setuid, setgid and kill added", h.CapDrop, h.CapAdd, h.Privileged)
	}
	if !slices.ContainsFunc(h.SecurityOpt, func(s string) bool { return strings.HasPrefix(s, "no-new-privileges") }) {
		t.Errorf("security options %v lack no-new-privileges", h.SecurityOpt)
	}
	if h.NetworkMode != "none" {
		t.Errorf("network mode %q, want none", h.NetworkMode)
	}
	if h.PidsLimit == nil || *h.PidsLimit != 512 {
		t.Errorf("pids limit %v, want the default 512", h.PidsLimit)
	}
	if h.Memory != 128<<20 || h.MemorySwap != h.Memory || h.NanoCPUs != 5e8 {
		t.Errorf("memory %d swap %d nanocpus %d; want 128 MiB, no swap, 0.5 CPU", h.Memory, h.MemorySwap, h.NanoCPUs)
	}
	if !h.ReadonlyRootfs || h.Init == nil || !*h.Init || c.Config.User != "0:0" {
		t.Errorf("read-only root %v, init %v, user %q", h.ReadonlyRootfs, h.Init, c.Config.User)
	}
	if c.Config.StopTimeout == nil || *c.Config.StopTimeout != 300 || h.RestartPolicy.Name != container.RestartPolicyDisabled {
		t.Errorf("stop timeout %v, restart policy %q; want the adapter's 300 s and none", c.Config.StopTimeout, h.RestartPolicy.Name)
	}
	var agentRO, sockRO, secretRO bool
	for _, m := range c.Mounts {
		switch m.Destination {
		case docker.AgentPath:
			agentRO = !m.RW
		case docker.SocketDir:
			sockRO = !m.RW
		case docker.SecretPath:
			secretRO = !m.RW
		}
	}
	if !agentRO || !sockRO || !secretRO {
		t.Errorf("mounts %+v: want the agent binary, the socket dir and the secret read-only", c.Mounts)
	}
	for k, v := range map[string]string{docker.LabelManaged: "true", docker.LabelOwner: "hard", docker.LabelEnv: "hard-1"} {
		if c.Config.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, c.Config.Labels[k], v)
		}
	}
	if got, _ := rt.Inspect(ctx, "hard-1"); got.Resources != (ports.Resources{CPUs: 0.5, MemoryMB: 128, PIDs: 512}) || got.Network != "none" {
		t.Errorf("Inspect resources %+v network %q", got.Resources, got.Network)
	}

	// From inside: who the commands are, what they may do.
	out, code := runSh(t, link, "hard-1", `id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status
touch /probe 2>/dev/null && echo root-writable || echo root-readonly
touch /tmp/probe && echo tmp-writable
echo "home=$HOME"; echo "nets="$(ls /sys/class/net); echo "secret=${AGENT_SECRET:-unset}"
cat `+docker.SecretPath+` >/dev/null 2>&1 && echo secret-readable || echo secret-unreadable
cat /proc/1/environ >/dev/null 2>&1 && echo init-environ-readable || echo init-environ-unreadable`)
	for _, want := range []string{"65534\n", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "root-readonly",
		"tmp-writable", "home=/tmp", "nets=lo\n", "secret=unset", "secret-unreadable", "init-environ-unreadable"} {
		if !strings.Contains(out, want) {
			t.Errorf("inside the container: want %q in\n%s (exit %d)", want, out, code)
		}
	}

	// Pause freezes it; Stop of a paused environment does not wait out the timeout.
	if err := rt.Pause(ctx, "hard-1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := rt.Inspect(ctx, "hard-1"); got.State != ports.EnvPaused {
		t.Errorf("after Pause: %s, want paused", got.State)
	}
	if err := rt.Resume(ctx, "hard-1"); err != nil {
		t.Fatal(err)
	}
	if _, code := runSh(t, link, "hard-1", "exit 3"); code != 3 {
		t.Errorf("after Resume: exit %d, want 3", code)
	}
	if err := rt.Pause(ctx, "hard-1"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := rt.Stop(ctx, "hard-1"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > patience {
		t.Errorf("Stop of a paused environment took %s", took)
	}
	if got, _ := rt.Inspect(ctx, "hard-1"); got.State != ports.EnvStopped || got.Detail != "exit code 0" {
		t.Errorf("after Stop: %+v, want stopped with exit code 0 (the agent ends cleanly on SIGTERM)", got)
	}
	// Both are idempotent.
	if err := rt.Stop(ctx, "hard-1"); err != nil {
		t.Errorf("Stop of a stopped environment: %v", err)
	}
	if err := rt.Start(ctx, "hard-1"); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, "hard-1"); err != nil {
		t.Errorf("Start of a running environment: %v", err)
	}
	if got, _ := rt.Inspect(ctx, "hard-1"); got.State != ports.EnvRunning {
		t.Errorf("after Start: %s", got.State)
	}
}

// dockerAnyImage: an image with its own entrypoint, command and user still
// runs the agent; a missing image or an engine that cannot honour the
// network is refused without leftovers.
func dockerAnyImage(t *testing.T, d *dockerd) {
	ctx := context.Background()
	link := StartLink(t, linkDir(t))
	rt := d.runtime(t, "img")
	if _, err := docker.BusyboxRootfs(""); err == nil {
		t.Fatal("BusyboxRootfs of no file succeeded")
	}
	bb, _ := exec.LookPath("busybox")
	rootfs, err := docker.BusyboxRootfs(bb)
	if err != nil {
		t.Fatal(err)
	}
	body, err := d.cli.ImageImport(ctx, image.ImportSource{Source: bytes.NewReader(rootfs), SourceName: "-"}, "example.org/custom:base", image.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = bytes.NewBuffer(nil).ReadFrom(body)
	body.Close()
	// A commit, because an import cannot set a stop signal: the image gets
	// the config of the (never started) container.
	tmpl, err := d.cli.ContainerCreate(ctx, &container.Config{
		Image: "example.org/custom:base", Entrypoint: []string{"/bin/false"}, Cmd: []string{"--bogus"}, User: "1000",
		WorkingDir: "/srv", Labels: map[string]string{"team": "blue"}, StopSignal: "SIGKILL",
		Healthcheck: &container.HealthConfig{Test: []string{"CMD", "/bin/false"}, Interval: time.Second},
	}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.cli.ContainerCommit(ctx, tmpl.ID, container.CommitOptions{Reference: "example.org/custom:1"})
	if rmErr := d.cli.ContainerRemove(ctx, tmpl.ID, container.RemoveOptions{}); err == nil {
		err = rmErr
	}
	if err != nil {
		t.Fatal(err)
	}

	spec := envSpec(t, link, "img-1")
	spec.Image = "example.org/custom:1"
	spec.Profile = docker.ProfileRoot
	spec.Labels = map[string]string{"project": "demo"}
	env := provision(t, rt, spec)
	if env.Image != "example.org/custom:1" || env.Labels["project"] != "demo" || len(env.Labels) != 1 {
		t.Errorf("Provision returned image %q labels %v", env.Image, env.Labels)
	}
	waitStatus(t, link, "img-1", patience, "ready")
	if out, code := runSh(t, link, "img-1", "id -u; pwd"); out != "0\n/srv\n" || code != 0 {
		t.Errorf("in the custom image: %q exit %d, want uid 0 in /srv", out, code)
	}
	// The image's stop signal and health check are not the agent's.
	if c, err := d.cli.ContainerInspect(ctx, env.RuntimeID); err != nil {
		t.Fatal(err)
	} else if c.Config.StopSignal != "SIGTERM" || c.Config.Healthcheck == nil || !slices.Equal(c.Config.Healthcheck.Test, []string{"NONE"}) {
		t.Errorf("stop signal %q, health check %+v; want SIGTERM and none", c.Config.StopSignal, c.Config.Healthcheck)
	}
	if err := rt.Stop(ctx, "img-1"); err != nil {
		t.Fatal(err)
	}
	if got, err := rt.Inspect(ctx, "img-1"); err != nil || got.State != ports.EnvStopped || got.Detail != "exit code 0" {
		t.Errorf("after Stop: %+v, %v; want a clean exit (SIGTERM, not the image's SIGKILL)", got, err)
	}

	for _, c := range []struct {
		why    string
		mutate func(*ports.EnvironmentSpec)
	}{
		{"missing image", func(s *ports.EnvironmentSpec) { s.Image = "example.org/nowhere:1" }},
		{"malformed image reference", func(s *ports.EnvironmentSpec) { s.Image = "Not An/Image!" }},
		{"bridge on a daemon without one", func(s *ports.EnvironmentSpec) { s.Network = ports.NetworkBridge }},
		{"disk limit", func(s *ports.EnvironmentSpec) { s.Resources.DiskGB = 1 }},
		{"unknown profile", func(s *ports.EnvironmentSpec) { s.Profile = "superuser" }},
		{"agent id not the name", func(s *ports.EnvironmentSpec) { s.Agent.ID = "other" }},
		{"more CPUs than the machine", func(s *ports.EnvironmentSpec) { s.Resources.CPUs = 4096 }},
	} {
		spec := envSpec(t, link, "img-bad")
		c.mutate(&spec)
		if _, err := rt.Provision(ctx, spec); !errors.Is(err, ports.ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", c.why, err)
		}
		if left := d.leftovers(t, "img-bad"); len(left) > 0 {
			t.Errorf("%s: left %v", c.why, left)
		}
	}
}

// dockerHostNetwork: on the host's network the agent uses the TCP URL.
func dockerHostNetwork(t *testing.T, d *dockerd) {
	ctx := context.Background()
	link := StartLink(t, linkDir(t))
	rt := d.runtime(t, "net")
	spec := envSpec(t, link, "net-1")
	spec.Network = ports.NetworkHost
	spec.Agent.Socket = "" // prove it is not used
	env := provision(t, rt, spec)
	if env.Network != "host" {
		t.Errorf("network %q, want host", env.Network)
	}
	waitStatus(t, link, "net-1", patience, "ready")
	c, err := d.cli.ContainerInspect(ctx, env.RuntimeID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.Config.Env, "MANAGEMENT_SERVER="+link.Bootstrap.ServerURL) {
		t.Errorf("env %v lacks the TCP server URL", c.Config.Env)
	}
	if out, code := runSh(t, link, "net-1", "echo up"); out != "up\n" || code != 0 {
		t.Errorf("command: %q %d", out, code)
	}
	// Without a network and without a socket, the agent has no way back.
	spec = envSpec(t, link, "net-2")
	spec.Agent.Socket = ""
	if _, err := rt.Provision(ctx, spec); !errors.Is(err, ports.ErrInvalidSpec) {
		t.Errorf("network none without a socket: %v, want ErrInvalidSpec", err)
	}
}

// watchEvents follows rt's events from now on until the test ends, when
// Watch must return context.Canceled: the stream ended by its caller only.
func watchEvents(t *testing.T, rt *docker.Runtime) <-chan docker.Event {
	t.Helper()
	events := make(chan docker.Event, 64)
	ctx, stop := context.WithCancel(context.Background())
	watchErr := make(chan error, 1)
	since := time.Now()
	go func() { watchErr <- rt.Watch(ctx, since, func(e docker.Event) { events <- e }) }()
	t.Cleanup(func() {
		stop()
		if err := <-watchErr; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v, want context.Canceled", err)
		}
	})
	return events
}

// dockerExternalKill: a container killed behind the server's back is
// reported by Watch, inspected as stopped, and its agent is disconnected.
func dockerExternalKill(t *testing.T, d *dockerd) {
	ctx := context.Background()
	link := StartLink(t, linkDir(t))
	rt := d.runtime(t, "kill")
	events := watchEvents(t, rt)
	next := func(action string) docker.Event {
		t.Helper()
		timeout := time.After(patience)
		for {
			select {
			case e := <-events:
				if e.Name == "victim" && e.Action == action {
					return e
				}
			case <-timeout:
				t.Fatalf("no %s event for victim", action)
			}
		}
	}

	env := provision(t, rt, envSpec(t, link, "victim"))
	if e := next("start"); e.Env.State != ports.EnvRunning || e.Env.RuntimeID != env.RuntimeID {
		t.Errorf("start event %+v", e)
	}
	waitStatus(t, link, "victim", patience, "ready")

	if err := d.cli.ContainerKill(ctx, env.RuntimeID, "KILL"); err != nil {
		t.Fatal(err)
	}
	e := next("die")
	if e.ExitCode != 137 || e.Removed || e.Env.State != ports.EnvFailed || !strings.Contains(e.Env.Detail, "137") {
		t.Errorf("die event %+v; want exit 137, failed", e)
	}
	got, err := rt.Inspect(ctx, "victim")
	if err != nil || got.State != ports.EnvFailed || got.Detail != "exit code 137" {
		t.Errorf("Inspect after the kill: %+v, %v", got, err)
	}
	waitStatus(t, link, "victim", patience, "disconnected")

	// Removed from outside: a destroy event, and the adapter no longer knows it.
	if err := d.cli.ContainerRemove(ctx, env.RuntimeID, container.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if e := next("destroy"); !e.Removed {
		t.Errorf("destroy event %+v, want Removed", e)
	}
	if _, err := rt.Inspect(ctx, "victim"); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Errorf("Inspect after removal: %v", err)
	}
}

// dockerRecover: a new adapter (a restarted server) with the same owner
// finds its environment, and never lists or touches a container without
// its labels or with another owner's, even one named as its own would be.
func dockerRecover(t *testing.T, d *dockerd) {
	ctx := context.Background()
	link := StartLink(t, linkDir(t))
	first := d.runtime(t, "reca")
	env := provision(t, first, envSpec(t, link, "rec-1"))
	waitStatus(t, link, "rec-1", patience, "ready")

	foreign := func(name string, labels map[string]string) string {
		t.Helper()
		c, err := d.cli.ContainerCreate(ctx, &container.Config{Image: docker.DefaultTag, Entrypoint: []string{"sleep", "300"}, Labels: labels},
			&container.HostConfig{NetworkMode: "none"}, nil, nil, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = d.cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
		})
		if err := d.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			t.Fatal(err)
		}
		return c.ID
	}
	impostor := foreign(first.ContainerName("impostor"), nil)
	other := foreign("agentic-recb.rec-1", map[string]string{docker.LabelManaged: "true", docker.LabelOwner: "recb", docker.LabelEnv: "rec-1"})

	restarted := d.runtime(t, "reca")
	got, err := restarted.Recover(ctx)
	if err != nil || len(got) != 1 || got[0].Name != "rec-1" || got[0].RuntimeID != env.RuntimeID || got[0].State != ports.EnvRunning {
		t.Fatalf("Recover: %+v, %v; want only rec-1 running", got, err)
	}
	if list, err := d.runtime(t, "recb").List(ctx); err != nil || len(list) != 1 || list[0].RuntimeID != other {
		t.Errorf("the other owner's List: %+v, %v", list, err)
	}
	for op, f := range map[string]func(context.Context, string) error{
		"Start": restarted.Start, "Stop": restarted.Stop, "Destroy": restarted.Destroy,
	} {
		if err := f(ctx, "impostor"); !errors.Is(err, ports.ErrEnvNotFound) {
			t.Errorf("%s of an unlabelled namesake: %v, want ErrEnvNotFound", op, err)
		}
	}
	if _, err := restarted.Inspect(ctx, "impostor"); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Errorf("Inspect of an unlabelled namesake: %v", err)
	}
	if _, err := restarted.Provision(ctx, envSpec(t, link, "impostor")); !errors.Is(err, ports.ErrEnvExists) {
		t.Errorf("Provision over an unlabelled namesake: %v, want ErrEnvExists", err)
	}
	// The agent did not notice the restart.
	if out, code := runSh(t, link, "rec-1", "echo still"); out != "still\n" || code != 0 {
		t.Errorf("command after Recover: %q %d", out, code)
	}
	if err := restarted.Destroy(ctx, "rec-1"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{impostor, other} {
		c, err := d.cli.ContainerInspect(ctx, id)
		if err != nil || !c.State.Running {
			t.Errorf("foreign container %s after Destroy: %v, running=%v", id, err, err == nil && c.State.Running)
		}
	}
}

// dockerServerRestart: the agent-link socket comes back as a new file (a
// restarted server); the agent in the running container reconnects through
// the mounted directory.
func dockerServerRestart(t *testing.T, d *dockerd) {
	dir := linkDir(t)
	rt := d.runtime(t, "rst")
	ok := t.Run("before", func(t *testing.T) {
		link := StartLink(t, dir)
		env, err := rt.Provision(context.Background(), envSpec(t, link, "rst-1"))
		if err != nil || env.State != ports.EnvRunning {
			t.Fatalf("Provision: %+v, %v", env, err)
		}
		waitStatus(t, link, "rst-1", patience, "ready")
	}) // the link stops here, its socket is unlinked
	t.Cleanup(func() { _ = rt.Destroy(context.Background(), "rst-1") })
	if !ok {
		return
	}
	link := StartLink(t, dir)
	start := time.Now()
	// The agent retries after about 5 s.
	waitStatus(t, link, "rst-1", patience, "ready")
	t.Logf("agent back on the new socket after %s", time.Since(start).Round(time.Millisecond))
	if out, code := runSh(t, link, "rst-1", "echo back"); out != "back\n" || code != 0 {
		t.Errorf("command after the restart: %q %d", out, code)
	}
}

// dockerDaemonRestart: the engine restarts under a running environment.
// Watch sees the stream come back and says so; the environment is stopped
// (restart policy "no": the server decides) and Start brings its agent back.
// A hibernated one beside it is still hibernated, and wakes.
func dockerDaemonRestart(t *testing.T, d *dockerd) {
	ctx := context.Background()
	link := StartLink(t, linkDir(t))
	rt := d.runtime(t, "dmn")
	events := watchEvents(t, rt)
	provision(t, rt, envSpec(t, link, "dmn-1"))
	waitStatus(t, link, "dmn-1", patience, "ready")
	provision(t, rt, envSpec(t, link, "dmn-2"))
	waitStatus(t, link, "dmn-2", patience, "ready")
	h, err := rt.Hibernate(ctx, "dmn-2")
	if err != nil {
		t.Fatal(err)
	}

	d.stop(t)
	if err := rt.Ping(ctx); !errors.Is(err, ports.ErrRuntimeUnavailable) {
		t.Errorf("Ping of a stopped engine: %v, want ErrRuntimeUnavailable", err)
	}
	if _, err := rt.List(ctx); !errors.Is(err, ports.ErrRuntimeUnavailable) {
		t.Errorf("List on a stopped engine: %v, want ErrRuntimeUnavailable", err)
	}
	waitStatus(t, link, "dmn-1", patience, "disconnected")
	d.start(t)

	timeout := time.After(patience)
	for reconnected := false; !reconnected; {
		select {
		case e := <-events:
			reconnected = e.Action == docker.ActionReconnect
		case <-timeout:
			t.Fatal("Watch did not report its reconnect")
		}
	}
	got, err := rt.Recover(ctx)
	states := map[string]ports.Environment{}
	for _, e := range got {
		states[e.Name] = e
	}
	if err != nil || len(got) != 2 || states["dmn-1"].State != ports.EnvStopped ||
		states["dmn-2"].State != ports.EnvHibernated || !states["dmn-2"].HibernatedAt.Equal(h.At) {
		t.Fatalf("Recover after the engine restart: %+v, %v; want dmn-1 stopped, dmn-2 hibernated at %s", got, err, h.At)
	}
	woken := time.Now()
	if err := rt.Wake(ctx, "dmn-2"); err != nil {
		t.Fatal(err)
	}
	waitReconnected(t, link, "dmn-2", woken)
	if err := rt.Start(ctx, "dmn-1"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, link, "dmn-1", patience, "ready")
	if out, code := runSh(t, link, "dmn-1", "echo again"); out != "again\n" || code != 0 {
		t.Errorf("command after the engine restart: %q %d", out, code)
	}
}

// dockerTimings logs, for the default image, provision → Provision
// returns → agent ready → first output of a command, against the engine
// running `true` in the same image (through the API and through the CLI).
// AGENTIC_DOCKER_TIMING_RUNS sets the number of runs (default 5: enough
// for a median while keeping the test short; raise it for a real p99).
func dockerTimings(t *testing.T, d *dockerd) {
	runs := 5
	if v := os.Getenv("AGENTIC_DOCKER_TIMING_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("AGENTIC_DOCKER_TIMING_RUNS=%q: want a positive number", v)
		}
		runs = n
	}
	ctx := context.Background()
	link := StartLink(t, linkDir(t))
	rt := d.runtime(t, "time")
	var running, ready, output []time.Duration
	for i := range runs {
		name := "time-" + strconv.Itoa(i)
		spec := envSpec(t, link, name)
		t0 := time.Now()
		if _, err := rt.Provision(ctx, spec); err != nil {
			t.Fatal(err)
		}
		running = append(running, time.Since(t0))
		for {
			if info, ok := link.Service.Agent(name); ok && info.Status == "ready" {
				break
			}
			if time.Since(t0) > patience {
				_ = rt.Destroy(ctx, name)
				t.Fatalf("%s not ready", name)
			}
			time.Sleep(2 * time.Millisecond)
		}
		ready = append(ready, time.Since(t0))
		first := make(chan time.Duration, 1)
		cmd, err := link.Service.Start(ctx, name, ports.CommandSpec{Command: "echo", Args: []string{"hi"}},
			ports.StartOptions{OnOutput: func(ports.OutputChunk) {
				select {
				case first <- time.Since(t0):
				default:
				}
			}})
		if err != nil {
			_ = rt.Destroy(ctx, name)
			t.Fatal(err)
		}
		<-cmd.Done()
		select {
		case d := <-first:
			output = append(output, d)
		case <-time.After(patience):
			_ = rt.Destroy(ctx, name)
			t.Fatalf("%s: no output", name)
		}
		if err := rt.Destroy(ctx, name); err != nil {
			t.Fatal(err)
		}
	}

	var api []time.Duration
	for range runs {
		t0 := time.Now()
		c, err := d.cli.ContainerCreate(ctx, &container.Config{Image: docker.DefaultTag, Cmd: []string{"true"}},
			&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		waitC, errC := d.cli.ContainerWait(ctx, c.ID, container.WaitConditionNextExit)
		if err := d.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			_ = d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
			t.Fatal(err)
		}
		select {
		case <-waitC:
		case err := <-errC:
			t.Fatal(err)
		}
		if err := d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{}); err != nil {
			t.Fatal(err)
		}
		api = append(api, time.Since(t0))
	}
	t.Logf("docker runtime, default image %s, %d runs: p50 / p99 (min)", docker.DefaultTag, runs)
	t.Logf("  Provision returns (container running)   %s", stats(running))
	t.Logf("  agent ready (registered on the link)    %s", stats(ready))
	t.Logf("  first output of `echo hi` via the agent %s", stats(output))
	t.Logf("  engine API create+start+wait+remove of `true` %s", stats(api))
	// The CLI is optional: the docker.io package ships it, but the adapter
	// does not need it.
	cli, err := exec.LookPath("docker")
	if err != nil {
		t.Logf("  no docker CLI: `docker run --rm` not timed")
		return
	}
	// Both the engine's default network (on this --bridge=none daemon, a
	// bare namespace) and "none", the adapter's default.
	for _, args := range [][]string{{}, {"--network", "none"}} {
		args = append(append([]string{"-H", d.host, "run", "--rm"}, args...), docker.DefaultTag, "true")
		var took []time.Duration
		for range runs {
			t0 := time.Now()
			if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
				t.Fatalf("docker %v: %v\n%s", args, err, out)
			}
			took = append(took, time.Since(t0))
		}
		t.Logf("  `docker %s` %s", strings.Join(args[2:], " "), stats(took))
	}
}

// stats is "p50 / p99 (min)", by nearest rank: with under 100 runs the
// p99 is the slowest run.
func stats(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(i, 0)].Round(time.Millisecond)
	}
	return rank(0.50).String() + " / " + rank(0.99).String() + " (" + s[0].Round(time.Millisecond).String() + ")"
}
