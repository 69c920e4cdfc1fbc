package rest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// FuzzExecRequestDecoding posts arbitrary bodies to exec: never a panic,
// never a 5xx, always a JSON error on 4xx, always within the contract.
func FuzzExecRequestDecoding(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `"x"`, `{"command":"echo"}`, `{"command":"echo","args":["a"]}`,
		`{"command":"x","pty":true,"cols":80,"rows":24,"term":"xterm"}`, `{"command":"x","stdin":"in"}`,
		`{"command":"x","timeout_seconds":86400,"max_output_bytes":67108864}`, `{"command":"x","env":{"A":"B"}}`,
		`{"command":1}`, `{"command":"x","cols":-1}`, `{"command":"x"}{}`, `{"command":"x","extra":1}`,
		`{"command":"\u0000"}`, `{"command":"x","env":{"":""}}`, `{"command":"x","max_output_bytes":1e30}`,
		`{"command":"x","args":[null]}`, `{"command":"x","args":null}`, `{`, "\xff\xfe", `{"COMMAND":"x"}`,
	} {
		f.Add([]byte(seed))
	}
	// A fresh link per input, so a long fuzz run does not pile up commands.
	handler := func() http.Handler {
		link := resttest.NewLink()
		link.AddAgent(ports.AgentInfo{ID: "a1", Status: "ready"})
		// Every command ends at once, whatever it is, so the fuzzer never waits.
		link.SetScript(func(c *resttest.Command) {
			c.Stdout(c.Spec.Command)
			c.Exit(0)
		})
		return New(Deps{Link: link, Agents: link, Token: testToken}).Handler()
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/api/v1/agents/a1/exec", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		handler().ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.Bytes())
		}
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.Bytes())
		}
		checkContract(t, req, rec.Code, rec.Header(), rec.Body.Bytes())
	})
}
