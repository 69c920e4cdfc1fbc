package main

import (
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// TestTokenCreateListRevoke: against a real REST server, the operator (an
// admin) makes a viewer token; it reads, may not manage tokens (403
// forbidden), is listed without its secret, and is refused once revoked.
func TestTokenCreateListRevoke(t *testing.T) {
	link := resttest.NewLink()
	link.AddAgent(ports.AgentInfo{ID: "host-01", Status: "ready", Runtime: "host", Hostname: "alpha"})
	srv := httptest.NewServer(rest.New(rest.Deps{Link: link, Agents: link, Token: token, Version: "test", Tokens: portsfake.NewTokens()}).Handler())
	t.Cleanup(srv.Close)
	f := &fixture{link: link, url: srv.URL}
	as := func(secret string, args ...string) result {
		return runWith(t, envOf("AGENTIC_SERVER", srv.URL, "AGENTIC_OPERATOR_TOKEN", secret), "", args...)
	}

	r := f.run(t, "", "token", "create", "ci", "--role", "viewer", "--expires", "24h", "--label", "team=payments")
	if r.code != 0 {
		t.Fatalf("token create: exit %d: %s", r.code, r.stderr)
	}
	secret := strings.TrimSpace(r.stdout)
	if !regexp.MustCompile(`^ast_[A-Za-z0-9_-]{43}$`).MatchString(secret) {
		t.Fatalf("token create printed %q, want the secret alone", r.stdout)
	}
	if !strings.Contains(r.stderr, "role viewer") || !strings.Contains(r.stderr, "shown only now") {
		t.Errorf("token create's note: %q", r.stderr)
	}

	r = f.run(t, "", "token", "list")
	if r.code != 0 || strings.Contains(r.stdout, secret) || strings.Contains(r.stdout, secret[4:]) {
		t.Fatalf("token list: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME ID ROLE EXPIRES LABELS" {
		t.Fatalf("token list:\n%s", r.stdout)
	}
	fields := strings.Fields(lines[1])
	if len(fields) != 5 || fields[0] != "ci" || !strings.HasPrefix(fields[1], "tok_") || fields[2] != "viewer" || fields[4] != "team=payments" {
		t.Fatalf("token list row: %q", lines[1])
	}
	if r = f.run(t, "", "token", "list", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"tokens"`) || strings.Contains(r.stdout, secret) {
		t.Fatalf("token list --json: %s %s", r.stdout, r.stderr)
	}

	// The viewer reads; its label scope (team=payments) leaves the host
	// agent out, which is in no environment.
	if r = as(secret, "agents", "list"); r.code != 0 || strings.Contains(r.stdout, "host-01") {
		t.Fatalf("the scoped viewer's agents list: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	if r = as(secret, "token", "create", "x", "--role", "admin"); r.code != exitError || !strings.Contains(r.stderr, "forbidden, HTTP 403") {
		t.Fatalf("a viewer made a token: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}

	if r = f.run(t, "", "token", "create", "ci", "--role", "admin"); r.code != exitError || !strings.Contains(r.stderr, "token_exists, HTTP 409") {
		t.Fatalf("a second ci: exit %d: %s", r.code, r.stderr)
	}
	if r = f.run(t, "", "token", "create", "x"); r.code != exitError || !strings.Contains(r.stderr, "--role") {
		t.Fatalf("create without a role: exit %d: %s", r.code, r.stderr)
	}
	if r = f.run(t, "", "token", "create", "x", "--role", "root"); r.code != exitError || !strings.Contains(r.stderr, "HTTP 400") {
		t.Fatalf("create with a bad role: exit %d: %s", r.code, r.stderr)
	}

	if r = f.run(t, "", "token", "revoke", "ci"); r.code != 0 || r.stdout != "token ci revoked\n" {
		t.Fatalf("token revoke: exit %d: %q %s", r.code, r.stdout, r.stderr)
	}
	if r = as(secret, "agents", "list"); r.code != exitError || !strings.Contains(r.stderr, "unauthorized, HTTP 401") {
		t.Fatalf("a revoked token read: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	if r = f.run(t, "", "token", "revoke", "ci"); r.code != exitError || !strings.Contains(r.stderr, "token_not_found, HTTP 404") {
		t.Fatalf("revoke twice: exit %d: %s", r.code, r.stderr)
	}
}
