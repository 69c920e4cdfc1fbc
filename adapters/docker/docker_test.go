package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The engine-facing behaviour is proven against a real dockerd in
// cmd/internal/runtimetest; these need no engine.

// offline is an adapter on a socket nobody listens on.
func offline(t *testing.T) *Runtime {
	t.Helper()
	rt, err := New(Config{Host: "unix://" + filepath.Join(t.TempDir(), "none.sock")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

func validSpec(t *testing.T) ports.EnvironmentSpec {
	t.Helper()
	// A static stand-in for the agent: the engine is never reached.
	self, err := findBusybox("")
	if err != nil {
		t.Fatalf("%v: run scripts/docker-test-env.sh", err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return ports.EnvironmentSpec{Name: "ok-1", Agent: ports.AgentBootstrap{
		ID: "ok-1", Secret: "s", Binary: self, Socket: filepath.Join(dir, "agent.sock"), ServerURL: "http://127.0.0.1:1",
	}}
}

func TestProvisionRefusesBadSpecsBeforeTheEngine(t *testing.T) {
	rt := offline(t)
	closedDir := t.TempDir()
	if err := os.Chmod(closedDir, 0o700); err != nil { // only its owner may enter it
		t.Fatal(err)
	}
	// Not root's: the agent, root without capabilities, cannot enter it.
	// (Running unprivileged, the test's own user owns it, which does as well.)
	_ = os.Chown(closedDir, 65534, 65534)
	dynamic, err := os.Executable() // built with cgo for -race
	if err != nil {
		t.Fatal(err)
	}
	if static, _ := isStatic(dynamic); static {
		dynamic = "/bin/sh"
	}
	for _, c := range []struct {
		why    string
		mutate func(*ports.EnvironmentSpec)
	}{
		{"empty name", func(s *ports.EnvironmentSpec) { s.Name = "" }},
		{"slash", func(s *ports.EnvironmentSpec) { s.Name = "a/b" }},
		{"leading dot", func(s *ports.EnvironmentSpec) { s.Name = ".a" }},
		{"64 characters", func(s *ports.EnvironmentSpec) { s.Name = strings.Repeat("a", 64) }},
		{"agent id differs", func(s *ports.EnvironmentSpec) { s.Agent.ID = "other" }},
		{"no secret", func(s *ports.EnvironmentSpec) { s.Agent.Secret = "" }},
		{"no binary", func(s *ports.EnvironmentSpec) { s.Agent.Binary = "" }},
		{"missing binary", func(s *ports.EnvironmentSpec) { s.Agent.Binary = "/nonexistent/agent" }},
		{"dynamic binary", func(s *ports.EnvironmentSpec) { s.Agent.Binary = dynamic }},
		{"unknown network", func(s *ports.EnvironmentSpec) { s.Network = "carrier-pigeon" }},
		{"none without socket", func(s *ports.EnvironmentSpec) { s.Agent.Socket = "" }},
		{"closed socket dir", func(s *ports.EnvironmentSpec) { s.Agent.Socket = filepath.Join(closedDir, "agent.sock") }},
		{"bridge without any way back", func(s *ports.EnvironmentSpec) {
			s.Network, s.Agent.Socket, s.Agent.ServerURL = ports.NetworkBridge, "", ""
		}},
		{"negative memory", func(s *ports.EnvironmentSpec) { s.Resources.MemoryMB = -1 }},
		{"negative cpus", func(s *ports.EnvironmentSpec) { s.Resources.CPUs = -0.5 }},
		{"disk limit", func(s *ports.EnvironmentSpec) { s.Resources.DiskGB = 5 }},
		{"unknown profile", func(s *ports.EnvironmentSpec) { s.Profile = "admin" }},
		{"bad label key", func(s *ports.EnvironmentSpec) { s.Labels = map[string]string{"a=b": "c"} }},
	} {
		spec := validSpec(t)
		c.mutate(&spec)
		if _, err := rt.Provision(context.Background(), spec); !errors.Is(err, ports.ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", c.why, err)
		}
	}
	// A socket directory only root can enter is fine: the agent is root.
	if os.Geteuid() == 0 {
		rootOnly := t.TempDir()
		if err := os.Chmod(rootOnly, 0o700); err != nil {
			t.Fatal(err)
		}
		spec := validSpec(t)
		spec.Agent.Socket = filepath.Join(rootOnly, "agent.sock")
		if _, err := rt.Provision(context.Background(), spec); !errors.Is(err, ports.ErrRuntimeUnavailable) {
			t.Errorf("root-only socket dir: %v, want to reach the (absent) engine", err)
		}
	}
}

func TestUnreachableEngine(t *testing.T) {
	rt := offline(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.Ping(ctx); !errors.Is(err, ports.ErrRuntimeUnavailable) {
		t.Errorf("Ping: %v", err)
	}
	if _, err := rt.Provision(ctx, validSpec(t)); !errors.Is(err, ports.ErrRuntimeUnavailable) {
		t.Errorf("Provision: %v", err)
	}
	if _, err := rt.List(ctx); !errors.Is(err, ports.ErrRuntimeUnavailable) {
		t.Errorf("List: %v", err)
	}
	if _, err := rt.Inspect(ctx, "x"); !errors.Is(err, ports.ErrRuntimeUnavailable) {
		t.Errorf("Inspect: %v", err)
	}
	for op, f := range map[string]func(context.Context, string) error{
		"Start": rt.Start, "Stop": rt.Stop, "Destroy": rt.Destroy, "Pause": rt.Pause, "Resume": rt.Resume,
	} {
		if err := f(ctx, "x"); !errors.Is(err, ports.ErrRuntimeUnavailable) {
			t.Errorf("%s: %v", op, err)
		}
	}
	// Watch keeps retrying until its context ends.
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer wcancel()
	if err := rt.Watch(wctx, time.Time{}, func(Event) {}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Watch: %v, want the context's deadline", err)
	}
}

func TestOwnerAndNames(t *testing.T) {
	for _, bad := range []string{"Upper", "has.dot", "-lead", strings.Repeat("a", 32)} {
		if _, err := New(Config{Owner: bad}); err == nil {
			t.Errorf("owner %q accepted", bad)
		}
	}
	def, _ := New(Config{})
	other, _ := New(Config{Owner: "ci-2"})
	if got := def.ContainerName("dev"); got != "agentic-dev" {
		t.Errorf("default owner: %s", got)
	}
	// Owners have no dots, so the first dot ends the owner.
	if got := other.ContainerName("dev.x"); got != "agentic-ci-2.dev.x" {
		t.Errorf("owner ci-2: %s", got)
	}
}

func TestStateOf(t *testing.T) {
	for _, c := range []struct {
		s      container.State
		want   ports.EnvState
		detail string
	}{
		{container.State{Status: "running", Running: true}, ports.EnvRunning, ""},
		{container.State{Status: "paused", Running: true, Paused: true}, ports.EnvPaused, ""},
		{container.State{Status: "created"}, ports.EnvStopped, ""},
		{container.State{Status: "exited", ExitCode: 0}, ports.EnvStopped, "exit code 0"},
		{container.State{Status: "exited", ExitCode: 137, OOMKilled: true}, ports.EnvFailed, "exit code 137; killed: out of memory"},
		{container.State{Status: "exited", ExitCode: 137}, ports.EnvFailed, "exit code 137"},
		{container.State{Status: "created", Error: "mount source missing"}, ports.EnvFailed, "mount source missing"},
		{container.State{Status: "dead", Dead: true, ExitCode: 1}, ports.EnvFailed, "exit code 1"},
	} {
		got, detail := StateOf(&c.s)
		if got != c.want || detail != c.detail {
			t.Errorf("%+v: %s %q, want %s %q", c.s, got, detail, c.want, c.detail)
		}
	}
}

func TestBusyboxRootfs(t *testing.T) {
	bb, err := findBusybox("")
	if err != nil {
		t.Fatalf("%v: run scripts/docker-test-env.sh", err)
	}
	rootfs, err := BusyboxRootfs(bb)
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(rootfs))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[strings.TrimSuffix(h.Name, "/")] = h
	}
	if h := entries["bin/busybox"]; h == nil || h.Mode != 0o755 {
		t.Errorf("bin/busybox: %+v", h)
	}
	for _, applet := range []string{"bin/sh", "bin/ls", "usr/bin/id"} {
		if h := entries[applet]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/bin/busybox" {
			t.Errorf("%s: %+v", applet, h)
		}
	}
	if h := entries["tmp"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("tmp: %+v", h)
	}
}

// TestContainerConfig pins the hardened defaults the engine is given for a
// plain spec; the engine's view of them is tested in runtimetest.
func TestContainerConfig(t *testing.T) {
	rt := offline(t)
	spec := validSpec(t)
	spec.Labels = map[string]string{"project": "demo"}
	p, err := rt.validate(spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg, host := rt.containerConfig(p, DefaultTag)
	// The agent keeps only what starting and signalling its commands as
	// nobody takes; the commands get no capabilities at all.
	if host.NetworkMode != "none" || len(host.CapDrop) != 1 || host.CapDrop[0] != "ALL" ||
		!slices.Equal(host.CapAdd, []string{"SETUID", "SETGID", "KILL"}) || host.Privileged {
		t.Errorf("network %q, cap drop %v add %v, privileged %v", host.NetworkMode, host.CapDrop, host.CapAdd, host.Privileged)
	}
	if len(host.SecurityOpt) != 1 || host.SecurityOpt[0] != "no-new-privileges" {
		t.Errorf("security options %v", host.SecurityOpt)
	}
	if host.PidsLimit == nil || *host.PidsLimit != 512 || host.Memory != 0 || host.NanoCPUs != 0 || host.ReadonlyRootfs {
		t.Errorf("pids %v memory %d cpus %d read-only %v; want only the default pids limit", host.PidsLimit, host.Memory, host.NanoCPUs, host.ReadonlyRootfs)
	}
	if host.Init == nil || !*host.Init || host.RestartPolicy.Name != container.RestartPolicyDisabled {
		t.Errorf("init %v restart %q", host.Init, host.RestartPolicy.Name)
	}
	want := map[string]string{AgentPath: spec.Agent.Binary, SocketDir: filepath.Dir(spec.Agent.Socket), SecretPath: rt.secretFile(spec.Name)}
	for _, m := range host.Mounts {
		if want[m.Target] != m.Source || !m.ReadOnly {
			t.Errorf("mount %+v: want read-only from %s", m, want[m.Target])
		}
		delete(want, m.Target)
	}
	if len(want) > 0 {
		t.Errorf("not mounted: %v", want)
	}
	if cfg.User != "0:0" || cfg.Entrypoint[0] != AgentPath || len(cfg.Cmd) > 0 || cfg.StopSignal != "SIGTERM" ||
		cfg.Healthcheck == nil || cfg.Healthcheck.Test[0] != "NONE" || cfg.StopTimeout == nil || *cfg.StopTimeout != 10 {
		t.Errorf("config %+v", cfg)
	}
	for _, e := range []string{"AGENT_ID=ok-1", "AGENT_SECRET_FILE=" + SecretPath, "AGENT_RUN_AS=65534:65534", "AGENT_RUN_AS_HOME=/tmp", "MANAGEMENT_SERVER=unix://" + SocketDir + "/agent.sock", "AGENT_RUNTIME=container", "HOME=/tmp"} {
		if !slices.Contains(cfg.Env, e) {
			t.Errorf("env %v lacks %s", cfg.Env, e)
		}
	}
	for _, e := range cfg.Env {
		if strings.HasPrefix(e, "AGENT_SECRET=") {
			t.Errorf("the secret is in the container's environment: %v", cfg.Env)
		}
	}
	for k, v := range map[string]string{LabelManaged: "true", LabelOwner: "default", LabelEnv: "ok-1", LabelUserPrefix + "project": "demo"} {
		if cfg.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, cfg.Labels[k], v)
		}
	}
}
