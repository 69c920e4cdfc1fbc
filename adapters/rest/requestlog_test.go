package rest

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// A state-changing request is one info line of the server's log with its
// method, route pattern, status, duration, actor and request id (the id of
// its audit entry and X-Request-Id); a read is not logged at info. With
// the audit log off, the line is still there.
func TestRequestLogLine(t *testing.T) {
	var logs testkit.Buffer
	e := newEnv(t, func(d *Deps) {
		d.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	lineOf := func(id string) string {
		t.Helper()
		for l := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(l, `msg="rest: request"`) && strings.Contains(l, "request_id="+id) {
				return l
			}
		}
		return ""
	}

	r := e.call("POST", "/api/v1/agents/a1/commands", `{"command":"true"}`)
	expect(t, r, 202, "")
	e.nextCommand()
	l := lineOf(r.header.Get("X-Request-Id"))
	for _, want := range []string{"level=INFO", "method=POST", `route="POST /api/v1/agents/{agent_id}/commands"`, "status=202", "duration=", "actor=operator", "role=admin"} {
		if !strings.Contains(l, want) {
			t.Errorf("the start's log line %q lacks %s\n%s", l, want, logs.String())
		}
	}
	r = e.callAuth("DELETE", "/api/v1/commands/c-none", "", "Bearer wrong-token")
	expect(t, r, 401, "unauthorized")
	l = lineOf(r.header.Get("X-Request-Id"))
	for _, want := range []string{"level=INFO", "method=DELETE", `route="DELETE /api/v1/commands/{command_id}"`, "status=401", "actor=anonymous"} {
		if !strings.Contains(l, want) {
			t.Errorf("the refused kill's log line %q lacks %s", l, want)
		}
	}
	r = e.call("GET", "/api/v1/agents", "")
	expect(t, r, 200, "")
	if l := lineOf(r.header.Get("X-Request-Id")); l != "" {
		t.Errorf("a read logged at info: %s", l)
	}
	if strings.Contains(logs.String(), "wrong-token") {
		t.Errorf("the log holds a token:\n%s", logs.String())
	}
}
