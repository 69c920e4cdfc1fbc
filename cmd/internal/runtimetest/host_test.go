package runtimetest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// hostLeftovers lists the environment's directory and any process whose
// argv is an agent with --id name.
func hostLeftovers(stateDir string) func(t *testing.T, name string) []string {
	return func(t *testing.T, name string) []string {
		var left []string
		if _, err := os.Stat(filepath.Join(stateDir, name)); err == nil {
			left = append(left, "directory "+filepath.Join(stateDir, name))
		}
		for _, pid := range agentPIDs(name) {
			left = append(left, "process "+strconv.Itoa(pid))
		}
		return left
	}
}

// agentPIDs are the live (non-zombie) processes running an agent with --id id.
func agentPIDs(id string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		argv, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(argv, []byte("\x00--id\x00"+id+"\x00")) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

func hostRuntime(t *testing.T) (*hostsup.Runtime, string) {
	dir := filepath.Join(t.TempDir(), "envs")
	return hostsup.NewRuntime(hostsup.RuntimeConfig{StateDir: dir, StopTimeout: 3 * time.Second}), dir
}

func TestHostConformance(t *testing.T) {
	link := StartLink(t, t.TempDir())
	rt, dir := hostRuntime(t)
	portstest.RunRuntimeSuite(t, link.Harness(rt, ports.EnvironmentSpec{}, hostLeftovers(dir)))
}

// TestHostRecoverAndCrash: a second runtime on the same state directory (a
// restarted server) adopts the running agent and can stop it; an agent
// killed from outside shows as failed with the reason; Start brings it back.
func TestHostRecoverAndCrash(t *testing.T) {
	ctx := context.Background()
	link := StartLink(t, t.TempDir())
	first, dir := hostRuntime(t)
	name := "host-recover"
	spec := ports.EnvironmentSpec{Name: name, Agent: link.Bootstrap}
	spec.Agent.ID, spec.Agent.Secret = name, "s3cret-"+name
	if err := link.Credentials.Put(name, spec.Agent.Secret); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hostsup.NewRuntime(hostsup.RuntimeConfig{StateDir: dir}).Destroy(context.Background(), name)
	})
	env, err := first.Provision(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, link, name, patience, "ready")

	second := hostsup.NewRuntime(hostsup.RuntimeConfig{StateDir: dir, StopTimeout: 3 * time.Second})
	got, err := second.Recover(ctx)
	if err != nil || len(got) != 1 || got[0].Name != name || got[0].State != ports.EnvRunning || got[0].RuntimeID != env.RuntimeID {
		t.Fatalf("Recover: %+v, %v; want %s running as pid %s", got, err, name, env.RuntimeID)
	}
	if out, code := runSh(t, link, name, "echo on-$AGENT_RUNTIME; pwd"); code != 0 || !strings.Contains(out, "on-host") || !strings.Contains(out, filepath.Join(dir, name, "work")) {
		t.Fatalf("command: exit %d, output %q; want on-host in the environment's work dir", code, out)
	}

	// Killed from outside: the adopting runtime reports it failed.
	pid, _ := strconv.Atoi(got[0].RuntimeID)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(patience)
	var ins ports.Environment
	for time.Now().Before(deadline) {
		if ins, err = second.Inspect(ctx, name); err == nil && ins.State == ports.EnvFailed {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ins.State != ports.EnvFailed || ins.Detail == "" {
		t.Fatalf("after kill -9: %+v, %v; want failed with a reason", ins, err)
	}
	waitStatus(t, link, name, patience, "disconnected")

	if err := second.Start(ctx, name); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, link, name, patience, "ready")
	if err := second.Destroy(ctx, name); err != nil {
		t.Fatal(err)
	}
	if left := hostLeftovers(dir)(t, name); len(left) > 0 {
		t.Fatalf("Destroy left %v", left)
	}
	if _, err := first.Inspect(ctx, name); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Fatalf("first runtime still sees %s: %v", name, err)
	}
}
