package e2e

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}

// connectAs opens the agent stream with the given credentials and returns the
// server's answer to the registration.
// connectAs registers as agent id with secret, declaring no runtime kind;
// nil once acknowledged.
func connectAs(t *testing.T, s *harness.Server, id, secret string) error {
	t.Helper()
	return registerAs(t, s, id, secret, sandboxv1.RuntimeKind_RUNTIME_KIND_UNSPECIFIED)
}

func TestAgentAuthentication(t *testing.T) {
	s := startServer(t, 1, "")
	for _, tc := range []struct{ name, id, secret string }{
		{"wrong secret", "host-01", "not-the-secret"},
		{"unknown agent", "ghost-agent", "whatever"},
		{"empty secret", "host-01", ""},
		{"malformed id", "../etc/passwd", "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := connectAs(t, s, tc.id, tc.secret)
			if connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Fatalf("want unauthenticated, got %v", err)
			}
		})
	}
	// The real agent binary with a wrong secret is refused and never listed.
	intruder := startAgent(t, "intruder", "guess", s.AgentURL)
	eventually(t, patience, "the intruder's log saying it was rejected", func() bool { return strings.Contains(intruder.out.String(), "rejected") })
	intruder.stop()
	resp, err := s.Client().GetAgentWithResponse(context.Background(), "intruder")
	if err != nil || resp.StatusCode() != http.StatusNotFound {
		t.Fatalf("intruder listed: %v %d %s", err, resp.StatusCode(), resp.Body)
	}
	// The genuine agent was not disturbed.
	if r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "true"}); r.ExitCode != 0 {
		t.Fatal(r)
	}
}

func agentStatus(t *testing.T, s *harness.Server, id string) restapi.AgentStatus {
	t.Helper()
	resp, err := s.Client().GetAgentWithResponse(context.Background(), id)
	if err != nil || resp.JSON200 == nil {
		return ""
	}
	return resp.JSON200.Status
}

func TestKilledAgentIsRestarted(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir)
	pid := harness.HostAgentPIDs(dataDir)["host-01"]
	if pid == 0 || !harness.Alive(pid) {
		t.Fatalf("no live host-01 pid: %v", harness.HostAgentPIDs(dataDir))
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, patience, "the registry to show host-01 gone after kill -9", func() bool {
		st := agentStatus(t, s, "host-01")
		return st == restapi.Disconnected || st == restapi.Stale
	})
	waitAgents(t, s, "host-01")
	newPid := harness.HostAgentPIDs(dataDir)["host-01"]
	if newPid == pid || !harness.Alive(newPid) {
		t.Fatalf("agent not restarted: old %d new %d", pid, newPid)
	}
	if r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "echo", Args: ptr([]string{"back"})}); r.Stdout != "back\n" {
		t.Fatal(r)
	}
}

func TestMgmtRestartKeepsHostAgents(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 2, dataDir)
	before := harness.HostAgentPIDs(dataDir)
	if len(before) != 2 {
		t.Fatalf("pids %v", before)
	}
	exitErr, err := s.Stop(syscall.SIGTERM, patience)
	if err != nil || exitErr != nil {
		t.Fatalf("SIGTERM: exit %v, %v\n%s", exitErr, err, s.Log())
	}
	for id, pid := range before {
		if !harness.Alive(pid) {
			t.Fatalf("%s (pid %d) died with agentic-mgmt", id, pid)
		}
	}
	s2 := restart(t, s)
	waitAgents(t, s2, "host-01", "host-02")
	after := harness.HostAgentPIDs(dataDir)
	for id, pid := range before {
		if after[id] != pid {
			t.Fatalf("%s: pid %d before restart, %d after (adopt, don't duplicate)", id, pid, after[id])
		}
	}
	if r := execOK(t, s2, "host-02", restapi.ExecRequest{Command: "echo", Args: ptr([]string{"still here"})}); r.Stdout != "still here\n" {
		t.Fatal(r)
	}
	// No duplicate agent processes were started.
	out, _ := exec.Command("pgrep", "-f", "--", bins.Agent+" --id host-01").Output()
	if n := len(strings.Fields(string(out))); n != 1 {
		t.Fatalf("%d host-01 processes: %s", n, out)
	}
}

func TestGRPCurlListsAndDescribesTheService(t *testing.T) {
	s := startServer(t, 0, "")
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	addr := s.AgentAddr()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", append([]string{"tool", "grpcurl", "-plaintext"}, args...)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("grpcurl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := run(addr, "list"); !strings.Contains(out, "agentic.sandbox.v1.AgentService") {
		t.Fatalf("list: %s", out)
	}
	if out := run(addr, "describe", "agentic.sandbox.v1.AgentService"); !strings.Contains(out, "rpc Connect ( stream .agentic.sandbox.v1.ConnectRequest ) returns ( stream .agentic.sandbox.v1.ConnectResponse )") {
		t.Fatalf("describe: %s", out)
	}
	if out := run("-import-path", filepath.Join(root, "api"), "-proto", "agentic/sandbox/v1/agent.proto", addr, "list"); !strings.Contains(out, "AgentService") {
		t.Fatalf("list with proto files: %s", out)
	}
	if out := run(addr, "grpc.health.v1.Health/Check"); !strings.Contains(out, "SERVING") {
		t.Fatalf("health: %s", out)
	}
}

func TestAgenticctl(t *testing.T) {
	s := startServer(t, 1, "")
	run := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bins.Ctl, append([]string{"--server", s.RESTURL, "--token", s.Token}, args...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	}
	out, errOut, code := run("exec", "host-01", "--", "sh", "-c", "echo to-out; echo to-err >&2; exit 7")
	if out != "to-out\n" || errOut != "to-err\n" || code != 7 {
		t.Fatalf("exec: %q %q %d", out, errOut, code)
	}
	out, _, code = run("agents", "list")
	if code != 0 || !strings.Contains(out, "host-01") || !strings.Contains(out, "ready") {
		t.Fatalf("agents list: %d %q", code, out)
	}
	out, _, code = run("agents", "get", "host-01")
	if code != 0 || !strings.Contains(out, `"hostname"`) {
		t.Fatalf("agents get: %d %q", code, out)
	}
	_, errOut, code = run("agents", "get", "nobody")
	if code == 0 || !strings.Contains(errOut, "agent_not_found") {
		t.Fatalf("agents get nobody: %d %q", code, errOut)
	}
}
