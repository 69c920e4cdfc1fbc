package agentrpc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"

	"connectrpc.com/connect"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func TestAckNamesTheConnection(t *testing.T) {
	h := newHarness(t)
	a1 := h.connectAgent("agent-a")
	b := h.connectAgent("agent-b")
	a2 := h.connectAgent("agent-a")
	var gens []uint64
	for _, fa := range []*fakeAgent{a1, b, a2} {
		g, err := strconv.ParseUint(fa.ack.GetConfig()[ConfigConnectionID], 10, 64)
		if err != nil {
			t.Fatalf("ack config %v: %v", fa.ack.GetConfig(), err)
		}
		gens = append(gens, g)
	}
	if !(gens[0] < gens[1] && gens[1] < gens[2]) {
		t.Fatalf("connection ids %v are not increasing", gens)
	}
}

func TestConnectReportEndsLostCommands(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	var cmds []ports.Command
	for _, name := range []string{"kept", "lost1", "lost2"} {
		cmd, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: name}, ports.StartOptions{Detached: true})
		if err != nil {
			t.Fatal(err)
		}
		a.recv()
		cmds = append(cmds, cmd)
	}
	kept, lost1, lost2 := cmds[0], cmds[1], cmds[2]
	a.hangUp()

	b := h.connectAgent("agent-a")
	// A command sent on the new connection is not judged by its report.
	fresh, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "fresh"}, ports.StartOptions{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	b.recv()

	// Reports for another connection, or answers to a query, change nothing.
	b.send(connectReport(a))
	other := connectReport(b)
	other.GetSessionReport().RequestId = "query-1"
	b.send(other)
	b.barrier()
	for _, cmd := range cmds {
		if isDone(cmd) {
			t.Fatalf("%s ended by a report not meant for this connection: %+v", cmd.ID(), cmd.Result())
		}
	}

	b.send(connectReport(b, kept.ID()))
	for _, cmd := range []ports.Command{lost1, lost2} {
		if r := waitDone(t, cmd); r.Error != ports.ErrCommandLost.Error() || r.ExitCode != -1 {
			t.Fatalf("%s: %+v, want ErrCommandLost", cmd.ID(), r)
		}
	}
	b.barrier()
	if isDone(kept) || isDone(fresh) {
		t.Fatalf("kept done %v, fresh done %v", isDone(kept), isDone(fresh))
	}
	if n := agentInfoOf(t, h.svc, "agent-a").RunningCommands; n != 2 {
		t.Fatalf("RunningCommands %d, want 2", n)
	}
	b.send(result(kept.ID(), ports.CommandResult{}))
	b.send(result(fresh.ID(), ports.CommandResult{}))
	waitDone(t, kept)
	waitDone(t, fresh)
}

func TestCommandStartedCallsOnStartedOnce(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	b := h.connectAgent("agent-b")
	var n1, n2 atomic.Int32
	c1, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "x"}, ports.StartOptions{OnStarted: func() { n1.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "y"}, ports.StartOptions{OnStarted: func() { n2.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()
	a.recv()

	// Another agent cannot start it.
	b.send(commandStarted(c1.ID(), 1))
	b.barrier()
	if n1.Load() != 0 {
		t.Fatal("another agent's CommandStarted fired OnStarted")
	}

	a.send(commandStarted(c1.ID(), 1234))
	a.send(commandStarted(c1.ID(), 1234))
	a.send(output(c1.ID(), stdout, 0, "x"))
	// Without CommandStarted, the first output counts as the start.
	a.send(output(c2.ID(), stdout, 0, "y"))
	a.send(output(c2.ID(), stdout, 1, "z"))
	a.barrier()
	if n1.Load() != 1 || n2.Load() != 1 {
		t.Fatalf("OnStarted called %d and %d times, want once each", n1.Load(), n2.Load())
	}
}

func TestAttachRoutesAnEarlierCommand(t *testing.T) {
	h := newHarness(t)
	var out outputLog
	var started atomic.Int32
	cmd := h.svc.Attach("agent-a", "old-7", ports.StartOptions{OnOutput: out.add, OnStarted: func() { started.Add(1) }})
	if cmd.ID() != "old-7" || cmd.AgentID() != "agent-a" || isDone(cmd) {
		t.Fatalf("Attach = %s on %s", cmd.ID(), cmd.AgentID())
	}
	if again := h.svc.Attach("agent-a", "old-7", ports.StartOptions{}); again != cmd {
		t.Fatal("a second Attach made a second command")
	}
	if got, ok := h.svc.Lookup("old-7"); !ok || got != cmd {
		t.Fatal("Lookup does not find the attached command")
	}
	if err := cmd.Signal(context.Background(), 2); err != ports.ErrAgentNotFound {
		t.Fatalf("control before the agent is back: %v", err)
	}

	a := h.connectAgent("agent-a")
	a.send(output("old-7", stdout, 0, "still here"))
	a.send(result("old-7", ports.CommandResult{ExitCode: 2}))
	if r := waitDone(t, cmd); r.ExitCode != 2 {
		t.Fatalf("result %+v", r)
	}
	if out.text(ports.StreamStdout) != "still here" || started.Load() != 1 {
		t.Fatalf("output %q, started %d", out.text(ports.StreamStdout), started.Load())
	}

	// An attached command the agent no longer runs ends as lost.
	gone := h.svc.Attach("agent-a", "old-8", ports.StartOptions{})
	a.send(connectReport(a))
	if r := waitDone(t, gone); r.Error != ports.ErrCommandLost.Error() {
		t.Fatalf("unreported attached command: %+v", r)
	}
	eventually(t, "nothing counted", func() bool { return agentInfoOf(t, h.svc, "agent-a").RunningCommands == 0 })
}

// ports.StartOptions.CommandID lets the caller choose the command's id (a
// mission stores its session id before the session exists).
//
// BUG: Start ignores opts.CommandID and always takes an id from cfg.IDs.
func TestStartUsesTheCallersCommandID(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	cmd, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "x"},
		ports.StartOptions{Detached: true, CommandID: "sess-42"})
	if err != nil {
		t.Fatal(err)
	}
	req := a.recv().GetCommand()
	if cmd.ID() != "sess-42" || req.GetCommandId() != "sess-42" {
		t.Fatalf("command id %q, sent as %q; want the caller's sess-42", cmd.ID(), req.GetCommandId())
	}
	if got, ok := h.svc.Lookup("sess-42"); !ok || got != cmd {
		t.Fatal("Lookup does not find the command by the caller's id")
	}
	if _, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "y"},
		ports.StartOptions{Detached: true, CommandID: "sess-42"}); err == nil {
		t.Fatal("a second command with the caller's id was accepted")
	}
	a.send(result("sess-42", ports.CommandResult{}))
	waitDone(t, cmd)
}

// sameIDs hands out the same id every time.
type sameIDs struct{}

func (sameIDs) NewID() string { return "dup" }

func TestStartRefusesADuplicateID(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.IDs = sameIDs{} })
	a := h.connectAgent("agent-a")
	first, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "x"}, ports.StartOptions{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()
	if _, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "y"}, ports.StartOptions{Detached: true}); err == nil {
		t.Fatal("a second command with the same id was accepted")
	}
	if got, _ := h.svc.Lookup("dup"); got != first || isDone(first) {
		t.Fatal("the refused start disturbed the first command")
	}
	if n := agentInfoOf(t, h.svc, "agent-a").RunningCommands; n != 1 {
		t.Fatalf("RunningCommands %d", n)
	}
	if m := a.pending(); m != nil {
		t.Fatalf("agent got %v", m)
	}
}

// CloseStreams drains: each agent is told to close its side, what it sent
// until then (after the Drain too) is handled, and only then does its
// stream end, with Unavailable. A server going away takes no new stream.
func TestCloseStreamsDrainsEveryStream(t *testing.T) {
	// Only the agents' closes can end their drained streams within the
	// waits: the timeout that would end them anyway is an hour.
	defer func(d time.Duration) { drainTimeout = d }(drainTimeout)
	drainTimeout = time.Hour
	h := newHarness(t)
	agents := []*fakeAgent{h.connectAgent("agent-a"), h.connectAgent("agent-b")}
	var outs []*outputLog
	var cmds []ports.Command
	for _, fa := range agents {
		out := &outputLog{}
		cmd, err := h.svc.Start(context.Background(), fa.id, ports.CommandSpec{Command: "x"}, ports.StartOptions{Detached: true, OnOutput: out.add})
		if err != nil {
			t.Fatal(err)
		}
		fa.recv() // the command request
		outs, cmds = append(outs, out), append(cmds, cmd)
	}
	h.svc.CloseStreams()
	for i, fa := range agents {
		if d := fa.recv().GetDrain(); d == nil {
			t.Fatalf("%s was not told to drain", fa.id)
		}
		// In flight when the Drain came: still read.
		fa.send(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Output{Output: &sandboxv1.OutputChunk{
			StreamId: cmds[i].ID(), Stream: sandboxv1.OutputStream_OUTPUT_STREAM_STDOUT, Data: []byte("last words")}}})
		if err := fa.stream.CloseRequest(); err != nil {
			t.Fatal(err)
		}
		if err := fa.waitClosed(); connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("%s: stream ended with %v, want unavailable", fa.id, err)
		}
		if got := outs[i].text(ports.StreamStdout); got != "last words" {
			t.Fatalf("%s: output %q after the drain, want \"last words\"", fa.id, got)
		}
		if st := agentInfoOf(t, h.svc, fa.id).Status; st != "disconnected" {
			t.Fatalf("%s status %q", fa.id, st)
		}
	}
	if err := h.attempt("agent-a", secretPrefix+"agent-a", registration("agent-a")); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("a new stream during shutdown: %v, want unavailable", err)
	}
}

// An agent that does not know Drain (an older one) keeps its stream only
// until drainTimeout.
func TestCloseStreamsEndsAStreamNotClosedInTime(t *testing.T) {
	h := newHarness(t)
	fa := h.connectAgent("agent-a")
	h.svc.CloseStreams()
	if d := fa.recv().GetDrain(); d == nil {
		t.Fatal("not told to drain")
	}
	select {
	case <-fa.done:
		t.Fatal("stream ended before the agent closed its side or the timeout")
	case <-time.After(drainTimeout / 2):
	}
	if err := fa.waitClosed(); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("stream ended with %v, want unavailable", err)
	}
}

// A command the agent reports as finished ends with its real result, and
// output lost in a connection that died is filled in from the reported tail.
func TestConnectReportOfAFinishedCommandCompletesIt(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	var mu sync.Mutex
	var got []byte
	cmd, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "x", PTY: true}, ports.StartOptions{
		Detached: true,
		OnOutput: func(c ports.OutputChunk) { mu.Lock(); got = append(got, c.Data...); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	a.recv() // the command request
	pty := sandboxv1.OutputStream_OUTPUT_STREAM_PTY
	a.send(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Output{Output: &sandboxv1.OutputChunk{StreamId: cmd.ID(), Stream: pty, Data: []byte("hello "), Offset: 0}}})
	a.barrier()
	// The rest of the output and the result vanish with the connection.
	a.hangUp()
	b := h.connectAgent("agent-a")
	rep := &sandboxv1.SessionReport{RequestId: "connect:" + b.ack.GetConfig()[ConfigConnectionID], Sessions: []*sandboxv1.SessionInfo{{
		CommandId: cmd.ID(), State: sandboxv1.SessionState_SESSION_STATE_EXITED, ExitCode: 5,
		Result:     agentwire.CommandResult(cmd.ID(), ports.CommandResult{ExitCode: 5}),
		OutputTail: []byte("lo world\n"), TailStream: pty, OutputOffset: 12,
	}}}
	b.send(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_SessionReport{SessionReport: rep}})
	if r := waitDone(t, cmd); r.ExitCode != 5 || r.Error != "" {
		t.Fatalf("result %+v, want the reported exit 5", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if string(got) != "hello world\n" {
		t.Fatalf("output %q, want the gap filled from the tail", got)
	}
}

type recordedReports struct {
	ports.NoLinkReports
	mu   sync.Mutex
	reps map[string][]ports.ReportedSession
}

func (r *recordedReports) ReconcileSessions(agentID string, reported []ports.ReportedSession) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reps[agentID] = reported
}

// An agent that names another agent's command in its report gets nothing:
// the command is not handed to the session reconciler (which would adopt or
// kill it), Attach gives it an ended stand-in, and the owner's command runs on.
func TestAnAgentCannotReachAnotherAgentsCommands(t *testing.T) {
	rec := &recordedReports{reps: map[string][]ports.ReportedSession{}}
	h := newHarness(t, func(c *Config) { c.Reports = rec })
	a := h.connectAgent("agent-a")
	victim, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "sleep", PTY: true, SessionID: "s-a", SessionName: "as-work", SessionType: ports.SessionBackground}, ports.StartOptions{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	a.recv() // the command request

	b := h.connectAgent("agent-b")
	rep := &sandboxv1.SessionReport{RequestId: "connect:" + b.ack.GetConfig()[ConfigConnectionID], Sessions: []*sandboxv1.SessionInfo{{
		CommandId: victim.ID(), SessionId: "s-a", Name: "stolen", Type: sandboxv1.SessionType_SESSION_TYPE_BACKGROUND,
		State: sandboxv1.SessionState_SESSION_STATE_RUNNING,
	}}}
	b.send(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_SessionReport{SessionReport: rep}})
	b.send(result(victim.ID(), ports.CommandResult{ExitCode: 9}))
	b.barrier()

	rec.mu.Lock()
	got := rec.reps["agent-b"]
	rec.mu.Unlock()
	if len(got) != 0 {
		t.Fatalf("agent-b's report of agent-a's command reached the reconciler: %+v", got)
	}
	if isDone(victim) {
		t.Fatalf("agent-b ended agent-a's command: %+v", victim.Result())
	}
	stand := h.svc.Attach("agent-b", victim.ID(), ports.StartOptions{})
	if !isDone(stand) || stand == victim {
		t.Fatal("Attach handed agent-b agent-a's command")
	}
	if err := stand.Kill(context.Background()); !errors.Is(err, ports.ErrCommandEnded) {
		t.Fatalf("killing through the stand-in: %v", err)
	}
	a.barrier()
	if m := a.pending(); m != nil {
		t.Fatalf("agent-a was sent %v", m)
	}
	// The owner still finishes its command.
	a.send(result(victim.ID(), ports.CommandResult{ExitCode: 0}))
	if r := waitDone(t, victim); r.ExitCode != 0 {
		t.Fatalf("victim result %+v", r)
	}
}

// A report listing far more sessions than an agent can run is cut at the
// bound: the reconciler never sees tens of thousands.
func TestAHugeReportIsBounded(t *testing.T) {
	rec := &recordedReports{reps: map[string][]ports.ReportedSession{}}
	h := newHarness(t, func(c *Config) { c.Reports = rec })
	b := h.connectAgent("agent-b")
	rep := &sandboxv1.SessionReport{RequestId: "connect:" + b.ack.GetConfig()[ConfigConnectionID]}
	for i := range 5000 {
		rep.Sessions = append(rep.Sessions, &sandboxv1.SessionInfo{
			CommandId: fmt.Sprintf("c%d", i), Name: fmt.Sprintf("as-s%d", i),
			Type: sandboxv1.SessionType_SESSION_TYPE_BACKGROUND, State: sandboxv1.SessionState_SESSION_STATE_RUNNING,
		})
	}
	b.send(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_SessionReport{SessionReport: rep}})
	b.barrier()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if n := len(rec.reps["agent-b"]); n != maxReportedSessions {
		t.Fatalf("the reconciler got %d sessions, want the bound %d", n, maxReportedSessions)
	}
}

// A killed command the agent never reports ended (it ignores the kill, or
// named a command it does not run) is ended by the server after a while:
// no command object lives forever.
func TestAKilledCommandEndsEvenIfTheAgentNeverSaysSo(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.KillTimeout = 200 * time.Millisecond })
	a := h.connectAgent("agent-a")
	made := h.svc.Attach("agent-a", "made-up-by-the-agent", ports.StartOptions{})
	if err := made.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.recv() // the kill, which the agent ignores
	if r := waitDone(t, made); r.Error == "" || r.ExitCode != -1 {
		t.Fatalf("result %+v, want ended by the server", r)
	}
	if info := agentInfoOf(t, h.svc, "agent-a"); info.RunningCommands != 0 {
		t.Fatalf("the agent still counts %d running commands", info.RunningCommands)
	}
}

// prefixAdopter adopts the commands whose id has its prefix, keeping their
// output, as the REST API does with its background commands.
type prefixAdopter struct {
	prefix string
	out    outputLog
	mu     sync.Mutex
	got    []ports.Command
}

func (p *prefixAdopter) AdoptCommand(cmd ports.Command) (ports.StartOptions, bool) {
	if len(cmd.ID()) < len(p.prefix) || cmd.ID()[:len(p.prefix)] != p.prefix {
		return ports.StartOptions{}, false
	}
	p.mu.Lock()
	p.got = append(p.got, cmd)
	p.mu.Unlock()
	return ports.StartOptions{OnOutput: p.out.add}, true
}

// After a restart of the server, the commands an agent reports that the
// server does not know are adopted under their ids when the adopter takes
// them: their output (that which came ahead of the report too) reaches it,
// and they are controllable and counted. Others are held: a claim (Attach)
// binds them, and one nobody claims is killed after the claim grace.
func TestReportedUnknownCommandsAreAdoptedOrHeld(t *testing.T) {
	ad := &prefixAdopter{prefix: "rest-"}
	h := newHarness(t, func(c *Config) { c.ClaimGrace = time.Minute; c.KillTimeout = time.Hour })
	h.svc.SetCommandAdopter(ad)
	a := h.connectAgent("agent-a")
	a.send(output("rest-1", stdout, 100, "kept while the server was away"))
	a.send(connectReport(a, "rest-1", "task-9", "stray-3"))
	a.send(output("rest-1", stdout, 130, "; after"))
	a.barrier()

	ad.mu.Lock()
	n := len(ad.got)
	ad.mu.Unlock()
	if n != 1 || ad.got[0].ID() != "rest-1" || ad.got[0].AgentID() != "agent-a" {
		t.Fatalf("adopted %d commands: %v", n, ad.got)
	}
	chunks := ad.out.get()
	if len(chunks) != 2 || chunks[0].Offset != 100 || ad.out.text(ports.StreamStdout) != "kept while the server was away; after" {
		t.Fatalf("adopted output %+v", chunks)
	}
	rest, ok := h.svc.Lookup("rest-1")
	if !ok || rest != ad.got[0] {
		t.Fatal("Lookup does not find the adopted command")
	}
	for _, id := range []string{"task-9", "stray-3"} {
		if _, ok := h.svc.Lookup(id); !ok {
			t.Fatalf("held command %s not found", id)
		}
	}
	if info := agentInfoOf(t, h.svc, "agent-a"); info.RunningCommands != 3 || info.Status != "busy" {
		t.Fatalf("agent counts %d commands, status %s; want 3, busy", info.RunningCommands, info.Status)
	}

	// The task binds to its run again: claimed, with its output from now on.
	var taskOut outputLog
	task := h.svc.Attach("agent-a", "task-9", ports.StartOptions{OnOutput: taskOut.add})
	a.send(output("task-9", stdout, 0, "task says"))
	a.barrier()
	if taskOut.text(ports.StreamStdout) != "task says" {
		t.Fatalf("claimed output %q", taskOut.text(ports.StreamStdout))
	}

	// The adopted one is killable.
	if err := rest.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	if k := a.recv().GetPtyControl(); k.GetCommandId() != "rest-1" || k.GetKill() == nil {
		t.Fatalf("kill of the adopted command: %v", k)
	}
	a.send(result("rest-1", ports.CommandResult{ExitCode: 137, Signal: 9}))
	if r := waitDone(t, rest); r.Signal != 9 {
		t.Fatalf("adopted result %+v", r)
	}

	// Nobody claims stray-3: killed once the grace is over; the claimed
	// task is not.
	h.svc.sweep()
	if m := a.pending(); m != nil {
		t.Fatalf("killed before the grace: %v", m)
	}
	h.clock.Advance(time.Minute)
	h.svc.sweep()
	if k := a.recv().GetPtyControl(); k.GetCommandId() != "stray-3" || k.GetKill() == nil {
		t.Fatalf("after the grace the agent got %v, want a kill of stray-3", k)
	}
	a.send(result("stray-3", ports.CommandResult{ExitCode: 143, Signal: 15}))
	stray, _ := h.svc.Lookup("stray-3")
	if r := waitDone(t, stray); r.Signal != 15 {
		t.Fatalf("stray result %+v", r)
	}
	a.barrier()
	if m := a.pending(); m != nil {
		t.Fatalf("the claimed task got %v", m)
	}
	if isDone(task) {
		t.Fatalf("claimed task ended: %+v", task.Result())
	}
	if n := agentInfoOf(t, h.svc, "agent-a").RunningCommands; n != 1 {
		t.Fatalf("RunningCommands %d, want 1 (the task)", n)
	}
}

// A command the server has ended (it gave up on it) that the agent reports
// running is killed: nothing runs on unreachable.
func TestReportedRunningAfterTheServerEndedItIsKilled(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	cmd, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "x"}, ports.StartOptions{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()
	a.hangUp()
	eventually(t, "the agent seen disconnected", func() bool { return agentInfoOf(t, h.svc, "agent-a").Status == "disconnected" })
	h.clock.Advance(h.cfg.DisconnectGrace)
	h.svc.sweep()
	if r := waitDone(t, cmd); r.Error != ports.ErrAgentGone.Error() {
		t.Fatalf("result %+v", r)
	}
	b := h.connectAgent("agent-a")
	b.send(connectReport(b, cmd.ID()))
	if k := b.recv().GetPtyControl(); k.GetCommandId() != cmd.ID() || k.GetKill() == nil {
		t.Fatalf("the agent got %v, want a kill of %s", k, cmd.ID())
	}
}
