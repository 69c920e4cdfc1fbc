package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/claudefeed"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

type ids struct {
	mu sync.Mutex
	n  int
}

func (g *ids) NewID() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n++
	return "0000000" + string(rune('a'+g.n)) + "-id"
}

// logged is everything the session log holds for id.
func logged(log *portsfake.SessionLog, id string) string {
	data, _, _, _ := log.ReadFrom(id, 0, 1<<20)
	return string(data)
}

// stdinOf is what the command got on stdin.
func stdinOf(c *portsfake.Command) string {
	in, _ := c.Stdin()
	return in
}

func newSvc(caps ...string) (*Service, *portsfake.Link, *portsfake.SessionLog) {
	agents := portsfake.NewDirectory(ports.AgentInfo{ID: "agent-1", Capabilities: caps})
	link := portsfake.NewLink(portsfake.WithDirectory(agents))
	log := portsfake.NewSessionLog(0)
	return New(Config{Link: link, Agents: agents, Log: log, Clock: clock.Wall{}, IDs: &ids{}}), link, log
}

func waitClosed(t *testing.T, c <-chan struct{}) {
	t.Helper()
	testkit.Receive(t, 5*time.Second, c, "not closed in time")
}

func TestCreateRunsInAPTYAndLogsOutput(t *testing.T) {
	svc, link, log := newSvc()
	s, err := svc.Create(context.Background(), Spec{AgentID: "agent-1", Name: "dev", Type: ports.SessionBackground, Command: "npm", Args: []string{"run", "dev"}, PTY: true}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := link.Command(s.ID)
	if c == nil || !c.Spec.PTY || c.Spec.Cols != 80 || c.Spec.Rows != 24 || c.Spec.SessionName != "as-dev" || !c.Opts.Detached || c.Spec.Command != "npm" {
		t.Fatalf("started with %+v %+v", c.Spec, c.Opts)
	}
	c.Opts.OnStarted()
	if got, _ := svc.Get(s.ID); got.State != Running {
		t.Fatalf("state %s after start", got.State)
	}
	c.Opts.OnOutput(ports.OutputChunk{Data: []byte("ready\r\n")})
	if logged(log, s.ID) != "ready\r\n" {
		t.Fatalf("log %q", logged(log, s.ID))
	}
	c.Finish(ports.CommandResult{ExitCode: 3})
	waitClosed(t, svc.Exited(s.ID))
	if got, _ := svc.Get(s.ID); got.State != Exited || got.ExitCode == nil || *got.ExitCode != 3 {
		t.Fatalf("after exit: %+v", got)
	}
	if _, err := svc.Create(context.Background(), Spec{AgentID: "nobody", Command: "x"}, 0, 0); !errors.Is(err, ports.ErrAgentNotFound) {
		t.Fatalf("unknown agent: %v", err)
	}
}

func TestShellAsksTheAgentToKeepItInTmux(t *testing.T) {
	svc, link, _ := newSvc("tmux")
	s, err := svc.StartShell(context.Background(), "agent-1", "main", 120, 40)
	if err != nil {
		t.Fatal(err)
	}
	c := link.Command(s.ID)
	if c.Spec.Command != "" || !c.Spec.Persist || !c.Spec.PTY || c.Spec.SessionName != "as-main" || c.Spec.SessionType != "interactive" || c.Spec.Cols != 120 || s.Type != ports.SessionInteractive {
		t.Fatalf("shell spec %+v", c.Spec)
	}
	// Unnamed shells get distinct names, which are their tmux sessions.
	a, _ := svc.StartShell(context.Background(), "agent-1", "", 0, 0)
	b, _ := svc.StartShell(context.Background(), "agent-1", "", 0, 0)
	if a.Name == b.Name || link.Command(a.ID).Spec.SessionName != "as-"+a.Name || link.Command(b.ID).Spec.SessionName != "as-"+b.Name {
		t.Fatalf("unnamed shells %q / %q", a.Name, b.Name)
	}
	// Headless runs are tied to their agent; background ones persist.
	h, _ := svc.Create(context.Background(), Spec{AgentID: "agent-1", Type: ports.SessionHeadless, Command: "claude", PTY: true}, 0, 0)
	g, _ := svc.Create(context.Background(), Spec{AgentID: "agent-1", Type: ports.SessionBackground, Command: "npm", PTY: true}, 0, 0)
	if link.Command(h.ID).Spec.Persist || !link.Command(g.ID).Spec.Persist || link.Command(g.ID).Spec.SessionType != "background" {
		t.Fatalf("persist: headless %v, background %v", link.Command(h.ID).Spec.Persist, link.Command(g.ID).Spec.Persist)
	}
	// Without a terminal: a background session's stdin is a pipe, and
	// nothing is kept in tmux.
	piped, _ := svc.Create(context.Background(), Spec{AgentID: "agent-1", Type: ports.SessionBackground, Command: "cat"}, 0, 0)
	if c := link.Command(piped.ID).Spec; c.PTY || c.Persist || !c.StdinOpen || piped.PTY {
		t.Fatalf("piped background spec %+v", c)
	}
	hl, _ := svc.Create(context.Background(), Spec{AgentID: "agent-1", Type: ports.SessionHeadless, Command: "claude"}, 0, 0)
	if c := link.Command(hl.ID).Spec; c.PTY || c.StdinOpen {
		t.Fatalf("piped headless spec %+v", c)
	}
}

// An agent that restarted reports its tmux sessions under new commands:
// the session moves to the new command, its old command's loss is ignored,
// and output goes on into the same log.
func TestReconcileMovesASessionToItsAdoptingCommand(t *testing.T) {
	svc, link, log := newSvc("tmux")
	s, _ := svc.StartShell(context.Background(), "agent-1", "main", 0, 0)
	old := link.Command(s.ID)
	old.Opts.OnStarted()
	old.Opts.OnOutput(ports.OutputChunk{Data: []byte("before ")})

	svc.ReconcileSessions("agent-1", []ports.ReportedSession{{SessionID: s.ID, AgentName: "as-main", Type: "interactive", CommandID: s.ID + "~1"}})
	old.Finish(ports.CommandResult{ExitCode: -1, Error: "command lost"})
	adopted := link.Command(s.ID + "~1")
	if adopted == nil {
		t.Fatal("no command attached for the adopting agent's client")
	}
	adopted.Opts.OnOutput(ports.OutputChunk{Data: []byte("after")})
	time.Sleep(20 * time.Millisecond) // let the old command's watcher run
	if got, _ := svc.Get(s.ID); got.State != Running {
		t.Fatalf("state %s after the old command was lost", got.State)
	}
	if logged(log, s.ID) != "before after" {
		t.Fatalf("log %q", logged(log, s.ID))
	}
	if err := svc.Input(context.Background(), s.ID, "v", nil); !errors.Is(err, ErrNotController) {
		t.Fatalf("input check: %v", err)
	}
	_, _ = svc.Join(s.ID, "v", Controller)
	if err := svc.Input(context.Background(), s.ID, "v", []byte("x")); err != nil || stdinOf(adopted) != "x" {
		t.Fatalf("input went to %q (err %v), want the adopting command", stdinOf(adopted), err)
	}
	adopted.Finish(ports.CommandResult{ExitCode: 0})
	waitClosed(t, svc.Exited(s.ID))
	if got, _ := svc.Get(s.ID); got.State != Exited {
		t.Fatalf("state %s after the adopting command ended", got.State)
	}
}

// After a restart of agentic-mgmt the registry is empty: reported sessions
// of ours are adopted under their ids, expected ones not reported are
// lost, foreign ones are killed.
func TestReconcileAdoptsLosesAndKills(t *testing.T) {
	svc, link, log := newSvc("tmux")
	gone, _ := svc.StartShell(context.Background(), "agent-1", "gone", 0, 0)
	link.Command(gone.ID).Opts.OnStarted()
	svc.ReconcileSessions("agent-1", []ports.ReportedSession{
		{SessionID: "0000000z-id", AgentName: "as-dev", Type: "background", CommandID: "0000000z-id"},
		{AgentName: "stranger", Type: "background", CommandID: "c-stranger"},
	})
	if got, _ := svc.Get(gone.ID); got.State != Lost {
		t.Fatalf("unreported session: %s", got.State)
	}
	waitClosed(t, svc.Exited(gone.ID))
	dev, ok := svc.Get("0000000z-id")
	if !ok || dev.State != Running || dev.Name != "dev" || dev.Type != ports.SessionBackground || !dev.Adopted {
		t.Fatalf("adopted: %+v %v", dev, ok)
	}
	link.Command("0000000z-id").Opts.OnOutput(ports.OutputChunk{Data: []byte("tick")})
	if logged(log, dev.ID) != "tick" {
		t.Fatalf("adopted session's log %q", logged(log, dev.ID))
	}
	testkit.Eventually(t, 15*time.Second, "the foreign session killed", func() bool {
		c := link.Command("c-stranger")
		if c == nil {
			return false
		}
		select {
		case <-c.Ended():
			return true
		default:
			return false
		}
	})
}

func TestOnlyTheControllerTypes(t *testing.T) {
	svc, link, _ := newSvc()
	s, _ := svc.Create(context.Background(), Spec{AgentID: "agent-1", Type: ports.SessionInteractive, Command: "bash"}, 0, 0)
	link.Command(s.ID).Opts.OnStarted()
	if r, _ := svc.Join(s.ID, "v1", Controller); r != Controller {
		t.Fatalf("first viewer got %s", r)
	}
	if r, _ := svc.Join(s.ID, "v2", Controller); r != Observer {
		t.Fatalf("second would-be controller got %s", r)
	}
	if err := svc.Input(context.Background(), s.ID, "v2", []byte("rm -rf /\r")); !errors.Is(err, ErrNotController) {
		t.Fatalf("observer input: %v", err)
	}
	if err := svc.Resize(context.Background(), s.ID, "v2", 10, 10); !errors.Is(err, ErrNotController) {
		t.Fatalf("observer resize: %v", err)
	}
	if err := svc.Input(context.Background(), s.ID, "v1", []byte("ls\r")); err != nil {
		t.Fatal(err)
	}
	if err := svc.Resize(context.Background(), s.ID, "v1", 100, 30); err != nil {
		t.Fatal(err)
	}
	c := link.Command(s.ID)
	if stdinOf(c) != "ls\r" || len(c.Resizes()) != 1 {
		t.Fatalf("stdin %q sizes %v", stdinOf(c), c.Resizes())
	}
	if err := svc.Input(context.Background(), "nope", "v1", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	if err := svc.Kill(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, svc.Exited(s.ID))
	if got, _ := svc.Get(s.ID); got.State != Killed {
		t.Fatalf("after kill: %s", got.State)
	}
}

func TestHeadlessActivityFeed(t *testing.T) {
	svc, link, _ := newSvc()
	s, _ := svc.Create(context.Background(), Spec{AgentID: "agent-1", Type: ports.SessionHeadless, Command: "claude"}, 0, 0)
	raw, err := os.ReadFile(filepath.Join("..", "..", "core", "claudefeed", "testdata", "session.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	c := link.Command(s.ID)
	for i := 0; i < len(raw); i += 100 { // output arrives in arbitrary pieces, CRLF from the PTY
		chunk := raw[i:min(i+100, len(raw))]
		c.Opts.OnOutput(ports.OutputChunk{Data: chunk})
	}
	c.Finish(ports.CommandResult{})
	waitClosed(t, svc.Exited(s.ID))
	evs, sum, dropped, ok := svc.Activity(s.ID, 0)
	if !ok || dropped != 0 || !sum.Done || !sum.Success || sum.CostUSD <= 0 || sum.ToolsUsed["Bash"] == 0 {
		t.Fatalf("feed ok=%v dropped=%d summary %+v", ok, dropped, sum)
	}
	var kinds []claudefeed.Kind
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	if len(kinds) == 0 || kinds[len(kinds)-1] != claudefeed.KindResult {
		t.Fatalf("kinds %v", kinds)
	}
	if later, _, _, _ := svc.Activity(s.ID, evs[len(evs)-2].Seq); len(later) != 1 {
		t.Fatalf("after: %d events", len(later))
	}
	other, _ := svc.Create(context.Background(), Spec{AgentID: "agent-1", Type: ports.SessionBackground, Command: "x"}, 0, 0)
	if _, _, _, ok := svc.Activity(other.ID, 0); ok {
		t.Fatal("a background session has an activity feed")
	}
}

// A create that cannot start leaves nothing stored: not a session under
// an id the caller made up (any length, NUL, CRLF), not a "lost" record.
func TestFailedCreateStoresNothing(t *testing.T) {
	svc, _, _ := newSvc()
	hostile := strings.Repeat("a", 5000) + "\x00\r\n"
	if _, err := svc.Create(context.Background(), Spec{AgentID: hostile, Command: "sh"}, 0, 0); !errors.Is(err, ports.ErrAgentNotFound) {
		t.Fatalf("unknown agent: %v", err)
	}
	if got := svc.List(""); len(got) != 0 {
		t.Fatalf("a failed create left %d sessions: %+v", len(got), got[0].AgentID[:20])
	}
}

// Ended sessions are forgotten after their retention, their logs deleted;
// live ones and recently ended ones stay.
func TestEndedSessionsAreForgottenAfterRetention(t *testing.T) {
	svc, link, log := newSvc()
	ctx := context.Background()
	old, err := svc.Create(ctx, Spec{AgentID: "agent-1", Command: "true"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	live, err := svc.Create(ctx, Spec{AgentID: "agent-1", Command: "sleep"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.Append(old.ID, []byte("output")); err != nil {
		t.Fatal(err)
	}
	link.Command(old.ID).Finish(ports.CommandResult{ExitCode: 0})
	var s Session
	if !testkit.Within(5*time.Second, func() bool { s, _ = svc.Get(old.ID); return s.State.Ended() }) {
		t.Fatalf("session still %s", s.State)
	}
	if n := svc.ForgetEnded(time.Now().Add(-time.Hour)); n != 0 {
		t.Fatalf("forgot %d sessions that ended within the retention", n)
	}
	if n := svc.ForgetEnded(time.Now().Add(time.Hour)); n != 1 {
		t.Fatalf("forgot %d, want the one ended session", n)
	}
	if _, ok := svc.Get(old.ID); ok {
		t.Fatal("the ended session is still listed")
	}
	if _, ok := svc.Get(live.ID); !ok {
		t.Fatal("a live session was forgotten")
	}
	if log.End(old.ID) != 0 {
		t.Fatal("the ended session's log was kept")
	}
}
