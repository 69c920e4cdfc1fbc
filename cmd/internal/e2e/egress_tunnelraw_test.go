package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// Issue 33: the same egress through an agent without raw tunnels, as one
// from before them, so that its tunnels stay Tunnel streams (the server
// logs each tunnel's kind): everything the scenario checks holds alike.
// The agent is built with AGENT_NO_TUNNEL_RAW on by default, as a
// container's environment is not the test's to set. (The Docker test
// above runs today's agent, whose tunnels are raw.)
func TestEgressThroughAnAgentWithoutRawTunnelsInDocker(t *testing.T) {
	host := privateDockerd(t)
	agent := filepath.Join(t.TempDir(), "agentic-agent")
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-ldflags", "-X main.noTunnelRawDefault=1", "-o", agent, "./cmd/agentic-agent")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the agent without raw tunnels: %v\n%s", err, out)
	}
	s := startServer(t, 0, t.TempDir(), append([]string{"DOCKER_HOST=" + host, "AGENTIC_RUNTIMES=docker", "AGENTIC_AGENT_BINARY=" + agent}, egressEnv...)...)
	egressScenario(t, s, "docker", "egress-streams")
	if log := s.Log(); !strings.Contains(log, "allowed=true") || !strings.Contains(log, "tunnel=stream") || strings.Contains(log, "tunnel=raw") {
		t.Errorf("the tunnels were not all Tunnel streams:\n%s", log)
	}
}
