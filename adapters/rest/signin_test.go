package rest

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// The dashboard's session: the token buys an HttpOnly, SameSite=Strict
// cookie; the cookie reads; a change with it must come from the server's
// own origin; a page elsewhere can neither sign a browser in nor act
// through its cookie; sign-out clears it; the token is never in a URL.
func TestDashboardSessionCookie(t *testing.T) {
	own := "http://dash.example:8122"
	e := newEnv(t, func(d *Deps) { d.Origins = []string{own} })
	do := func(method, path, body string, hdr map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := do("POST", "/api/v1/signin", `{"token":"wrong"}`, map[string]string{"Origin": own}); r.StatusCode != 401 || len(r.Cookies()) != 0 {
		t.Fatalf("a wrong token: %d %v", r.StatusCode, r.Cookies())
	}
	if r := do("POST", "/api/v1/signin", `{"token":"`+testToken+`"}`, map[string]string{"Origin": "http://evil.example"}); r.StatusCode != 401 {
		t.Fatalf("sign-in from another origin: %d", r.StatusCode)
	}
	if r := do("POST", "/api/v1/signin", `{"token":"`+testToken+`","extra":1}`, nil); r.StatusCode != 400 {
		t.Fatalf("an unknown field: %d", r.StatusCode)
	}
	r := do("POST", "/api/v1/signin", `{"token":"`+testToken+`"}`, map[string]string{"Origin": own})
	if r.StatusCode != 204 || len(r.Cookies()) != 1 {
		t.Fatalf("sign-in: %d %v", r.StatusCode, r.Cookies())
	}
	c := r.Cookies()[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || strings.Contains(c.Value, testToken) {
		t.Fatalf("cookie %+v", c)
	}
	cookie := map[string]string{"Cookie": c.Name + "=" + c.Value}
	if r := do("GET", "/api/v1/agents", "", cookie); r.StatusCode != 200 {
		t.Fatalf("reading with the cookie: %d", r.StatusCode)
	}
	withOrigin := func(o string) map[string]string {
		return map[string]string{"Cookie": c.Name + "=" + c.Value, "Origin": o}
	}
	if r := do("POST", "/api/v1/agents/a1/commands", `{"command":"true"}`, withOrigin("http://evil.example")); r.StatusCode != 401 {
		t.Fatalf("a change from another origin with the cookie: %d", r.StatusCode)
	}
	if r := do("POST", "/api/v1/agents/a1/commands", `{"command":"true"}`, cookie); r.StatusCode != 401 {
		t.Fatalf("a change with the cookie and no origin: %d", r.StatusCode)
	}
	if r := do("POST", "/api/v1/agents/a1/commands", `{"command":"true"}`, withOrigin(own)); r.StatusCode != 202 {
		t.Fatalf("a change from the server's own page: %d", r.StatusCode)
	}
	// Sign-out ends the session on the server: the same cookie, kept
	// elsewhere, no longer reads; another session lives on.
	r2 := do("POST", "/api/v1/signin", `{"token":"`+testToken+`"}`, map[string]string{"Origin": own})
	if r2.StatusCode != 204 || len(r2.Cookies()) != 1 || r2.Cookies()[0].Value == c.Value {
		t.Fatalf("a second sign-in: %d %v", r2.StatusCode, r2.Cookies())
	}
	other := map[string]string{"Cookie": c.Name + "=" + r2.Cookies()[0].Value}
	if r := do("POST", "/api/v1/signout", "", map[string]string{"Cookie": c.Name + "=" + c.Value, "Origin": own}); r.StatusCode != 204 || len(r.Cookies()) != 1 || r.Cookies()[0].MaxAge >= 0 {
		t.Fatalf("sign-out: %d %v", r.StatusCode, r.Cookies())
	}
	if r := do("GET", "/api/v1/agents", "", cookie); r.StatusCode != 401 {
		t.Fatalf("the cookie after sign-out: %d", r.StatusCode)
	}
	if r := do("GET", "/api/v1/agents", "", other); r.StatusCode != 200 {
		t.Fatalf("another browser's session after this one signed out: %d", r.StatusCode)
	}
	if r := do("POST", "/api/v1/signout", "", nil); r.StatusCode != 204 || len(r.Cookies()) != 1 || r.Cookies()[0].MaxAge >= 0 {
		t.Fatalf("sign-out without a cookie: %d %v", r.StatusCode, r.Cookies())
	}
	// Expired: the session ends with its 12 hours.
	e.clock.Advance(13 * 60 * 60 * 1e9)
	if r := do("GET", "/api/v1/agents", "", other); r.StatusCode != 401 {
		t.Fatalf("an expired cookie: %d", r.StatusCode)
	}
}

// TestSignInRateLimit: five wrong tokens within a minute from one address,
// then every sign-in from it is 429 with Retry-After (even with the right
// token) until the oldest failure is a minute old; logged like a refusal.
func TestSignInRateLimit(t *testing.T) {
	e := newEnv(t)
	signIn := func(tok string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/signin", strings.NewReader(`{"token":"`+tok+`"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp
	}
	for i := range 5 {
		if r := signIn("wrong"); r.StatusCode != 401 {
			t.Fatalf("failure %d: %d", i+1, r.StatusCode)
		}
		e.clock.Advance(time.Second)
	}
	for _, tok := range []string{"wrong", testToken} {
		resp := e.callAuth("POST", "/api/v1/signin", `{"token":"`+tok+`"}`, "")
		expect(t, resp, 429, "too_many_sign_ins")
		if ra := resp.header.Get("Retry-After"); ra != "55" {
			t.Fatalf("Retry-After %q, want 55", ra)
		}
	}
	if !strings.Contains(e.logs.String(), "too many failed sign-ins") {
		t.Fatal("the 429 is not logged")
	}
	e.clock.Advance(55 * time.Second)
	if r := signIn(testToken); r.StatusCode != 204 {
		t.Fatalf("a minute after the first failure: %d", r.StatusCode)
	}
}

// TestSignOutEndsOpenStreams: a change stream opened with the dashboard's
// cookie ends when its session is signed out; one opened with the token
// does not.
func TestSignOutEndsOpenStreams(t *testing.T) {
	e := newEnv(t)
	req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/signin", strings.NewReader(`{"token":"`+testToken+`"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 || len(resp.Cookies()) != 1 {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	cookie := resp.Cookies()[0]
	withCookie := e.openChanges(func(r *http.Request) { r.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value}) })
	withToken := e.openChanges(withBearer(testToken))
	req, _ = http.NewRequest("POST", e.srv.URL+"/api/v1/signout", nil)
	req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
	if resp, err := e.srv.Client().Do(req); err != nil || resp.StatusCode != 204 {
		t.Fatalf("sign-out: %v %v", resp, err)
	}
	testkit.Receive(t, 15*time.Second, withCookie, "the end of the stream opened with the cookie")
	select {
	case err := <-withToken:
		t.Fatalf("the stream opened with the token ended: %v", err)
	default:
	}
}
