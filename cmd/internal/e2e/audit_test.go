package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// The audit log of the real server: the host agent's credential issued at
// start, a session created, a kill of a
// session that does not exist, a refused sign-in are in GET /api/v1/audit
// in order, with their status, error code and the request id each answer
// carried; the reads are not; audit.jsonl in the data dir holds no token.
func TestAuditLogOfTheRealServer(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir)
	const wrongToken = "wrong-sign-in-token-d41d8cd98f00"

	call := func(method, path, body, auth string) (status int, requestID string, respBody []byte) {
		t.Helper()
		contentType := ""
		if body != "" {
			contentType = "application/json"
		}
		a := auditedCall(t, s, method, path, contentType, body, auth)
		return a.status, a.requestID, a.body
	}

	type want struct {
		actor, op, target, code string
		status                  int
		id                      string
	}
	// The host agent's credential, issued as the server started.
	wants := []want{{"system", "agent.credential.issue", "host-01", "", 200, ""}}
	st, id, body := call("POST", "/api/v1/agents/host-01/sessions", `{"type":"background","name":"audited","command":"true"}`, s.Token)
	if st != 201 {
		t.Fatalf("create session: %d %s", st, body)
	}
	wants = append(wants, want{"operator", "createSession", "host-01", "", 201, id})
	if st, _, body := call("GET", "/api/v1/agents", "", s.Token); st != 200 { // a read: not audited
		t.Fatalf("list agents: %d %s", st, body)
	}
	st, id, body = call("DELETE", "/api/v1/sessions/no-such-session", "", s.Token)
	if st != 404 {
		t.Fatalf("kill of no session: %d %s", st, body)
	}
	wants = append(wants, want{"operator", "killSession", "no-such-session", "session_not_found", 404, id})
	st, id, body = call("POST", "/api/v1/signin", `{"token":"`+wrongToken+`"}`, "")
	if st != 401 {
		t.Fatalf("a sign-in with a wrong token: %d %s", st, body)
	}
	wants = append(wants, want{"anonymous", "signIn", "", "unauthorized", 401, id})

	var got restapi.AuditList
	testkit.Eventually(t, patience, "the audit entries of the calls", func() bool {
		st, _, body := call("GET", "/api/v1/audit", "", s.Token)
		if st != 200 {
			t.Fatalf("GET /api/v1/audit: %d %s", st, body)
		}
		got = restapi.AuditList{}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		return len(got.Entries) >= len(wants)
	})
	if len(got.Entries) != len(wants) {
		t.Fatalf("%d audit entries; want %d: %+v", len(got.Entries), len(wants), got.Entries)
	}
	for i, e := range got.Entries {
		w := wants[i]
		client := "127.0.0.1"
		if w.actor == "system" {
			client = ""
		}
		if e.Actor != w.actor || e.Operation != w.op || e.Target != w.target || e.Code != w.code || e.Status != w.status || e.RequestId != w.id || e.Client != client {
			t.Errorf("entry %d = %+v; want %+v", i, e, w)
		}
		if e.RequestId == "" && w.actor != "system" {
			t.Errorf("entry %d has no request id", i)
		}
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != len(wants) {
		t.Errorf("audit.jsonl has %d lines; want %d:\n%s", n, len(wants), b)
	}
	for _, secret := range []string{s.Token, wrongToken} {
		if strings.Contains(string(b), secret) {
			t.Errorf("audit.jsonl holds a token:\n%s", b)
		}
	}
}
