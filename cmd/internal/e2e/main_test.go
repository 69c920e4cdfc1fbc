// Package e2e drives the real agentic-mgmt, agentic-agent and agenticctl
// binaries over real sockets.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

var bins harness.Binaries

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agentic-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	bins, err = harness.Build(ctx, dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startServer runs agentic-mgmt with n host agents and waits until they are ready.
func startServer(t *testing.T, n int, dataDir string, env ...string) *harness.Server {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	// Agents never share the machine's tmux server (a later entry wins).
	env = append(privateTmux(t), env...)
	s, err := harness.Start(bins, harness.Options{HostAgents: n, DataDir: dataDir, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Kill()
		harness.KillHostAgents(dataDir)
		if t.Failed() {
			t.Logf("agentic-mgmt log:\n%s", s.Log())
		}
	})
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("host-%02d", i+1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitAgents(ctx, ids...); err != nil {
		t.Fatal(err)
	}
	return s
}

// privateDockerd starts a dockerd of the test's own (make test-env installs
// it) and returns its address; it stops with the test.
func privateDockerd(t *testing.T) string {
	t.Helper()
	testreq.Command(t, "dockerd", "run make test-env")
	testreq.Root(t, "a private dockerd")
	host, stop, err := harness.StartDockerd()
	if err != nil {
		t.Fatalf("private dockerd (make test-env installs it): %v", err)
	}
	t.Cleanup(stop)
	return host
}
