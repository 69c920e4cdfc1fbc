package e2e

import (
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
)

// proc is a process a test started. The test waits for it, pass or fail: a
// process never waited for stays a zombie until the test binary exits,
// minutes later.
type proc struct {
	cmd  *exec.Cmd
	out  *testkit.Buffer
	done chan struct{}
	err  error
}

// startProc starts cmd, its output (where the caller set none) kept in
// p.out; when the test ends, a process still running gets SIGTERM, then
// SIGKILL if it has not exited a minute later, and is waited for.
func startProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, out: &testkit.Buffer{}, done: make(chan struct{})}
	if cmd.Stdout == nil {
		cmd.Stdout = p.out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = p.out
	}
	// A grandchild that keeps the output pipe open must not keep Wait
	// from returning once the process itself has ended.
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() && p.out.String() != "" {
			t.Logf("%s printed:\n%s", cmd.Path, p.out.String())
		}
	})
	return p
}

// wait is the process's exit, once it has exited.
func (p *proc) wait() error {
	<-p.done
	return p.err
}

// stop ends the process (SIGTERM, then SIGKILL a minute later) and waits
// for it; it returns at once for a process that has exited.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// startAgent runs the agent binary as agent id with secret against server,
// outside any supervisor (env adds to or overrides its settings).
func startAgent(t *testing.T, id, secret, server string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(bins.Agent, "--config", "/nonexistent")
	cmd.Env = append(append(os.Environ(), "AGENT_ID="+id, "AGENT_SECRET="+secret, "MANAGEMENT_SERVER="+server), env...)
	return startProc(t, cmd)
}

// agentSecret gives agent id the secret in dataDir's store, as an operator
// registering an agent the server does not supervise does.
func agentSecret(t *testing.T, dataDir, id, secret string) {
	t.Helper()
	hashes, err := filestore.NewAgentHashes(filepath.Join(dataDir, "secrets"))
	if err != nil {
		t.Fatal(err)
	}
	if err := hashes.Put(id, secret); err != nil {
		t.Fatal(err)
	}
}
