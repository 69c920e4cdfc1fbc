// Package e2e drives the real agentic-mgmt, agentic-agent and agenticctl
// binaries over real sockets.
package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

var bins harness.Binaries

func TestMain(m *testing.M) {
	// Shared with the other packages that run the binaries: built once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	var err error
	bins, err = harness.BuildShared(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	// Shared engines (the Kubernetes test cluster) stop when the tests are done.
	harness.StopEngines()
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
	waitAgents(t, s, ids...)
	return s
}

// restDo sends one request to s's REST API, with body as contentType when
// given; prepare adds its credentials (and whatever else it needs).
func restDo(t *testing.T, s *harness.Server, method, path, contentType, body string, prepare func(*http.Request)) (int, http.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.RESTURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	prepare(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// patience bounds a wait for what a quiet machine does in a second or two:
// a loaded one (CI, two cores shared by every package) can take far longer,
// and a wait that is met ends at once.
const patience = 2 * time.Minute

// quickReconnect, in a server's environment, has its host agents retry a
// lost link after 300 ms instead of 5 s (AGENT_RECONNECT_MIN): for tests
// that kill agentic-mgmt again and again and are not about the backoff.
const quickReconnect = "AGENT_RECONNECT_MIN=300ms"

// waitAgents waits until each id is connected to s.
func waitAgents(t *testing.T, s *harness.Server, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := s.WaitAgents(ctx, ids...); err != nil {
		t.Fatal(err)
	}
}

// stop sends agentic-mgmt SIGTERM and waits for it to exit.
func stop(t *testing.T, s *harness.Server) {
	t.Helper()
	if _, err := s.Stop(syscall.SIGTERM, patience); err != nil {
		t.Fatalf("%v\n%s", err, s.Log())
	}
}

// restart starts s, which has exited, again on its data dir and ports; the
// new server ends with the test.
func restart(t *testing.T, s *harness.Server) *harness.Server {
	t.Helper()
	s2, err := s.Restart()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s2.Kill()
		if t.Failed() {
			t.Logf("restarted agentic-mgmt log:\n%s", s2.Log())
		}
	})
	return s2
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
