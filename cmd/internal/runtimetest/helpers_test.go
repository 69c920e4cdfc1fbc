package runtimetest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// patience bounds a wait for what a quiet machine does in seconds: a loaded
// one (CI, two cores shared by every package) can take far longer, and a
// wait that is met ends at once.
const patience = 2 * time.Minute

// linkDir is a link directory the environments' users can search.
func linkDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// envSpec is a spec for name whose agent secret link knows.
func envSpec(t *testing.T, link *Link, name string) ports.EnvironmentSpec {
	t.Helper()
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	spec := ports.EnvironmentSpec{Name: name, Agent: link.Bootstrap}
	spec.Agent.ID = name
	spec.Agent.Secret = hex.EncodeToString(b)
	if err := link.Credentials.Put(name, spec.Agent.Secret); err != nil {
		t.Fatal(err)
	}
	return spec
}

// waitStatus waits until the agent's status is one of want.
func waitStatus(t *testing.T, link *Link, name string, timeout time.Duration, want ...string) ports.AgentInfo {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := "never seen"
	for {
		info, ok := link.Service.Agent(name)
		if ok {
			last = string(info.Status)
			if slices.Contains(want, string(info.Status)) {
				return info
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %s: status %s after %s, want %v", name, last, timeout, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runSh runs a shell script through name's agent; output and exit code.
func runSh(t *testing.T, link *Link, name, script string) (string, int) {
	t.Helper()
	r := portstest.RunScript(t, link.Service, name, script, nil)
	return r.Output, r.Exit
}
