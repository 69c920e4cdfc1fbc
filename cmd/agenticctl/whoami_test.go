package main

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// TestWhoami: against a real REST server, the operator token is the admin
// "operator"; a named viewer token made by it says its own name, role,
// labels and expiry; a wrong token fails with the server's 401.
func TestWhoami(t *testing.T) {
	link := resttest.NewLink()
	srv := httptest.NewServer(rest.New(rest.Deps{Link: link, Agents: link, Token: token, Version: "test", Tokens: portsfake.NewTokens()}).Handler())
	t.Cleanup(srv.Close)
	f := &fixture{link: link, url: srv.URL}
	as := func(secret string, args ...string) result {
		return runWith(t, envOf("AGENTIC_SERVER", srv.URL, "AGENTIC_OPERATOR_TOKEN", secret), "", args...)
	}
	r := f.run(t, "", "whoami")
	if r.code != 0 || !strings.Contains(r.stdout, "name:     operator") || !strings.Contains(r.stdout, "role:     admin") || !strings.Contains(r.stdout, "expires:  never") {
		t.Fatalf("whoami with the operator token: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = f.run(t, "", "token", "create", "ci", "--role", "viewer", "--expires", "24h", "--label", "team=payments")
	if r.code != 0 {
		t.Fatalf("token create: exit %d: %s", r.code, r.stderr)
	}
	secret := strings.TrimSpace(r.stdout)
	r = as(secret, "whoami")
	if r.code != 0 || !strings.Contains(r.stdout, "name:     ci\n") || !strings.Contains(r.stdout, "role:     viewer") ||
		!strings.Contains(r.stdout, "labels:   team=payments") || strings.Contains(r.stdout, "expires:  never") {
		t.Fatalf("whoami with the viewer's token: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = as(secret, "whoami", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"role": "viewer"`) && !strings.Contains(r.stdout, `"role":"viewer"`) {
		t.Fatalf("whoami --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = as("ast_wrong", "whoami"); r.code != exitError || !strings.Contains(r.stderr, "HTTP 401") {
		t.Fatalf("whoami with a wrong token: exit %d %s", r.code, r.stderr)
	}
	if r = f.run(t, "", "whoami", "extra"); r.code != exitError {
		t.Fatalf("whoami with an operand: exit %d", r.code)
	}
}
