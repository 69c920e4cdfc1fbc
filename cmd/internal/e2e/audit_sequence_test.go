package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// A scripted sequence of calls against the real agentic-mgmt with a host
// agent and the host runtime yields exactly the expected audit lines, in
// order: the host agent's credential issued at start (by system), tokens
// created, a failed and a good sign-in, an exec, a file written, a session
// created and killed, an environment created and deleted with its agent's
// credential issued and revoked by the caller (same request id), a call
// refused by the role (403), a token revoked and its next call 401. Each
// request's id is in the server's log on its request line; neither
// audit.jsonl nor the log holds any token, the agent secret or its hash,
// or the sign-in session's cookie.
func TestAuditSequenceOfTheRealServer(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir, "AGENTIC_RUNTIMES=host")
	const wrongToken = "wrong-sign-in-token-9e107d9d372bb6826bd8"

	call := func(method, path, contentType, body, auth string) auditAnswer {
		t.Helper()
		return auditedCall(t, s, method, path, contentType, body, auth)
	}
	const jsonType = "application/json"

	type want struct {
		op, actor, role, target string
		status                  int
		code, requestID         string
	}
	// The host agent's credential, issued by its supervisor as the server
	// started (startServer waited for the agent).
	wants := []want{{"agent.credential.issue", "system", "", "host-01", 200, "", ""}}
	expect := func(a auditAnswer, status int, w want) {
		t.Helper()
		if a.status != status {
			t.Fatalf("%s: %d %s; want %d", w.op, a.status, a.body, status)
		}
		if a.requestID == "" {
			t.Fatalf("%s: no X-Request-Id", w.op)
		}
		w.status, w.requestID = status, a.requestID
		wants = append(wants, w)
	}
	newToken := func(name, role string) (id, secret string) {
		t.Helper()
		a := call("POST", "/api/v1/tokens", jsonType, `{"name":"`+name+`","role":"`+role+`"}`, s.Token)
		var tok struct{ ID, Token string }
		if err := json.Unmarshal(a.body, &tok); err != nil || tok.ID == "" || tok.Token == "" {
			t.Fatalf("create token %s: %d %s (%v)", name, a.status, a.body, err)
		}
		expect(a, 201, want{op: "createToken", actor: "operator", role: "admin", target: tok.ID})
		return tok.ID, tok.Token
	}

	_, alice := newToken("alice", "operator")
	_, victor := newToken("victor", "viewer")

	expect(call("POST", "/api/v1/signin", jsonType, `{"token":"`+wrongToken+`"}`, ""), 401,
		want{op: "signIn", actor: "anonymous", code: "unauthorized"})
	a := call("POST", "/api/v1/signin", jsonType, `{"token":"`+alice+`"}`, "")
	expect(a, 204, want{op: "signIn", actor: "alice", role: "operator"})
	var sessionCookie string
	for _, c := range (&http.Response{Header: a.header}).Cookies() {
		if c.Name == "agentic_session" {
			sessionCookie = c.Value
		}
	}
	if len(sessionCookie) < 32 {
		t.Fatalf("sign-in: no session cookie in %v", a.header)
	}

	expect(call("POST", "/api/v1/agents/host-01/exec", jsonType, `{"command":"true"}`, alice), 200,
		want{op: "execCommand", actor: "alice", role: "operator", target: "host-01"})
	file := filepath.Join(t.TempDir(), "audited.txt")
	expect(call("PUT", "/api/v1/agents/host-01/files/content?path="+file, "application/octet-stream", "written under audit\n", alice), 204,
		want{op: "writeFile", actor: "alice", role: "operator", target: "host-01"})
	a = call("POST", "/api/v1/agents/host-01/sessions", jsonType, `{"type":"background","name":"audited","command":"sleep","args":["300"]}`, alice)
	var sess restapi.Session
	if err := json.Unmarshal(a.body, &sess); err != nil || sess.SessionId == "" {
		t.Fatalf("create session: %d %s", a.status, a.body)
	}
	expect(a, 201, want{op: "createSession", actor: "alice", role: "operator", target: "host-01"})
	expect(call("DELETE", "/api/v1/sessions/"+sess.SessionId, "", "", alice), 202,
		want{op: "killSession", actor: "alice", role: "operator", target: sess.SessionId})

	// An environment of the host runtime: its agent's credential is issued
	// while the create is answered, and revoked while the delete is.
	const env = "audit-env"
	a = call("POST", "/api/v1/environments", jsonType, `{"runtime":"host","name":"`+env+`"}`, alice)
	if a.status != 202 {
		t.Fatalf("create environment: %d %s", a.status, a.body)
	}
	wants = append(wants, want{"agent.credential.issue", "alice", "operator", env, 200, "", a.requestID})
	expect(a, 202, want{op: "createEnvironment", actor: "alice", role: "operator", target: env})
	waitEnvReady(t, s, env, patience)
	envSecret := hostEnvSecret(t, dataDir, env)
	hashes := agentHashes(t, dataDir)
	if len(hashes) != 2 {
		t.Fatalf("agent-hashes.json: %d hashes; want host-01's and %s's", len(hashes), env)
	}
	a = call("DELETE", "/api/v1/environments/"+env, "", "", alice)
	if a.status != 204 {
		t.Fatalf("delete environment: %d %s", a.status, a.body)
	}
	wants = append(wants, want{"agent.credential.revoke", "alice", "operator", env, 200, "", a.requestID})
	expect(a, 204, want{op: "deleteEnvironment", actor: "alice", role: "operator", target: env})

	expect(call("POST", "/api/v1/agents/host-01/exec", jsonType, `{"command":"true"}`, victor), 403,
		want{op: "execCommand", actor: "victor", role: "viewer", target: "host-01", code: "forbidden"})
	expect(call("DELETE", "/api/v1/tokens/alice", "", "", s.Token), 204,
		want{op: "deleteToken", actor: "operator", role: "admin", target: "alice"})
	expect(call("POST", "/api/v1/agents/host-01/exec", jsonType, `{"command":"true"}`, alice), 401,
		want{op: "execCommand", actor: "anonymous", target: "host-01", code: "unauthorized"})

	// The log as GET /api/v1/audit gives it (the reads above and this one
	// are not in it).
	var got []restapi.AuditEntry
	testkit.Eventually(t, patience, "the audit entries of the calls", func() bool {
		a := call("GET", "/api/v1/audit?limit=1000", "", "", s.Token)
		if a.status != 200 {
			t.Fatalf("GET /api/v1/audit: %d %s", a.status, a.body)
		}
		var l restapi.AuditList
		if err := json.Unmarshal(a.body, &l); err != nil {
			t.Fatal(err)
		}
		got = l.Entries
		return len(got) >= len(wants)
	})
	if len(got) != len(wants) {
		t.Fatalf("%d audit entries; want %d:\n%s", len(got), len(wants), dumpAudit(got))
	}
	for i, e := range got {
		w := wants[i]
		if e.Operation != w.op || e.Actor != w.actor || e.Role != w.role || e.Target != w.target || e.Status != w.status || e.Code != w.code || e.RequestId != w.requestID {
			t.Errorf("entry %d = %+v\n want %+v", i, e, w)
		}
		if wantClient := map[bool]string{true: "127.0.0.1", false: ""}[w.actor != "system"]; e.Client != wantClient {
			t.Errorf("entry %d: client %q; want %q", i, e.Client, wantClient)
		}
	}

	// Pages of 4 through next_cursor give the same entries once each, and
	// alice's entries alone (actor=) are hers in the same order.
	var paged, alices []restapi.AuditEntry
	for _, q := range []struct {
		query string
		out   *[]restapi.AuditEntry
	}{{"limit=4", &paged}, {"limit=4&actor=alice", &alices}} {
		cursor := ""
		for range len(wants) + 1 {
			a := call("GET", "/api/v1/audit?"+q.query+cursor, "", "", s.Token)
			var l restapi.AuditList
			if err := json.Unmarshal(a.body, &l); a.status != 200 || err != nil {
				t.Fatalf("GET /api/v1/audit?%s%s: %d %s", q.query, cursor, a.status, a.body)
			}
			*q.out = append(*q.out, l.Entries...)
			if l.NextCursor == nil {
				break
			}
			cursor = "&cursor=" + url.QueryEscape(*l.NextCursor)
		}
	}
	if dumpAudit(paged) != dumpAudit(got) {
		t.Errorf("paged by 4:\n%s\nwant:\n%s", dumpAudit(paged), dumpAudit(got))
	}
	var wantAlices []restapi.AuditEntry
	for _, e := range got {
		if e.Actor == "alice" {
			wantAlices = append(wantAlices, e)
		}
	}
	if len(wantAlices) != 9 || dumpAudit(alices) != dumpAudit(wantAlices) {
		t.Errorf("alice's entries paged by 4:\n%s\nwant (9):\n%s", dumpAudit(alices), dumpAudit(wantAlices))
	}

	// Each request id is on the request's line of the server's log.
	logText := s.Log()
	for i, w := range wants {
		if w.requestID == "" {
			continue
		}
		found := false
		for l := range strings.SplitSeq(logText, "\n") {
			if strings.Contains(l, `msg="rest: request"`) && strings.Contains(l, "request_id="+w.requestID) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("entry %d (%s): request id %s is on no request line of the server's log", i, w.op, w.requestID)
		}
	}

	// No secret anywhere: tokens, the sign-in cookie, the environment
	// agent's secret, the agents' hashes.
	raw, err := os.ReadFile(filepath.Join(dataDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), "\n"); n != len(wants) {
		t.Errorf("audit.jsonl has %d lines; want %d:\n%s", n, len(wants), raw)
	}
	secrets := map[string]string{"the operator token": s.Token, "alice's token": alice, "victor's token": victor,
		"the wrong sign-in token": wrongToken, "the sign-in cookie": sessionCookie, env + "'s agent secret": envSecret}
	for id, h := range hashes {
		secrets[id+"'s credential hash"] = h
	}
	for what, secret := range secrets {
		if strings.Contains(string(raw), secret) {
			t.Errorf("audit.jsonl holds %s", what)
		}
		if strings.Contains(logText, secret) {
			t.Errorf("the server's log holds %s", what)
		}
	}
}

// auditAnswer is an answer of the real server as the audit tests read it.
type auditAnswer struct {
	status    int
	requestID string
	body      []byte
	header    http.Header
}

// auditedCall sends one request to s's REST API, with a bearer token when
// auth is set.
func auditedCall(t *testing.T, s *harness.Server, method, path, contentType, body, auth string) auditAnswer {
	t.Helper()
	st, h, b := restDo(t, s, method, path, contentType, body, func(r *http.Request) {
		if auth != "" {
			r.Header.Set("Authorization", "Bearer "+auth)
		}
	})
	return auditAnswer{st, h.Get("X-Request-Id"), b, h}
}

// agentHashes reads the agents' credential hashes, by agent id.
func agentHashes(t *testing.T, dataDir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "secrets", "agent-hashes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("agent-hashes.json: %v", err)
	}
	return m
}

func dumpAudit(es []restapi.AuditEntry) string {
	var b strings.Builder
	for _, e := range es {
		j, _ := json.Marshal(e)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}
