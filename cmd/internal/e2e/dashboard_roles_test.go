package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// rolesCall is one REST call with a bearer token ("" none): its status
// and body.
func rolesCall(t *testing.T, s *harness.Server, method, path, body, token string) (int, []byte) {
	t.Helper()
	return rolesDo(t, s, method, path, body, func(r *http.Request) {
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
	})
}

// cookieCall is one REST call with a dashboard session cookie, from the
// server's own page (Origin).
func cookieCall(t *testing.T, s *harness.Server, method, path, body string, c *http.Cookie) (int, []byte) {
	t.Helper()
	return rolesDo(t, s, method, path, body, func(r *http.Request) {
		r.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
		r.Header.Set("Origin", s.RESTURL)
	})
}

func rolesDo(t *testing.T, s *harness.Server, method, path, body string, auth func(*http.Request)) (int, []byte) {
	t.Helper()
	contentType := ""
	if body != "" {
		contentType = "application/json"
	}
	st, _, b := restDo(t, s, method, path, contentType, body, auth)
	return st, b
}

// rolesToken creates a named token with the operator token: its secret.
func rolesToken(t *testing.T, s *harness.Server, name, role string) string {
	t.Helper()
	st, b := rolesCall(t, s, "POST", "/api/v1/tokens", fmt.Sprintf(`{"name":%q,"role":%q}`, name, role), s.Token)
	var c struct{ Token string }
	if st != 201 || json.Unmarshal(b, &c) != nil || c.Token == "" {
		t.Fatalf("creating token %s: %d %s", name, st, b)
	}
	return c.Token
}

// The dashboard signed in with named tokens, in a real Chromium against
// the real server: a viewer sees every view with no control that changes
// anything (and the server refuses such a call from its page), watches a
// shell as an observer, and is signed out when its token is revoked; an
// admin creates a token in the Tokens view (its secret shown once, and it
// works), revokes it, and finds the calls just made in the Audit view,
// filtered and a page at a time. Screenshots go to the test's artifact
// directory (go test -artifacts -outputdir DIR).
func TestDashboardRoles(t *testing.T) {
	b := newBrowser(t)
	s := startServer(t, 1, "")
	url := s.RESTURL + "/"

	// A shell for the viewer to watch.
	st, body := rolesCall(t, s, "POST", "/api/v1/agents/host-01/sessions", `{"type":"interactive","name":"watched"}`, s.Token)
	var sess struct {
		SessionID string `json:"session_id"`
	}
	if st != 201 || json.Unmarshal(body, &sess) != nil || sess.SessionID == "" {
		t.Fatalf("creating a session: %d %s", st, body)
	}
	viewer := rolesToken(t, s, "e2e-viewer", "viewer")
	admin := rolesToken(t, s, "e2e-admin", "admin")
	executor := rolesToken(t, s, "e2e-executor", "executor")

	// An executor's token does not sign in, and the page says why.
	x := b.newPage()
	x.do("open the dashboard", chromedp.Navigate(url), chromedp.WaitVisible(testid("signin-token")))
	x.do("sign in as executor", chromedp.SendKeys(testid("signin-token"), executor), chromedp.Click(testid("signin-submit")))
	x.waitJS("the refusal", `(document.querySelector('.signin .error') || {innerText: ""}).innerText.includes("may not sign in to the dashboard")`)
	x.shot("roles-00-executor-refused")

	// The viewer: every view, no write control.
	v := b.newPage()
	signInAs(v, url, viewer, "")
	v.waitJS("who is signed in", `document.querySelector('[data-testid="whoami"]').innerText.includes("e2e-viewer") && document.querySelector('[data-testid="whoami"]').innerText.includes("viewer")`)
	noWrites := func(view string) {
		t.Helper()
		// No control that changes anything, whatever its test id.
		got := v.eval(`[...document.querySelectorAll("main button, main a.button")].map(b => b.innerText.trim()).filter(t =>
			/^(Create|Delete|Start|Stop|Pause|Resume|Kill|Take control|Make public|Make private|Open terminal|New task|Keep ready|Send|Allow|Deny|Reconnect|Cancel|Revoke|Destroy it now)$/.test(t)).join(",")`)
		if got != "" {
			v.shot("failed-viewer-" + view)
			t.Errorf("the viewer sees write controls in %s: %s", view, got)
		}
	}
	if v.eval(`String(!!document.querySelector('[data-testid="nav-tokens"]') || !!document.querySelector('[data-testid="nav-audit"]'))`) != "false" {
		t.Error("the viewer sees the Tokens or Audit view in the navigation")
	}
	v.do("agents", chromedp.Navigate(url+"#/agents"), chromedp.WaitVisible(testid("agent-row-host-01")))
	noWrites("agents")
	v.shot("roles-01-viewer-agents")
	v.do("environments", chromedp.Navigate(url+"#/environments"), chromedp.WaitVisible(testid("read-only")))
	noWrites("environments")
	v.shot("roles-02-viewer-environments")
	v.do("sessions", chromedp.Navigate(url+"#/sessions"), chromedp.WaitVisible(testid("session-row-"+sess.SessionID)))
	noWrites("sessions")
	v.shot("roles-02b-viewer-sessions")
	v.do("tasks", chromedp.Navigate(url+"#/tasks"), chromedp.WaitVisible(testid("tasks-empty")))
	noWrites("tasks")
	v.do("a new shell", chromedp.Navigate(url+"#/terminal/new/host-01"), chromedp.WaitVisible(testid("read-only")))
	v.do("tokens", chromedp.Navigate(url+"#/tokens"), chromedp.WaitVisible(testid("admins-only")))
	v.do("the session", chromedp.Navigate(url+"#/session/"+sess.SessionID), chromedp.WaitVisible(testid("terminal")))
	v.waitJS("the observer role", `document.querySelector('[data-testid="terminal-role"]').innerText === "observer"`)
	noWrites("the terminal")
	v.shot("roles-03-viewer-terminal")
	// The server refuses what the page does not offer.
	if got := v.evalAsync(`fetch("/api/v1/environments", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({runtime: "host", name: "by-viewer"})}).then(r => r.json().then(j => r.status + " " + j.code))`); got != "403 forbidden" {
		t.Errorf("a create from the viewer's page: %s, want 403 forbidden", got)
	}

	// The admin: the Tokens view makes a token and shows it once.
	a := b.newPage()
	signInAs(a, url, admin, "")
	a.do("tokens", chromedp.Click(testid("nav-tokens")), chromedp.WaitVisible(testid("token-row-e2e-viewer")))
	setField(a, "token-role", "operator", "change")
	a.do("fill in a token", chromedp.SendKeys(testid("token-name"), "ci-bot"),
		chromedp.SendKeys(testid("token-labels"), "team=payments"),
		chromedp.SendKeys(testid("token-expires-days"), "7"),
		chromedp.Click(testid("token-create")), chromedp.WaitVisible(testid("token-secret")))
	secret := a.eval(`document.querySelector('[data-testid="token-secret"]').innerText.trim()`)
	if !strings.HasPrefix(secret, "ast_") {
		t.Fatalf("the secret shown: %q", secret)
	}
	a.waitJS("its row", `!!document.querySelector('[data-testid="token-row-ci-bot"]') && document.querySelector('[data-testid="token-row-ci-bot"]').innerText.includes("team=payments")`)
	a.shot("roles-04-admin-token-created")
	ciBotID := a.eval(`document.querySelector('[data-testid="token-row-ci-bot"] code').innerText.trim()`)
	st, body = rolesCall(t, s, "GET", "/api/v1/me", "", secret)
	var me struct {
		Name, Role string
		Labels     map[string]string
		ExpiresAt  string `json:"expires_at"`
	}
	if st != 200 || json.Unmarshal(body, &me) != nil || me.Name != "ci-bot" || me.Role != "operator" || me.Labels["team"] != "payments" || me.ExpiresAt == "" {
		t.Fatalf("the token made in the dashboard: %d %s", st, body)
	}
	a.do("done with it", chromedp.Click(testid("token-secret-done")))
	a.waitJS("the secret gone", `!document.querySelector('[data-testid="token-secret"]')`)
	if strings.Contains(a.eval(`document.documentElement.outerHTML`), secret) {
		t.Error("the secret is still in the page once dismissed")
	}
	a.do("the page again", chromedp.Reload(), chromedp.WaitVisible(testid("token-row-ci-bot")))
	if strings.Contains(a.eval(`document.documentElement.outerHTML`), secret) {
		t.Error("the secret is shown again")
	}
	a.shot("roles-05-admin-tokens")
	a.do("revoke it", chromedp.Click(testid("token-revoke-ci-bot")), chromedp.Click(testid("token-revoke-confirm-ci-bot")))
	a.waitJS("its row gone", `!document.querySelector('[data-testid="token-row-ci-bot"]')`)
	if st, body := rolesCall(t, s, "GET", "/api/v1/me", "", secret); st != 401 {
		t.Fatalf("the revoked token: %d %s", st, body)
	}

	// Revoking the viewer's token signs its open page out.
	a.do("revoke the viewer", chromedp.Click(testid("token-revoke-e2e-viewer")), chromedp.Click(testid("token-revoke-confirm-e2e-viewer")))
	a.waitJS("the viewer's row gone", `!document.querySelector('[data-testid="token-row-e2e-viewer"]')`)
	v.waitJS("the viewer's page signed out", `!!document.querySelector('[data-testid="signin-token"]')`)
	v.shot("roles-06-viewer-signed-out")

	// Audit: the calls just made, by whom, filtered by actor; then a page
	// at a time.
	for i := range 12 {
		if st, _ := rolesCall(t, s, "DELETE", fmt.Sprintf("/api/v1/sessions/no-such-%d", i), "", s.Token); st != 404 {
			t.Fatalf("a kill of no session: %d", st)
		}
	}
	a.do("audit", chromedp.Click(testid("nav-audit")), chromedp.WaitVisible(testid("audit-actor")))
	a.do("filter by the admin", chromedp.SendKeys(testid("audit-actor"), "e2e-admin"), chromedp.Click(testid("audit-apply")))
	rows := `[...document.querySelectorAll('[data-testid="audit-row"]')].map(r => [...r.children].slice(1).map(c => c.innerText.trim()).join(" ")).join("\n")`
	// Filtered once every row shown is of the actor asked for.
	only := func(actor string) string {
		return `[...document.querySelectorAll('[data-testid="audit-row"]')].every(r => r.children[1].innerText.trim() === ` + jsString(actor) + `)`
	}
	a.waitJS("the admin's calls", only("e2e-admin")+` && (`+rows+`).includes("deleteToken e2e-viewer 204")`)
	got := a.eval(rows)
	for _, want := range []string{"e2e-admin admin", "signIn", "createToken " + ciBotID + " 201", "deleteToken ci-bot 204", "deleteToken e2e-viewer 204"} {
		if !strings.Contains(got, want) {
			t.Errorf("the audit view filtered by e2e-admin lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "operator") || strings.Contains(got, "e2e-viewer viewer") {
		t.Errorf("the filter by actor shows others' entries:\n%s", got)
	}
	a.shot("roles-07-admin-audit")
	setField(a, "audit-actor", "e2e-viewer", "input")
	a.do("the viewer's refusal", chromedp.Click(testid("audit-apply")))
	a.waitJS("the viewer's refused create", only("e2e-viewer")+` && (`+rows+`).includes("createEnvironment")`)
	if got := a.eval(rows); !strings.Contains(got, "e2e-viewer viewer") || !strings.Contains(got, "403 forbidden") {
		t.Errorf("the viewer's refused create:\n%s", got)
	}
	setField(a, "audit-actor", "operator", "input")
	setField(a, "audit-limit", "10", "change")
	a.do("the operator's, ten a page", chromedp.Click(testid("audit-apply")))
	a.waitJS("a first page of ten", only("operator")+` && document.querySelectorAll('[data-testid="audit-row"]').length === 10 && !!document.querySelector('[data-testid="audit-next"]')`)
	first := a.eval(rows)
	a.do("the next page", chromedp.Click(testid("audit-next")))
	a.waitJS("the second page", only("operator")+` && !!document.querySelector('[data-testid="audit-prev"]') && document.querySelectorAll('[data-testid="audit-row"]').length > 0 && (`+rows+`) !== `+jsString(first))
	second := a.eval(rows)
	if !strings.Contains(second, "no-such-11") {
		t.Errorf("the last kill is not on the second page:\n%s", second)
	}
	if strings.Contains(first, "no-such-11") {
		t.Errorf("the first page holds the last entry:\n%s", first)
	}
	a.shot("roles-08-admin-audit-page-2")
}

// setField sets a form field's value as a person would (the event the
// page listens to follows).
func setField(p *page, id, value, event string) {
	p.t.Helper()
	p.eval(`(() => { const f = document.querySelector('[data-testid="` + id + `"]'); f.value = ` + jsString(value) + `; f.dispatchEvent(new Event("` + event + `", {bubbles: true})); return "" })()`)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A dashboard session of a named token on the real server: the cookie
// ends with the token's expiry, acts as the token (GET /api/v1/me; a write
// of a viewer 403), outlives a restart of agentic-mgmt, and is refused
// once the token is revoked, its session gone from the data dir.
func TestNamedTokenSessionOfTheRealServer(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir)
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	st, body := rolesCall(t, s, "POST", "/api/v1/tokens", `{"name":"e2e-watcher","role":"viewer","expires_at":"`+exp.Format(time.RFC3339)+`"}`, s.Token)
	var tok struct{ ID, Token string }
	if st != 201 || json.Unmarshal(body, &tok) != nil || tok.Token == "" {
		t.Fatalf("creating the token: %d %s", st, body)
	}
	cookie := signInCookie(t, s.RESTURL, tok.Token, nil)
	if !cookie.Expires.Equal(exp) {
		t.Errorf("the cookie expires %v, want the token's expiry %v", cookie.Expires, exp)
	}
	wantMe := func(s *harness.Server, what string) {
		t.Helper()
		st, body := cookieCall(t, s, "GET", "/api/v1/me", "", cookie)
		var me struct{ Name, Role string }
		if st != 200 || json.Unmarshal(body, &me) != nil || me.Name != "e2e-watcher" || me.Role != "viewer" {
			t.Fatalf("%s: GET /api/v1/me: %d %s", what, st, body)
		}
	}
	wantMe(s, "signed in")
	sessions := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dataDir, "signin-sessions.json"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return string(b)
	}
	if !strings.Contains(sessions(), tok.ID) {
		t.Fatalf("signin-sessions.json holds no session of token %s:\n%s", tok.ID, sessions())
	}
	if st, body := cookieCall(t, s, "POST", "/api/v1/environments", `{"runtime":"host","name":"by-watcher"}`, cookie); st != 403 || errorCode(body) != "forbidden" {
		t.Errorf("a viewer's create with the cookie: %d %s", st, body)
	}
	s2 := restart(t, s)
	wantMe(s2, "after a restart")
	if st, body := rolesCall(t, s2, "DELETE", "/api/v1/tokens/e2e-watcher", "", s2.Token); st != 204 {
		t.Fatalf("revoking: %d %s", st, body)
	}
	wantSessionReads(t, s2, cookie, http.StatusUnauthorized, "the revoked token's cookie")
	if strings.Contains(sessions(), tok.ID) {
		t.Errorf("signin-sessions.json still holds a session of the revoked token %s", tok.ID)
	}
}
