package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1/sandboxv1connect"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

// The operator side does not ride the agent side: the operator Exec RPC is
// not served on the agent socket every container mounts, its token is
// checked before its body is read, and AGENTIC_OPERATOR_HOST puts REST and
// the WebSocket on another address than the agent port.
func TestOperatorAPIIsApartFromTheAgentSide(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir)

	// Exec through the agent socket, even with the operator token: no such RPC.
	sock := filepath.Join(dataDir, "agent-link", "agent.sock")
	overSocket := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	client := sandboxv1connect.NewAgentServiceClient(overSocket, "http://agent-socket")
	req := connect.NewRequest(&sandboxv1.ExecRequest{AgentId: "host-01", Command: &sandboxv1.CommandRequest{Command: "true"}})
	req.Header().Set("Authorization", "Bearer "+s.Token)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	stream, err := client.Exec(ctx, req)
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
	}
	if connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("Exec over the agent socket: %v, want unimplemented", err)
	}

	// Without the token, Exec answers before the (endless) body is read.
	body, feed := io.Pipe()
	defer feed.Close()
	go func() {
		chunk := make([]byte, 64<<10)
		for {
			if _, err := feed.Write(chunk); err != nil {
				return
			}
		}
	}()
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.AgentURL+sandboxv1connect.AgentServiceExecProcedure, body)
	hreq.Header.Set("Content-Type", "application/connect+proto")
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatalf("Exec without a token: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("Exec without a token: %d, want 401 before the body", resp.StatusCode)
	}

	// REST and the WebSocket on the operator host only.
	base, err := harness.FreeBasePortOn("127.0.0.2", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	split, err := harness.Start(bins, harness.Options{DataDir: t.TempDir(), BasePort: base,
		Env: []string{"LISTEN_ADDR=127.0.0.2:" + strconv.Itoa(base), "AGENTIC_OPERATOR_HOST=127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(split.Kill)
	for _, tc := range []struct {
		addr string
		open bool
	}{
		{fmt.Sprintf("127.0.0.2:%d", base), true},    // agent port
		{fmt.Sprintf("127.0.0.1:%d", base+2), true},  // REST
		{fmt.Sprintf("127.0.0.1:%d", base+1), true},  // WebSocket
		{fmt.Sprintf("127.0.0.2:%d", base+2), false}, // REST not beside the agent port
		{fmt.Sprintf("127.0.0.2:%d", base+1), false},
	} {
		c, err := net.DialTimeout("tcp", tc.addr, 10*time.Second)
		if err == nil {
			c.Close()
		}
		if (err == nil) != tc.open {
			t.Errorf("%s: reachable %v, want %v", tc.addr, err == nil, tc.open)
		}
	}
}

// /readyz counts the supervisor's host agents only, not environments'.
func TestReadinessCountsOnlyTheSupervisorsAgents(t *testing.T) {
	s := startServer(t, 1, "")
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", "extra") })
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "host", "extra"); code != 0 {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	resp, err := http.Get(s.RESTURL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "1 of 1 connected") {
		t.Fatalf("readyz: %s", b)
	}
}

// A host agent's commands see none of the server's configuration.
func TestHostAgentsInheritOnlyAnAllowlist(t *testing.T) {
	s := startServer(t, 1, "", "AIWG_SERVE_NAME=leaky", "DOCKER_HOST=unix:///nonexistent.sock")
	r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "env"})
	for _, leak := range []string{"SECRETS_DIR=", "AIWG_SERVE_NAME=", "DOCKER_HOST=", "AGENTIC_RUNTIMES=", "AGENT_SECRET="} {
		if strings.Contains(r.Stdout, leak) {
			t.Errorf("a host agent's command sees %s…:\n%s", leak, r.Stdout)
		}
	}
	if !strings.Contains(r.Stdout, "PATH=") || !strings.Contains(r.Stdout, "AGENT_ID=host-01") {
		t.Fatalf("the allowed and the agent's own variables are missing:\n%s", r.Stdout)
	}
}

// A root server runs host agents as their own unprivileged user: a mission
// on host-01 cannot read the operator token or the agents' secret hashes,
// and the agent still works (commands, sessions kept in tmux).
func TestHostAgentsRunAsTheirOwnUser(t *testing.T) {
	testreq.Root(t, "a server that runs host agents as another user")
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir, "AGENTIC_HOST_USER=agentic-host")
	r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c",
		"id -un; cat " + filepath.Join(dataDir, "operator-token") + " 2>&1; cat " + filepath.Join(dataDir, "secrets", "agent-hashes.json") +
			" 2>&1; tr '\\0' '\\n' </proc/$PPID/environ 2>&1; echo done"})})
	if strings.Contains(r.Stdout, "AGENT_SECRET=") {
		t.Fatalf("a host agent's command read its agent's environment:\n%s", r.Stdout)
	}
	if !strings.HasPrefix(r.Stdout, "agentic-host\n") || !strings.Contains(r.Stdout, "done") {
		t.Fatalf("the command ran as %q: %s", strings.SplitN(r.Stdout, "\n", 2)[0], r.Stdout)
	}
	if strings.Contains(r.Stdout, s.Token) || strings.Contains(r.Stdout, "host-01\"") {
		t.Fatalf("a host agent's command read the server's data dir:\n%s", r.Stdout)
	}
	bg := restapi.SessionBackground
	sess := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &bg, Name: ptr("mine"), Command: "sh",
		Args: ptr([]string{"-c", "echo session-as-$(id -un)"})})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	eventually(t, patience, "the session's output", func() bool {
		resp, err := s.Client().GetSessionOutput(ctx, sess.SessionId, nil)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "session-as-agentic-host")
	})
	// A host environment's agent too.
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", "own-user") })
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "host", "own-user"); code != 0 {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	r = execOK(t, s, "own-user", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "id -un; cat " + filepath.Join(dataDir, "operator-token") + " 2>&1"})})
	if !strings.HasPrefix(r.Stdout, "agentic-host\n") || strings.Contains(r.Stdout, s.Token) {
		t.Fatalf("the host environment's command: %s", r.Stdout)
	}
}

// A request whose declared body never comes holds its connection only
// until the read timeout (a minute), not forever, even on /healthz.
func TestAnUnsentBodyDoesNotHoldAConnection(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0, "")
	paths := []string{"/healthz", "/api/v1/agents/host-01/exec"}
	errs := make(chan error, len(paths))
	for _, path := range paths {
		go func() {
			c, err := net.Dial("tcp", strings.TrimPrefix(s.RESTURL, "http://"))
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", path, s.Token)
			_ = c.SetReadDeadline(time.Now().Add(100 * time.Second))
			start := time.Now()
			if _, err := io.Copy(io.Discard, c); err != nil { // until the server closes the connection
				errs <- fmt.Errorf("%s: the connection was still held after %s: %w", path, time.Since(start).Round(time.Second), err)
				return
			}
			errs <- nil
		}()
	}
	for range paths {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
