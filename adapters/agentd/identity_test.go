package agentd

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func renameMsg(id, secret string) *sandboxv1.ConnectResponse {
	return &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Rename{Rename: &sandboxv1.Rename{AgentId: id, Secret: secret}}}
}

// A rename: the identity is kept in the identity file first (0600), the
// stream ends and the agent registers again at once (not after its
// backoff) as the new id with the new secret, its commands see the new
// AGENT_ID, and a restarted agent reads the identity back.
func TestRenameRegistersAgainAtOnceAsTheNewIdentity(t *testing.T) {
	cp, url := startCP(t)
	r := newFakeRunner()
	cfg := testConfig(url, r)
	// A backoff would outlast nextSession's wait: only the rename's
	// connecting again at once brings the next session.
	cfg.BackoffMin, cfg.BackoffMax = time.Hour, time.Hour
	cfg.IdentityFile = filepath.Join(t.TempDir(), "state", "identity")
	runAgent(t, cfg)
	s := cp.nextSession(t)

	// Refused: no usable id or secret; the agent stays who it is.
	s.send(renameMsg("../bad", "s"))
	s.send(renameMsg("caller", ""))
	s.send(commandMsg(&sandboxv1.CommandRequest{CommandId: "c0", Command: "true"}))
	p0 := r.next(t)
	if env := p0.spec.Env; env["AGENT_ID"] != "" {
		t.Fatalf("a refused rename changed the agent: %v", env)
	}
	p0.exit(ports.CommandResult{})
	for s.next(t).GetCommandResult().GetCommandId() != "c0" {
	}
	if _, err := os.Stat(cfg.IdentityFile); !os.IsNotExist(err) {
		t.Fatalf("a refused rename wrote the identity file: %v", err)
	}

	s.send(renameMsg("caller", "new-secret"))
	next := cp.nextSession(t)
	if next.header.Get("x-agent-id") != "caller" || next.header.Get("x-agent-secret") != "new-secret" || next.reg.GetAgentId() != "caller" {
		t.Fatalf("registered again as %q/%q (registration %q)", next.header.Get("x-agent-id"), next.header.Get("x-agent-secret"), next.reg.GetAgentId())
	}
	// The old identity's finished command is not the new one's to report.
	for m := next.recv(t); ; m = next.recv(t) {
		if next.isConnectReport(m) {
			if n := len(m.GetSessionReport().GetSessions()); n != 0 {
				t.Fatalf("the renamed agent reports %d commands of its old identity: %v", n, m.GetSessionReport())
			}
			break
		}
	}
	fi, err := os.Stat(cfg.IdentityFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("identity file: %v %v", fi, err)
	}
	id, secret, ok, err := ReadIdentityFile(cfg.IdentityFile)
	if err != nil || !ok || id != "caller" || secret != "new-secret" {
		t.Fatalf("identity file holds %q %q %v %v", id, secret, ok, err)
	}
	next.send(commandMsg(&sandboxv1.CommandRequest{CommandId: "c1", Command: "true", Env: map[string]string{"AGENT_ID": "spoofed"}}))
	if env := r.next(t).spec.Env; env["AGENT_ID"] != "caller" {
		t.Fatalf("a command after the rename sees AGENT_ID %q", env["AGENT_ID"])
	}
}

func TestReadIdentityFile(t *testing.T) {
	dir := t.TempDir()
	if _, _, ok, err := ReadIdentityFile(filepath.Join(dir, "none")); ok || err != nil {
		t.Fatalf("no file: %v %v", ok, err)
	}
	for _, bad := range []string{"", "AGENT_ID=x\n", "AGENT_SECRET=s\n", "AGENT_ID=../x\nAGENT_SECRET=s\n"} {
		p := filepath.Join(dir, "bad")
		if err := os.WriteFile(p, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, ok, err := ReadIdentityFile(p); ok || err == nil {
			t.Fatalf("%q: accepted", bad)
		}
	}
}
