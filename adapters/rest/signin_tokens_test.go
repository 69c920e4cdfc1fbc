package rest

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

const ownOrigin = "http://dash.example:8122"

// withSignInTokens keeps named tokens and lets dashboard sessions stand
// for them, as agentic-mgmt wires it (providers_signin.go).
func withSignInTokens(d *Deps) {
	d.Tokens = portsfake.NewTokens()
	d.SignIns = d.SignIns.WithTokens(signin.TokenHashes(d.Tokens, d.Clock.Now))
	d.Origins = []string{ownOrigin}
}

// signInWith signs in with secret from the server's own page; the cookie
// (nil when refused) and the answer.
func (e *env) signInWith(secret string) (*http.Cookie, response) {
	e.t.Helper()
	r := e.cookieCall("POST", "/api/v1/signin", `{"token":"`+secret+`"}`, nil)
	for _, c := range r.cookies {
		if c.Name == signin.CookieName && c.Value != "" {
			return c, r.response
		}
	}
	return nil, r.response
}

type cookieResponse struct {
	response
	cookies []*http.Cookie
}

// cookieCall sends a request with the session cookie c (nil: none) from
// the server's own origin, and checks the answer against openapi.yaml.
func (e *env) cookieCall(method, path, body string, c *http.Cookie) cookieResponse {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Origin", ownOrigin)
	if c != nil {
		req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	checkContract(e.t, req, resp.StatusCode, resp.Header, b)
	return cookieResponse{response{status: resp.StatusCode, header: resp.Header, body: b}, resp.Cookies()}
}

// A viewer's token signs the dashboard in: the cookie acts with the
// viewer's name and role (reads yes, changes 403, the audit names the
// token), and revoking the token ends the session at once, also a stream
// the page has open.
func TestSignInWithANamedToken(t *testing.T) {
	audit := portsfake.NewAuditLog()
	e := newEnv(t, withSignInTokens, func(d *Deps) { d.Audit = audit })
	view := e.namedToken("alice", "viewer", `,"labels":{"team":"payments"}`)

	c, r := e.signInWith(view)
	if r.status != 204 || c == nil {
		t.Fatalf("a viewer's sign-in: %d %s", r.status, r.body)
	}
	if !c.HttpOnly || strings.Contains(c.Value, view) {
		t.Fatalf("cookie %+v", c)
	}
	var me restapi.Me
	got := e.cookieCall("GET", "/api/v1/me", "", c)
	expect(t, got.response, 200, "")
	got.decode(t, &me)
	if me.Name != "alice" || me.Role != "viewer" || me.Labels["team"] != "payments" || me.ExpiresAt != nil {
		t.Fatalf("me with the viewer's cookie: %+v", me)
	}
	expect(t, e.cookieCall("GET", "/api/v1/agents", "", c).response, 200, "")
	denied := e.cookieCall("POST", "/api/v1/agents/a1/commands", `{"command":"true"}`, c)
	expect(t, denied.response, 403, "forbidden")
	if !strings.Contains(string(denied.body), `\"alice\"`) || !strings.Contains(string(denied.body), "viewer") {
		t.Errorf("the refusal does not name the token and its role: %s", denied.body)
	}
	expect(t, e.cookieCall("GET", "/api/v1/tokens", "", c).response, 403, "forbidden")

	// The audit log names the token, for the sign-in and the refusal.
	entries, _, err := audit.Query(ports.AuditQuery{Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, en := range entries {
		ops = append(ops, en.Operation+"/"+en.Role)
	}
	if want := "signIn/viewer|startCommand/viewer"; strings.Join(ops, "|") != want {
		t.Errorf("the audit entries of alice: %q, want %q", ops, want)
	}

	// A stream the page opened with the cookie.
	req, _ := http.NewRequest("GET", e.srv.URL+"/api/v1/changes", nil)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("the change stream with the cookie: %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("before the hello event: %v", err)
		}
		if strings.HasPrefix(line, "event: hello") {
			break
		}
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, br)
		ended <- err
	}()

	// Revoked: the session is gone at once, and what it opened ends.
	expect(t, e.call("DELETE", "/api/v1/tokens/alice", ""), 204, "")
	testkit.Receive(t, 15*time.Second, ended, "the end of the stream opened with the revoked token's cookie")
	expect(t, e.cookieCall("GET", "/api/v1/agents", "", c).response, 401, "unauthorized")
	expect(t, e.cookieCall("GET", "/api/v1/me", "", c).response, 401, "unauthorized")
	if strings.Contains(e.logs.String(), view) {
		t.Error("the named token's secret appears in the log")
	}
}

// A session never outlives its token: signed in with a token that
// expires in an hour, the cookie says so and stops reading then.
func TestSignInSessionEndsWithItsTokenExpiry(t *testing.T) {
	e := newEnv(t, withSignInTokens)
	exp := e.clock.Now().Add(time.Hour).UTC()
	sec := e.namedToken("temp", "operator", `,"expires_at":"`+exp.Format(time.RFC3339)+`"`)
	c, r := e.signInWith(sec)
	if r.status != 204 || c == nil {
		t.Fatalf("sign-in: %d %s", r.status, r.body)
	}
	if !c.Expires.Equal(exp) {
		t.Errorf("the cookie expires %v, want the token's expiry %v", c.Expires, exp)
	}
	var me restapi.Me
	got := e.cookieCall("GET", "/api/v1/me", "", c)
	expect(t, got.response, 200, "")
	got.decode(t, &me)
	if me.Name != "temp" || me.Role != "operator" || me.ExpiresAt == nil || !me.ExpiresAt.Equal(exp) {
		t.Fatalf("me: %+v", me)
	}
	// An operator's cookie changes state (from the server's own page).
	expect(t, e.cookieCall("POST", "/api/v1/agents/a1/commands", `{"command":"true"}`, c).response, 202, "")
	e.clock.Advance(time.Hour)
	expect(t, e.cookieCall("GET", "/api/v1/agents", "", c).response, 401, "unauthorized")
	if c2, r := e.signInWith(sec); r.status != 401 || c2 != nil {
		t.Fatalf("a sign-in with the expired token: %d %s", r.status, r.body)
	}
}

// An executor's token is for an orchestrator: it may not sign in (403,
// saying so), and no session is made.
func TestExecutorMayNotSignIn(t *testing.T) {
	audit := portsfake.NewAuditLog()
	e := newEnv(t, withSignInTokens, func(d *Deps) { d.Audit = audit })
	sec := e.namedToken("orchestrator", "executor", "")
	c, r := e.signInWith(sec)
	expect(t, r, 403, "forbidden")
	if c != nil {
		t.Fatalf("a cookie for an executor: %+v", c)
	}
	if !strings.Contains(string(r.body), "may not sign in to the dashboard") {
		t.Errorf("the refusal does not say why: %s", r.body)
	}
	entries, _, err := audit.Query(ports.AuditQuery{Actor: "orchestrator"})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Operation != "signIn" || entries[0].Status != 403 || entries[0].Role != "executor" {
		t.Errorf("the audit of the refused sign-in: %+v", entries)
	}
	// A wrong token is still 401, and a revoked one too.
	if _, r := e.signInWith("ast_not-a-token"); r.status != 401 {
		t.Fatalf("a wrong token: %d", r.status)
	}
}

// GET /api/v1/me answers every role with its own name, role, labels and
// expiry; the operator token is the admin "operator", its session the
// admin "dashboard"; nobody else gets an answer.
func TestMe(t *testing.T) {
	e := newEnv(t, withSignInTokens)
	me := func(r response) restapi.Me {
		t.Helper()
		expect(t, r, 200, "")
		var m restapi.Me
		r.decode(t, &m)
		return m
	}
	if m := me(e.call("GET", "/api/v1/me", "")); m.Name != "operator" || m.Role != "admin" || len(m.Labels) != 0 || m.ExpiresAt != nil {
		t.Errorf("the operator token: %+v", m)
	}
	exp := e.clock.Now().Add(48 * time.Hour).UTC()
	for _, role := range []string{"viewer", "operator", "admin", "executor"} {
		sec := e.namedToken("t-"+role, role, `,"labels":{"team":"`+role+`"},"expires_at":"`+exp.Format(time.RFC3339)+`"`)
		m := me(e.callAuth("GET", "/api/v1/me", "", "Bearer "+sec))
		if m.Name != "t-"+role || string(m.Role) != role || m.Labels["team"] != role || len(m.Labels) != 1 || m.ExpiresAt == nil || !m.ExpiresAt.Equal(exp) {
			t.Errorf("%s: %+v", role, m)
		}
	}
	c, r := e.signInWith(testToken)
	if r.status != 204 || c == nil {
		t.Fatalf("sign-in with the operator token: %d", r.status)
	}
	if m := me(e.cookieCall("GET", "/api/v1/me", "", c).response); m.Name != "dashboard" || m.Role != "admin" {
		t.Errorf("the operator token's session: %+v", m)
	}
	expect(t, e.callAuth("GET", "/api/v1/me", "", ""), 401, "unauthorized")
	expect(t, e.callAuth("GET", "/api/v1/me", "", "Bearer ast_wrong"), 401, "unauthorized")
}
