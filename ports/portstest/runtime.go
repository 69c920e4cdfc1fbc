package portstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// RuntimeHarness is what the runtime suite needs: the adapter under test,
// and a live agent link (a real agent service listening on ServerURL and
// Socket) to see the environments' agents register and to run commands.
type RuntimeHarness struct {
	Runtime     ports.Runtime
	Link        ports.AgentLink
	Files       ports.AgentFiles
	Agents      ports.AgentDirectory
	Credentials ports.AgentCredentials
	// Bootstrap is the template for every environment's agent; the suite
	// fills in ID and Secret.
	Bootstrap ports.AgentBootstrap
	// Spec is the base spec (image, resources) the suite provisions with.
	Spec ports.EnvironmentSpec
	// Leftovers lists what the engine still holds for an environment name
	// (containers, domains, disks, sockets, processes); empty after Destroy.
	Leftovers func(t *testing.T, name string) []string
	// BootTimeout bounds provision → agent ready (VMs under TCG are slow).
	BootTimeout time.Duration
}

// RunRuntimeSuite is the conformance suite of ports.Runtime.
func RunRuntimeSuite(t *testing.T, h RuntimeHarness) {
	if h.BootTimeout <= 0 {
		h.BootTimeout = 30 * time.Second
	}
	t.Run("Capabilities", func(t *testing.T) { rtCapabilities(t, h) })
	t.Run("Ping", func(t *testing.T) {
		if err := h.Runtime.Ping(context.Background()); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	})
	t.Run("InvalidSpec", func(t *testing.T) { rtInvalid(t, h) })
	t.Run("NotFound", func(t *testing.T) { rtNotFound(t, h) })
	t.Run("Lifecycle", func(t *testing.T) { rtLifecycle(t, h) })
}

func rtCapabilities(t *testing.T, h RuntimeHarness) {
	c := h.Runtime.Capabilities()
	if c.Runtime == "" {
		t.Error("capabilities name no runtime")
	}
	switch c.Isolation {
	case ports.KindHost, ports.KindContainer, ports.KindVM:
	default:
		t.Errorf("isolation %q is not host, container or vm", c.Isolation)
	}
	if len(c.NetworkModes) == 0 {
		t.Error("no network modes declared")
	}
	// A mode outside the vocabulary could never be asked for: the API
	// refuses unknown words before a runtime sees them.
	for _, m := range c.NetworkModes {
		if !m.Valid() {
			t.Errorf("network mode %q is not one of %s", m, ports.NetworkModeList(ports.KnownNetworkModes))
		}
	}
}

// newEnvName is a fresh name per test run, so a leftover of an earlier
// failed run cannot make a test pass or fail.
func newEnvName(t *testing.T) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "conf-" + hex.EncodeToString(b)
}

func (h RuntimeHarness) spec(t *testing.T, name string) ports.EnvironmentSpec {
	t.Helper()
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	spec := h.Spec
	spec.Name = name
	spec.Agent = h.Bootstrap
	spec.Agent.ID = name
	spec.Agent.Secret = hex.EncodeToString(secret)
	if err := h.Credentials.Put(name, spec.Agent.Secret); err != nil {
		t.Fatalf("store agent secret: %v", err)
	}
	return spec
}

func rtInvalid(t *testing.T, h RuntimeHarness) {
	ctx := context.Background()
	type badSpec struct {
		why    string
		mutate func(*ports.EnvironmentSpec)
	}
	bad := []badSpec{
		{"empty name", func(s *ports.EnvironmentSpec) { s.Name = "" }},
		{"name with a slash", func(s *ports.EnvironmentSpec) { s.Name = "a/b" }},
		{"unknown network", func(s *ports.EnvironmentSpec) { s.Network = "carrier-pigeon" }},
		{"negative memory", func(s *ports.EnvironmentSpec) { s.Resources.MemoryMB = -1 }},
		{"no agent secret", func(s *ports.EnvironmentSpec) { s.Agent.Secret = "" }},
	}
	// Whatever the capabilities do not declare is refused, not ignored.
	c := h.Runtime.Capabilities()
	for _, l := range []ports.Limit{ports.LimitCPUs, ports.LimitMemoryMB, ports.LimitPIDs, ports.LimitDiskGB} {
		if slices.Contains(c.Limits, l) {
			continue
		}
		bad = append(bad, badSpec{"undeclared limit " + string(l), func(s *ports.EnvironmentSpec) {
			s.Resources = ports.Resources{}
			switch l {
			case ports.LimitCPUs:
				s.Resources.CPUs = 1
			case ports.LimitMemoryMB:
				s.Resources.MemoryMB = 512
			case ports.LimitPIDs:
				s.Resources.PIDs = 100
			case ports.LimitDiskGB:
				s.Resources.DiskGB = 2
			}
		}})
	}
	if !c.ReadOnlyRoot {
		bad = append(bad, badSpec{"undeclared read-only root", func(s *ports.EnvironmentSpec) { s.ReadOnlyRoot = true }})
	}
	if !c.Images {
		bad = append(bad, badSpec{"an image where none are declared", func(s *ports.EnvironmentSpec) { s.Image = "some-image" }})
	}
	for _, b := range bad {
		spec := h.spec(t, newEnvName(t))
		b.mutate(&spec)
		_, err := h.Runtime.Provision(ctx, spec)
		if !errors.Is(err, ports.ErrInvalidSpec) {
			t.Errorf("%s: Provision error %v, want ErrInvalidSpec", b.why, err)
		}
		if spec.Name != "" && !strings.Contains(spec.Name, "/") {
			if left := h.Leftovers(t, spec.Name); len(left) > 0 {
				t.Errorf("%s: a refused Provision left %v", b.why, left)
			}
		}
	}
}

func rtNotFound(t *testing.T, h RuntimeHarness) {
	ctx := context.Background()
	name := newEnvName(t)
	if _, err := h.Runtime.Inspect(ctx, name); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Errorf("Inspect of an unknown environment: %v, want ErrEnvNotFound", err)
	}
	for op, f := range map[string]func(context.Context, string) error{
		"Start": h.Runtime.Start, "Stop": h.Runtime.Stop, "Destroy": h.Runtime.Destroy,
	} {
		if err := f(ctx, name); !errors.Is(err, ports.ErrEnvNotFound) {
			t.Errorf("%s of an unknown environment: %v, want ErrEnvNotFound", op, err)
		}
	}
}

// rtLifecycle provisions an environment, sees its agent register, runs a
// command through it, stops, starts again, destroys, and checks that
// nothing is left.
func rtLifecycle(t *testing.T, h RuntimeHarness) {
	ctx := context.Background()
	name := newEnvName(t)
	spec := h.spec(t, name)
	var stepsMu sync.Mutex
	var steps []string
	spec.Progress = func(s string) {
		stepsMu.Lock()
		steps = append(steps, s)
		stepsMu.Unlock()
	}
	t.Cleanup(func() {
		_ = h.Runtime.Destroy(context.Background(), name)
	})

	env, err := h.Runtime.Provision(ctx, spec)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if env.Name != name || env.State != ports.EnvRunning {
		t.Fatalf("Provision returned %+v, want %s running", env, name)
	}
	stepsMu.Lock()
	if len(steps) == 0 {
		t.Error("Provision reported no progress")
	}
	stepsMu.Unlock()
	// A second claim on the name, with its own secret that is not stored:
	// storing it would lock the running agent out.
	dup := spec
	dup.Agent.Secret, dup.Progress = "another-secret", nil
	if _, err := h.Runtime.Provision(ctx, dup); !errors.Is(err, ports.ErrEnvExists) {
		t.Errorf("second Provision of %s: %v, want ErrEnvExists", name, err)
	}
	waitAgent(t, h, name, true)
	runEcho(t, h, name)
	t.Run("Files", func(t *testing.T) { rtFiles(t, h, name) })

	list, err := h.Runtime.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if !hasEnv(list, name) {
		t.Errorf("List %v lacks %s", list, name)
	}
	got, err := h.Runtime.Inspect(ctx, name)
	if err != nil || got.State != ports.EnvRunning || got.Runtime != h.Runtime.Capabilities().Runtime {
		t.Errorf("Inspect: %+v, %v; want running on %s", got, err, h.Runtime.Capabilities().Runtime)
	}
	recovered, err := h.Runtime.Recover(ctx)
	if err != nil || !hasEnv(recovered, name) {
		t.Errorf("Recover: %v, %v; want it to find %s", recovered, err, name)
	}

	rtPause(t, h, name)

	if err := h.Runtime.Stop(ctx, name); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	got, err = h.Runtime.Inspect(ctx, name)
	if err != nil || got.State != ports.EnvStopped {
		t.Errorf("Inspect after Stop: %+v, %v; want stopped", got, err)
	}
	waitAgent(t, h, name, false)

	if err := h.Runtime.Start(ctx, name); err != nil {
		t.Fatalf("Start: %v", err)
	}
	waitAgent(t, h, name, true)
	runEcho(t, h, name)

	if err := h.Runtime.Destroy(ctx, name); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if _, err := h.Runtime.Inspect(ctx, name); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Errorf("Inspect after Destroy: %v, want ErrEnvNotFound", err)
	}
	if left := h.Leftovers(t, name); len(left) > 0 {
		t.Errorf("Destroy left %v", left)
	}
	list, err = h.Runtime.List(ctx)
	if err != nil || hasEnv(list, name) {
		t.Errorf("List after Destroy: %v, %v", list, err)
	}
}

// rtPause checks Pause and Resume where declared, and ErrUnsupported where not.
func rtPause(t *testing.T, h RuntimeHarness, name string) {
	ctx := context.Background()
	if !h.Runtime.Capabilities().Pause {
		if err := h.Runtime.Pause(ctx, name); !errors.Is(err, ports.ErrUnsupported) {
			t.Errorf("Pause without the capability: %v, want ErrUnsupported", err)
		}
		if err := h.Runtime.Resume(ctx, name); !errors.Is(err, ports.ErrUnsupported) {
			t.Errorf("Resume without the capability: %v, want ErrUnsupported", err)
		}
		return
	}
	if err := h.Runtime.Pause(ctx, name); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if got, err := h.Runtime.Inspect(ctx, name); err != nil || got.State != ports.EnvPaused {
		t.Errorf("Inspect after Pause: %+v, %v; want paused", got, err)
	}
	if err := h.Runtime.Resume(ctx, name); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if got, err := h.Runtime.Inspect(ctx, name); err != nil || got.State != ports.EnvRunning {
		t.Errorf("Inspect after Resume: %+v, %v; want running", got, err)
	}
	waitAgent(t, h, name, true)
	runEcho(t, h, name) // the frozen agent works again
	if err := h.Runtime.Pause(ctx, "absent-"+name); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Errorf("Pause of an unknown environment: %v, want ErrEnvNotFound", err)
	}
}

func hasEnv(list []ports.Environment, name string) bool {
	for _, e := range list {
		if e.Name == name {
			return true
		}
	}
	return false
}

// waitAgent waits for the agent named name to be connected (ready or busy),
// or, when up is false, to be gone (disconnected or forgotten).
func waitAgent(t *testing.T, h RuntimeHarness, name string, up bool) {
	t.Helper()
	deadline := time.Now().Add(h.BootTimeout)
	last := "never seen"
	for time.Now().Before(deadline) {
		info, ok := h.Agents.Agent(name)
		if ok {
			last = string(info.Status)
		}
		connected := ok && info.Status.Working()
		if connected == up {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("agent %s: want connected=%v within %s, last status %s", name, up, h.BootTimeout, last)
}

// runEcho runs a command through the environment's agent and checks its
// output and exit code.
func runEcho(t *testing.T, h RuntimeHarness, name string) {
	t.Helper()
	r := RunScript(t, h.Link, name, "echo hello-from-$AGENT_ID_CHECK; exit 7", map[string]string{"AGENT_ID_CHECK": name})
	if r.Exit != 7 || !strings.Contains(r.Output, "hello-from-"+name) {
		t.Fatalf("command on %s: exit %d (%s), output %q; want 7 and hello-from-%s", name, r.Exit, r.Error, r.Output, name)
	}
}

// ScriptResult is what RunScript saw.
type ScriptResult struct {
	Output string
	Exit   int
	Error  string
	// FirstOutput is when the first output arrived (zero if none did).
	FirstOutput time.Time
}

// RunScript runs `sh -c script` on an agent through the link and waits
// (30 s at most) for it to end.
func RunScript(t *testing.T, link ports.AgentLink, agent, script string, env map[string]string) ScriptResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var r ScriptResult
	var out bytes.Buffer
	cmd, err := link.Start(ctx, agent, ports.CommandSpec{Command: "sh", Args: []string{"-c", script}, Env: env},
		ports.StartOptions{OnOutput: func(c ports.OutputChunk) {
			mu.Lock()
			if r.FirstOutput.IsZero() {
				r.FirstOutput = time.Now()
			}
			out.Write(c.Data)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatalf("start a command on %s: %v", agent, err)
	}
	select {
	case <-cmd.Done():
	case <-ctx.Done():
		t.Fatalf("command on %s did not finish", agent)
	}
	mu.Lock()
	defer mu.Unlock()
	res := cmd.Result()
	r.Output, r.Exit, r.Error = out.String(), res.ExitCode, res.Error
	return r
}
