package runtimetest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/docker"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// TestDockerTier: the gvisor isolation tier on Docker, on one private
// dockerd whose runtimes change under it (daemon.json, reloaded by SIGHUP;
// the adapter reads them again at each Ping). Without a runtime named runsc
// no tier is offered and one asked for is refused; with runsc registered
// without --host-uds the tier is offered but refused for a network whose
// agent needs the mounted socket; registered as the README says, an
// environment of the tier runs under runsc: its agent registers and, inside,
// the kernel is gVisor's, while a plain environment beside it runs under
// runc.
func TestDockerTier(t *testing.T) {
	config := filepath.Join(t.TempDir(), "daemon.json")
	writeDaemonJSON(t, config, nil)
	d := startDockerd(t, "--config-file", config)
	link := StartLink(t, linkDir(t))
	rt := d.runtime(t, "tier")
	ctx := context.Background()

	t.Run("WithoutRunsc", func(t *testing.T) {
		if err := rt.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if tiers := rt.Capabilities().Tiers; len(tiers) != 0 {
			t.Fatalf("a daemon without runsc: tiers %v", tiers)
		}
		spec := envSpec(t, link, "tier-none")
		spec.Tier = ports.TierGVisor
		_, err := rt.Provision(ctx, spec)
		if !errors.Is(err, ports.ErrInvalidSpec) || !strings.Contains(err.Error(), `isolation "gvisor": the docker runtime offers no tier but its standard one`) {
			t.Fatalf("gvisor without runsc: %v, want ErrInvalidSpec saying no tier is offered", err)
		}
		if left := d.leftovers(t, "tier-none"); len(left) > 0 {
			t.Fatalf("a refused tier left %v", left)
		}
	})

	t.Run("GVisor", func(t *testing.T) {
		testreq.Command(t, "runsc", "run make test-env (or apt-get install -y runsc)")
		runsc, err := exec.LookPath("runsc")
		if err != nil {
			t.Fatal(err)
		}
		// Registered without --host-uds: the sandbox could not connect to
		// the agent-link socket, so a network that needs it is refused.
		// --network=none: runsc's own network stack does not start in this
		// machine's nested network namespace ("cannot run with network
		// enabled in root network namespace"); these environments have no
		// network anyway (none).
		d.reload(t, config, map[string]any{docker.GVisorRuntime: map[string]any{"path": runsc, "runtimeArgs": []string{"--network=none"}}})
		if err := rt.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if tiers := rt.Capabilities().Tiers; !slices.Equal(tiers, []string{ports.TierGVisor}) {
			t.Fatalf("a daemon with runsc: tiers %v, want [gvisor]", tiers)
		}
		spec := envSpec(t, link, "tier-nouds")
		spec.Tier = ports.TierGVisor
		if _, err := rt.Provision(ctx, spec); !errors.Is(err, ports.ErrInvalidSpec) || !strings.Contains(err.Error(), "--host-uds=open") {
			t.Fatalf("gvisor whose runsc may not reach the socket: %v, want ErrInvalidSpec naming --host-uds=open", err)
		}
		if left := d.leftovers(t, "tier-nouds"); len(left) > 0 {
			t.Fatalf("a refused tier left %v", left)
		}

		// As the README says to register it.
		d.reload(t, config, map[string]any{docker.GVisorRuntime: map[string]any{"path": runsc, "runtimeArgs": []string{"--host-uds=open", "--network=none"}}})
		if err := rt.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		spec = envSpec(t, link, "tier-g")
		spec.Tier = ports.TierGVisor
		spec.Labels = map[string]string{ports.LabelTier: ports.TierGVisor}
		env := provision(t, rt, spec)
		plain := provision(t, rt, envSpec(t, link, "tier-plain"))
		info := waitStatus(t, link, "tier-g", patience, "ready")
		if info.Runtime != "container" {
			t.Errorf("the gVisor environment's agent registered as runtime %q, want container", info.Runtime)
		}
		waitStatus(t, link, "tier-plain", patience, "ready")
		for name, want := range map[string]string{env.RuntimeID: docker.GVisorRuntime, plain.RuntimeID: "runc"} {
			c, err := d.cli.ContainerInspect(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if c.HostConfig.Runtime != want {
				t.Errorf("container %s runs under %q, want %q", c.Name, c.HostConfig.Runtime, want)
			}
		}
		if got, err := rt.Inspect(ctx, "tier-g"); err != nil || got.Labels[ports.LabelTier] != ports.TierGVisor {
			t.Errorf("Inspect: labels %v, %v; want the tier kept", got.Labels, err)
		}
		out, code := runSh(t, link, "tier-g", "uname -a; dmesg 2>&1; id -u")
		t.Logf("inside the gvisor environment (exit %d):\n%s", code, out)
		if code != 0 || !strings.Contains(out, "Starting gVisor...") || !strings.HasSuffix(out, "65534\n") {
			t.Errorf("inside the gvisor environment: exit %d\n%s\nwant gVisor's kernel log and the commands as nobody", code, out)
		}
		if out, _ := runSh(t, link, "tier-plain", "dmesg 2>&1; uname -a"); strings.Contains(out, "gVisor") {
			t.Errorf("the plain environment runs under gVisor:\n%s", out)
		}
		for _, name := range []string{"tier-g", "tier-plain"} {
			if err := rt.Destroy(ctx, name); err != nil {
				t.Fatal(err)
			}
			if left := d.leftovers(t, name); len(left) > 0 {
				t.Errorf("%s left %v", name, left)
			}
		}
	})
}

// writeDaemonJSON writes a daemon configuration with those runtimes.
func writeDaemonJSON(t *testing.T, path string, runtimes map[string]any) {
	t.Helper()
	cfg := map[string]any{}
	if runtimes != nil {
		cfg["runtimes"] = runtimes
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// reload gives the running daemon those runtimes (its configuration file
// rewritten, then SIGHUP) and waits until it reports them.
func (d *dockerd) reload(t *testing.T, config string, runtimes map[string]any) {
	t.Helper()
	writeDaemonJSON(t, config, runtimes)
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(runtimes[docker.GVisorRuntime])
	deadline := time.Now().Add(patience)
	for {
		info, err := d.cli.Info(context.Background())
		if err == nil {
			rt, ok := info.Runtimes[docker.GVisorRuntime]
			got, _ := json.Marshal(map[string]any{"path": rt.Path, "runtimeArgs": rt.Args})
			if ok && string(got) == string(want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not take its new runtimes %s within %v:\n%s", want, patience, d.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
