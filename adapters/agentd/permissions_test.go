package agentd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// ask writes one line on a command's permission socket and returns the
// connection and a reader of the answer.
func ask(t *testing.T, socket, line string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

func answerOf(t *testing.T, r *bufio.Reader) permissionWire {
	t.Helper()
	line, err := r.ReadBytes('\n')
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	var w permissionWire
	if err := json.Unmarshal(line, &w); err != nil {
		t.Fatalf("answer %q: %v", line, err)
	}
	return w
}

// agentForPermissions runs an agent with a fake runner against a fake
// control plane and returns the control plane's session with it.
func agentForPermissions(t *testing.T) (*cpSession, *fakeRunner) {
	t.Helper()
	cp, url := startCP(t)
	runner := newFakeRunner()
	runAgent(t, testConfig(url, runner))
	return cp.nextSession(t), runner
}

// startAsking starts a claude command that may ask for permissions and
// returns the process the agent started for it.
func startAsking(t *testing.T, s *cpSession, runner *fakeRunner, id string) *fakeProc {
	t.Helper()
	s.send(commandMsg(&sandboxv1.CommandRequest{CommandId: id, Command: "claude", PermissionPrompts: true}))
	return runner.next(t)
}

// What a workload writes on its permission socket is hostile: malformed
// lines are denied at once and forwarded nowhere, a flood of questions is
// bounded, and only a decision for the question asked answers it.
func TestPermissionSocketTakesHostileInput(t *testing.T) {
	s, runner := agentForPermissions(t)
	p := startAsking(t, s, runner, "c1")
	socket := p.spec.Env[EnvPermissionSocket]
	if socket == "" || p.spec.Env[EnvMCPConfig] != ports.ClaudePermissionMCPConfig {
		t.Fatalf("the command's environment: %v", p.spec.Env)
	}
	for _, bad := range []string{"not json", `{"tool_name":""}`, `{"input":{"a":1}}`, `[1,2]`, strings.Repeat("x", 100<<10)} {
		_, r := ask(t, socket, bad)
		if w := answerOf(t, r); w.Allow || !strings.Contains(w.Message, "malformed") {
			t.Errorf("%.20q: %+v", bad, w)
		}
	}
	// Open questions: at most maxOpenPermissions reach the server.
	readers := make([]*bufio.Reader, 0, maxOpenPermissions)
	for i := range maxOpenPermissions {
		_, r := ask(t, socket, fmt.Sprintf(`{"tool_name":"Bash","input":{"n":%d}}`, i))
		readers = append(readers, r)
	}
	var asked []*sandboxv1.PermissionRequest
	deadline := time.Now().Add(waitTimeout)
	for len(asked) < maxOpenPermissions && time.Now().Before(deadline) {
		if pr := s.nextAny(t).GetPermissionRequest(); pr != nil {
			if pr.GetCommandId() != "c1" || pr.GetToolName() != "Bash" {
				t.Fatalf("forwarded %v", pr)
			}
			asked = append(asked, pr)
		}
	}
	if len(asked) != maxOpenPermissions {
		t.Fatalf("%d questions forwarded, want %d", len(asked), maxOpenPermissions)
	}
	_, over := ask(t, socket, `{"tool_name":"Bash","input":{}}`)
	if w := answerOf(t, over); w.Allow || !strings.Contains(w.Message, "too many") {
		t.Errorf("one question too many: %+v", w)
	}
	// A decision for an id never asked answers nothing; the real one does.
	s.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_PermissionDecision{PermissionDecision: &sandboxv1.PermissionDecision{
		CommandId: "c1", RequestId: "c1-999", Allow: true}}})
	s.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_PermissionDecision{PermissionDecision: &sandboxv1.PermissionDecision{
		CommandId: "c1", RequestId: asked[0].GetRequestId(), Allow: true, Message: "go"}}})
	answers := make(chan permissionWire, len(readers))
	for _, r := range readers {
		go func() {
			if line, err := r.ReadBytes('\n'); err == nil {
				var w permissionWire
				_ = json.Unmarshal(line, &w)
				answers <- w
			}
		}()
	}
	if w := within(t, answers, "the decided question got no answer"); !w.Allow || w.Message != "go" {
		t.Errorf("the answered question: %+v", w)
	}
	select {
	case w := <-answers:
		t.Fatalf("a question nobody decided was answered: %+v", w)
	case <-time.After(300 * time.Millisecond):
	}
}

// Every command's permission socket sits in one directory the agent makes
// once, 0711 so a command's user reaches its own socket by its unguessable
// name but lists no other, and goes with its command.
func TestPermissionSocketsShareOneUnlistableDirectory(t *testing.T) {
	s, runner := agentForPermissions(t)
	p1 := startAsking(t, s, runner, "c1")
	p2 := startAsking(t, s, runner, "c2")
	a, b := p1.spec.Env[EnvPermissionSocket], p2.spec.Env[EnvPermissionSocket]
	if a == "" || a == b || filepath.Dir(a) != filepath.Dir(b) || len(filepath.Base(a)) < 32 {
		t.Fatalf("sockets %q and %q", a, b)
	}
	if fi, err := os.Stat(filepath.Dir(a)); err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("socket directory: %v %v", fi, err)
	}
	p1.exit(ports.CommandResult{})
	for s.next(t).GetCommandResult().GetCommandId() != "c1" {
	}
	eventually(t, "c1's socket removed", func() bool { _, err := os.Stat(a); return os.IsNotExist(err) })
	if _, err := os.Stat(b); err != nil {
		t.Fatalf("c2's socket went with c1's: %v", err)
	}
}
