package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// Command output goes on the output data plane for an agent that offers it
// (a host agent of this build) and in OutputChunk messages for one that
// does not (AGENT_NO_OUTPUT_DATA_PLANE=1, as an agent from before it
// registers): both give the same bytes of stdout and stderr, in a pipe and
// in a PTY, and the result only once all of it is there.
func TestCommandOutputWithAndWithoutTheDataPlane(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir)
	agentSecret(t, dataDir, "old-1", "old-secret")
	startAgent(t, "old-1", "old-secret", s.AgentURL, "AGENT_NO_OUTPUT_DATA_PLANE=1")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := s.WaitAgents(ctx, "old-1"); err != nil {
		t.Fatalf("an agent without the output data plane: %v", err)
	}
	for _, agent := range []string{"host-01", "old-1"} {
		outputWholeFrom(t, s, agent, 200000, 3)
	}
}

// outputWholeFrom runs, rounds times on agent, a command writing lines
// 1..n to stdout and 500 to stderr, and one in a PTY, and checks every
// byte arrived with the result.
func outputWholeFrom(t *testing.T, s *harness.Server, agent string, n, rounds int) {
	t.Helper()
	var wantOut, wantErr strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&wantOut, "%d\n", i)
	}
	for i := 1; i <= 500; i++ {
		fmt.Fprintf(&wantErr, "e%d\n", i)
	}
	for round := range rounds {
		r := execOK(t, s, agent, restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c",
			fmt.Sprintf(`seq 1 %d; i=1; while [ $i -le 500 ]; do echo e$i >&2; i=$((i+1)); done; exit 5`, n)})})
		if r.ExitCode != 5 || r.Stdout != wantOut.String() || r.Stderr != wantErr.String() {
			t.Fatalf("%s, round %d: exit %d, %d bytes of stdout and %d of stderr (want %d and %d)", agent, round, r.ExitCode,
				len(r.Stdout), len(r.Stderr), wantOut.Len(), wantErr.Len())
		}
	}
	r := execOK(t, s, agent, restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "stty size; seq 1 20000"}), Pty: ptr(true), Cols: ptr(99), Rows: ptr(33)})
	lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(r.Stdout, "\r\n", "\n")), "\n")
	if r.ExitCode != 0 || len(lines) != 20001 || lines[0] != "33 99" || lines[20000] != "20000" {
		t.Fatalf("%s, in a PTY: exit %d, %d lines", agent, r.ExitCode, len(lines))
	}
}

// A VM's agent has one connection, its serial link: the output data
// streams go on it beside the Connect stream, multiplexed by HTTP/2.
func TestCommandOutputInAVM(t *testing.T) {
	s, name := readyVM(t, "out-vm")
	outputWholeFrom(t, s, name, 50000, 2)
}
