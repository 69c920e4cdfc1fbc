package rest

import (
	"net/http"
	"strings"
	"testing"
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
	// Expired: the cookie carries its end, and the MAC covers it.
	e.clock.Advance(13 * 60 * 60 * 1e9)
	if r := do("GET", "/api/v1/agents", "", cookie); r.StatusCode != 401 {
		t.Fatalf("an expired cookie: %d", r.StatusCode)
	}
	if r := do("POST", "/api/v1/signout", "", nil); r.StatusCode != 204 || len(r.Cookies()) != 1 || r.Cookies()[0].MaxAge >= 0 {
		t.Fatalf("sign-out: %d %v", r.StatusCode, r.Cookies())
	}
}
