package main

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

type sessionFixture struct {
	*fixture
	sessions *resttest.Sessions
}

func newSessionFixture(t *testing.T, logMax int) *sessionFixture {
	t.Helper()
	link := resttest.NewLink()
	link.AddAgent(ports.AgentInfo{ID: "host-01", Status: "ready", Runtime: "host", Hostname: "alpha"})
	log := resttest.NewSessionLog(logMax)
	ss := resttest.NewSessions(log)
	srv := httptest.NewServer(rest.New(rest.Deps{Link: link, Agents: link, Token: token, Version: "test",
		Missions: resttest.NewMissions(link), Sessions: ss, SessionLog: log}).Handler())
	t.Cleanup(srv.Close)
	return &sessionFixture{fixture: &fixture{link: link, url: srv.URL}, sessions: ss}
}

func TestSessionsCreateListKill(t *testing.T) {
	f := newSessionFixture(t, 0)
	r := f.run(t, "", "sessions", "create", "--type", "headless", "--name", "dev", "--env", "A=1", "host-01", "--", "claude", "-p", "hi")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "s1" {
		t.Fatalf("create: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	specs := f.sessions.Specs()
	if len(specs) != 1 || specs[0].Type != ports.SessionHeadless || specs[0].Name != "dev" || specs[0].Command != "claude" ||
		strings.Join(specs[0].Args, " ") != "-p hi" || specs[0].Env["A"] != "1" {
		t.Fatalf("spec %+v", specs)
	}
	f.sessions.Add(session.Session{ID: "s7", AgentID: "vm-01", Name: "old", Type: ports.SessionBackground, Command: "sh",
		State: session.Exited, ExitCode: new(int), CreatedAt: time.Unix(1, 0)})

	// Oldest first: s7 was made long before s1.
	r = f.run(t, "", "sessions", "list")
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "ID AGENT NAME TYPE STATE EXIT COMMAND" ||
		strings.Join(strings.Fields(lines[1]), " ") != "s7 vm-01 old background exited 0 sh" ||
		strings.Join(strings.Fields(lines[2]), " ") != "s1 host-01 dev headless running - claude -p hi" {
		t.Fatalf("list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = f.run(t, "", "sessions", "list", "--agent", "vm-01")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stdout, "s7") {
		t.Fatalf("list --agent: %q %q", r.stdout, r.stderr)
	}
	r = f.run(t, "", "sessions", "get", "s1")
	if r.code != 0 || !strings.Contains(r.stdout, `"name": "dev"`) {
		t.Fatalf("get: %q %q", r.stdout, r.stderr)
	}

	// Name clash and bad usage.
	r = f.run(t, "", "sessions", "create", "--name", "dev", "host-01", "--", "sh")
	if r.code != 1 || !strings.Contains(r.stderr, "session_name_taken") {
		t.Fatalf("name clash: %d %q", r.code, r.stderr)
	}
	if r = f.run(t, "", "sessions", "create", "host-01"); r.code != 1 {
		t.Fatalf("create without command: %d", r.code)
	}
	if r = f.run(t, "", "sessions", "create", "--type", "odd", "host-01", "--", "sh"); r.code != 1 {
		t.Fatalf("bad type: %d", r.code)
	}

	// kill goes through DELETE /api/v1/sessions/{id}.
	r = f.run(t, "", "sessions", "kill", "nope")
	if r.code != 1 || !strings.Contains(r.stderr, "session_not_found") {
		t.Fatalf("kill unknown: %d %q", r.code, r.stderr)
	}
}

func TestLogs(t *testing.T) {
	f := newSessionFixture(t, 8)
	f.sessions.Add(session.Session{ID: "s1", AgentID: "host-01", Name: "b", Type: ports.SessionBackground, Command: "sh", State: session.Running})
	f.sessions.Output("s1", "abcdefghij") // 2 bytes dropped
	r := f.run(t, "", "logs", "s1")
	if r.code != 0 || r.stdout != "cdefghij" || r.stderr != "" {
		t.Fatalf("logs: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = f.run(t, "", "logs", "--from", "5", "s1")
	if r.code != 0 || r.stdout != "fghij" {
		t.Fatalf("logs --from: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = f.run(t, "", "logs", "--from", "0", "s1")
	if r.code != 0 || r.stdout != "cdefghij" || !strings.Contains(r.stderr, "2 bytes of output were dropped") {
		t.Fatalf("logs with gap: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = f.run(t, "", "logs", "nope")
	if r.code != 1 || !strings.Contains(r.stderr, "session_not_found") {
		t.Fatalf("logs unknown: %d %q", r.code, r.stderr)
	}

	// -f follows live output (raw bytes, also invalid UTF-8) until the end.
	go func() {
		time.Sleep(100 * time.Millisecond)
		f.sessions.Output("s1", "k\xff")
		time.Sleep(50 * time.Millisecond)
		f.sessions.Output("s1", "\n")
		f.sessions.Exit("s1", 0)
	}()
	r = f.run(t, "", "logs", "-f", "--from", "8", "s1")
	if r.code != 0 || r.stdout != "ij"+"k\xff\n" {
		t.Fatalf("logs -f: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = f.run(t, "", "logs", "-f", "--from", "0", "s1")
	if r.code != 0 || r.stdout != "fghijk\xff\n" || !strings.Contains(r.stderr, "5 bytes of output were dropped") {
		t.Fatalf("logs -f with gap: %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// An interactive session needs no command: it is the agent's shell (the
// request carries none). The other types still need one and say so.
func TestSessionsCreateInteractiveWithoutACommand(t *testing.T) {
	f := newSessionFixture(t, 0)
	for i, operands := range [][]string{{"host-01"}, {"--", "host-01"}, {"host-01", "--"}} {
		r := f.run(t, "", append([]string{"sessions", "create", "--type", "interactive", "--env", "A=1"}, operands...)...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("%q: exit %d, %q %q", operands, r.code, r.stdout, r.stderr)
		}
		specs := f.sessions.Specs()
		if len(specs) != i+1 || specs[i].Type != ports.SessionInteractive || specs[i].Command != "" || len(specs[i].Args) != 0 || specs[i].Env["A"] != "1" {
			t.Fatalf("%q: spec %+v", operands, specs)
		}
	}
	for _, typ := range []string{"background", "headless"} {
		r := f.run(t, "", "sessions", "create", "--type", typ, "host-01")
		if r.code != 1 || !strings.Contains(r.stderr, "a "+typ+" session needs a command") || !strings.Contains(r.stderr, "--type interactive") {
			t.Fatalf("%s without a command: exit %d, %q", typ, r.code, r.stderr)
		}
	}
	if r := f.run(t, "", "sessions", "create", "--type", "interactive"); r.code != 1 || !strings.Contains(r.stderr, "needs an agent") {
		t.Fatalf("no agent: exit %d, %q", r.code, r.stderr)
	}
	if len(f.sessions.Specs()) != 3 {
		t.Fatalf("specs %+v", f.sessions.Specs())
	}
}
