package rest

import (
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// vanishingScript adds to the default programs "vanish", which its agent
// loses (the link ends it as the agent's report after a reconnect does),
// and "gone", whose agent never comes back.
func vanishingScript(c *resttest.Command) {
	switch c.Spec.Command {
	case "vanish":
		c.Lose()
	case "gone":
		c.Finish(ports.CommandResult{ExitCode: -1, Error: ports.ErrAgentGone.Error()})
	default:
		resttest.DefaultScript(c)
	}
}

// An exec whose agent lost the command answers 502 agent_gone, not a
// result with exit code -1.
func TestExecLostAnswersAgentGone(t *testing.T) {
	e := newEnv(t)
	e.link.SetScript(vanishingScript)
	for _, prog := range []string{"vanish", "gone"} {
		expect(t, e.call("POST", "/api/v1/agents/a1/exec", `{"command":"`+prog+`"}`), 502, "agent_gone")
	}
	// A command that ran answers its result, failed or not.
	if res := exec(t, e, `{"command":"fail","args":["3"]}`); res.ExitCode != 3 {
		t.Fatalf("exec of fail: %+v", res)
	}
}

// A background command lost with its agent answers 502 agent_gone to
// reads (long polls too) and to control; so does one the link knows from
// elsewhere.
func TestBackgroundCommandLostAnswersAgentGone(t *testing.T) {
	e := newEnv(t)
	c := startSleeping(t, e, `{"command":"sleep","pty":true}`)
	c.Stdout("partial\n")
	if st := getStatus(t, e, c.ID(), "?wait_ms=1"); st.State != restapi.CommandStateRunning || st.Stdout != "partial\n" {
		t.Fatalf("before: %+v", st)
	}
	waiting := make(chan response, 1)
	go func() { waiting <- e.call("GET", "/api/v1/commands/"+c.ID()+"?stdout_from=8&wait_ms=30000", "") }()
	c.Lose()
	expect(t, testkit.Receive(t, 15*time.Second, waiting, "the long poll did not end"), 502, "agent_gone")
	expect(t, e.call("GET", "/api/v1/commands/"+c.ID(), ""), 502, "agent_gone")
	expect(t, e.call("DELETE", "/api/v1/commands/"+c.ID(), ""), 502, "agent_gone")
	expect(t, e.call("POST", "/api/v1/commands/"+c.ID()+"/signal", `{"signal":"TERM"}`), 502, "agent_gone")
	expect(t, e.call("POST", "/api/v1/commands/"+c.ID()+"/resize", `{"cols":80,"rows":24}`), 502, "agent_gone")

	foreign := e.link.Adopt("a1", ports.CommandSpec{Command: "x"})
	foreign.Finish(ports.CommandResult{ExitCode: -1, Error: ports.ErrAgentGone.Error()})
	expect(t, e.call("GET", "/api/v1/commands/"+foreign.ID(), ""), 502, "agent_gone")
}

// adoptEnv is newEnv with the server itself at hand.
func adoptEnv(t *testing.T) (*env, *Server) {
	t.Helper()
	link := resttest.NewLink()
	link.AddAgent(ports.AgentInfo{ID: "a1", Status: "ready", Runtime: "host", Hostname: "h1"})
	clock := portsfake.NewClock(time.Date(2026, 5, 9, 7, 13, 22, 0, time.UTC))
	var logs testkit.Buffer
	s := New(Deps{Link: link, Agents: link, Token: testToken, Clock: clock,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &env{t: t, link: link, clock: clock, srv: srv, logs: &logs}, s
}

// Background commands have ids a restarted server knows as this API's; it
// adopts those its agents report, under the same id: readable (output from
// the agent's offsets on) and controllable again. Others are not its own.
func TestAdoptCommandAfterRestart(t *testing.T) {
	e, s := adoptEnv(t)
	started := startSleeping(t, e, `{"command":"sleep"}`)
	if !strings.HasPrefix(started.ID(), CommandIDPrefix) {
		t.Fatalf("background command id %q lacks %q", started.ID(), CommandIDPrefix)
	}
	if _, ok := s.AdoptCommand(started); ok {
		t.Fatal("adopted a command it has already")
	}
	if _, ok := s.AdoptCommand(e.link.Adopt("a1", ports.CommandSpec{Command: "task"})); ok {
		t.Fatal("adopted a command that is not this API's")
	}

	// A new server: the agent reports a command the earlier one started.
	e2, s2 := adoptEnv(t)
	kept := e2.link.Attach("a1", CommandIDPrefix+"kept", ports.StartOptions{}).(*resttest.Command)
	opts, ok := s2.AdoptCommand(kept)
	if !ok || opts.OnOutput == nil {
		t.Fatalf("not adopted: %v", ok)
	}
	opts.OnOutput(ports.OutputChunk{Stream: ports.StreamStdout, Data: []byte("tick-7\n"), Offset: 42})
	st := getStatus(t, e2, kept.ID(), "")
	if st.State != restapi.CommandStateRunning || st.Stdout != "tick-7\n" || st.StdoutOffset != 42 || st.AgentId != "a1" {
		t.Fatalf("adopted status %+v", st)
	}
	opts.OnOutput(ports.OutputChunk{Stream: ports.StreamStdout, Data: []byte("tick-8\n"), Offset: 49})
	if st := getStatus(t, e2, kept.ID(), "?stdout_from=49"); st.Stdout != "tick-8\n" || st.StdoutOffset != 49 {
		t.Fatalf("from 49: %+v", st)
	}
	expect(t, e2.call("DELETE", "/api/v1/commands/"+kept.ID(), ""), 202, "")
	if kills, _ := kept.Killed(); kills != 1 {
		t.Fatalf("kills %d", kills)
	}
	kept.Finish(ports.CommandResult{ExitCode: 137, Signal: 9})
	st = getStatus(t, e2, kept.ID(), "?wait_ms=10000")
	if st.State != restapi.CommandStateExited || st.Result == nil || st.Result.ExitCode != 137 || !st.Result.Truncated || st.Stdout != "tick-7\ntick-8\n" {
		t.Fatalf("after kill: %+v %+v", st, st.Result)
	}
}

// An exec's command has an id a restarted server knows as an exec's: its
// caller went with the earlier server, so the restarted one kills it.
func TestAdoptedExecIsKilled(t *testing.T) {
	e, s := adoptEnv(t)
	if res := exec(t, e, `{"command":"echo","args":["hi"]}`); !strings.HasPrefix(res.CommandId, ExecIDPrefix) {
		t.Fatalf("exec command id %q lacks %q", res.CommandId, ExecIDPrefix)
	}
	orphan := e.link.Attach("a1", ExecIDPrefix+"orphan", ports.StartOptions{}).(*resttest.Command)
	if _, ok := s.AdoptCommand(orphan); !ok {
		t.Fatal("an exec of an earlier run was not taken")
	}
	testkit.Eventually(t, 15*time.Second, "the orphaned exec killed", func() bool {
		kills, _ := orphan.Killed()
		return kills == 1
	})
}
