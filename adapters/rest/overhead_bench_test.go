package rest

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// BenchmarkExecOverhead is what the REST layer costs an exec call in
// process (the handler called directly, a fake agent whose command ends at
// once), so that what issue 30 adds to each call — the caller's token
// looked up, the role checked, the audit entry, the request's info log
// line — shows apart from the machine's noise: compare "no audit" with
// "audit" (the entry and the line), "operator token" with "named token"
// (the store's lookup). The file store's own append is
// BenchmarkAuditAppend (adapters/filestore).
func BenchmarkExecOverhead(b *testing.B) {
	const named = "ast_bench-named-operator-token-0123456789"
	for _, c := range []struct {
		name  string
		audit bool
		token string
	}{
		{"operator token, no audit", false, testToken},
		{"operator token, audit", true, testToken},
		{"named token, audit", true, named},
	} {
		b.Run(c.name, func(b *testing.B) {
			link := resttest.NewLink()
			link.AddAgent(ports.AgentInfo{ID: "a1", Status: "ready", Runtime: "host", Hostname: "h1"})
			tokens := portsfake.NewTokens()
			if err := tokens.Create(ports.Token{ID: "tok_0123456789abcdef", Name: "bench", Role: "operator", Hash: ports.HashTokenSecret(named)}); err != nil {
				b.Fatal(err)
			}
			d := Deps{Link: link, Agents: link, Token: testToken, Tokens: tokens, Version: "bench",
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: portsfake.NewClock(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))}
			if c.audit {
				d.Audit = portsfake.NewAuditLog()
			}
			h := New(d).Handler()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/api/v1/agents/a1/exec", strings.NewReader(`{"command":"true"}`))
				req.Header.Set("Authorization", "Bearer "+c.token)
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
