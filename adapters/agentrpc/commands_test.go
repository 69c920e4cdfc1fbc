package agentrpc

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1/sandboxv1connect"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func TestCommandRoundTrip(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	var out outputLog
	spec := ports.CommandSpec{
		Command:     "bash",
		Args:        []string{"-c", "echo hi"},
		WorkingDir:  "/work",
		Env:         map[string]string{"A": "1", "B": "two"},
		Timeout:     1500 * time.Millisecond, // rounds up to 2 s on the wire
		RunAs:       "nobody",
		PTY:         true,
		Cols:        120,
		Rows:        40,
		Term:        "xterm-256color",
		StdinOpen:   true,
		SessionID:   "sess-1",
		SessionName: "main",
	}
	cmd, err := h.svc.Start(context.Background(), "agent-a", spec, ports.StartOptions{OnOutput: out.add, Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.AgentID() != "agent-a" || cmd.ID() != "cmd-1" {
		t.Fatalf("command %q on %q", cmd.ID(), cmd.AgentID())
	}
	if got, ok := h.svc.Lookup(cmd.ID()); !ok || got != cmd {
		t.Fatal("Lookup does not find the started command")
	}
	if _, ok := h.svc.Lookup("cmd-404"); ok {
		t.Fatal("Lookup finds an unknown command")
	}

	req := a.recv().GetCommand()
	want := &sandboxv1.CommandRequest{
		CommandId: cmd.ID(), Command: "bash", Args: []string{"-c", "echo hi"}, WorkingDir: "/work",
		Env: map[string]string{"A": "1", "B": "two"}, TimeoutSeconds: 2, RunAs: "nobody",
		AllocatePty: true, PtyCols: 120, PtyRows: 40, PtyTerm: "xterm-256color",
		SessionId: "sess-1", SessionName: "main", StdinOpen: true,
	}
	if !proto.Equal(req, want) {
		t.Fatalf("agent got\n%v\nwant\n%v", req, want)
	}
	if got := agentwire.CommandSpec(req); !reflect.DeepEqual(got, ports.CommandSpec{
		Command: "bash", Args: spec.Args, WorkingDir: "/work", Env: spec.Env, Timeout: 2 * time.Second, RunAs: "nobody",
		PTY: true, Cols: 120, Rows: 40, Term: "xterm-256color", StdinOpen: true, SessionID: "sess-1", SessionName: "main",
	}) {
		t.Fatalf("CommandSpecFromProto = %+v", got)
	}

	a.barrier()
	if info := agentInfoOf(t, h.svc, "agent-a"); info.RunningCommands != 1 || info.Status != "busy" {
		t.Fatalf("while running: %d commands, status %q", info.RunningCommands, info.Status)
	}

	pty := sandboxv1.OutputStream_OUTPUT_STREAM_PTY
	a.send(output(cmd.ID(), pty, 0, "hello "))
	a.send(output(cmd.ID(), pty, 6, "world\n"))
	a.send(output(cmd.ID(), pty, 0, "hello "))         // resent after a reconnect: dropped
	a.send(output(cmd.ID(), pty, 3, "lo world\nmore")) // overlaps: only "more" is new
	a.send(output(cmd.ID(), pty, 12, ""))              // empty: nothing to deliver
	a.send(output(cmd.ID(), stderr, 0, "warn"))
	a.send(eofChunk(cmd.ID(), pty, 16))
	a.send(eofChunk(cmd.ID(), stderr, 4))
	a.send(result(cmd.ID(), ports.CommandResult{ExitCode: 3, Duration: 1500 * time.Millisecond}))

	r := waitDone(t, cmd)
	if want := (ports.CommandResult{ExitCode: 3, Duration: 1500 * time.Millisecond}); r != want {
		t.Fatalf("result %+v, want %+v", r, want)
	}
	wantChunks := []ports.OutputChunk{
		{Stream: ports.StreamPTY, Data: []byte("hello "), Offset: 0},
		{Stream: ports.StreamPTY, Data: []byte("world\n"), Offset: 6},
		{Stream: ports.StreamPTY, Data: []byte("more"), Offset: 12},
		{Stream: ports.StreamStderr, Data: []byte("warn"), Offset: 0},
	}
	if got := out.get(); !reflect.DeepEqual(got, wantChunks) {
		t.Fatalf("OnOutput got %+v\nwant %+v", got, wantChunks)
	}
	// Done closes just before the count drops.
	eventually(t, "RunningCommands back to 0", func() bool { return agentInfoOf(t, h.svc, "agent-a").RunningCommands == 0 })

	// A resent result changes nothing and is not counted twice.
	a.send(result(cmd.ID(), ports.CommandResult{ExitCode: 99}))
	a.barrier()
	if r := cmd.Result(); r.ExitCode != 3 {
		t.Fatalf("a second result replaced the first: %+v", r)
	}
	if info := agentInfoOf(t, h.svc, "agent-a"); info.RunningCommands != 0 || info.Status != "ready" {
		t.Fatalf("after resend: %d commands, status %q", info.RunningCommands, info.Status)
	}

	// Control after the end.
	ctx := context.Background()
	for name, err := range map[string]error{
		"WriteStdin": cmd.WriteStdin(ctx, []byte("x"), false),
		"Resize":     cmd.Resize(ctx, 1, 1),
		"Signal":     cmd.Signal(ctx, 2),
		"Kill":       cmd.Kill(ctx),
	} {
		if !errors.Is(err, ports.ErrCommandEnded) {
			t.Errorf("%s after the result: %v, want ErrCommandEnded", name, err)
		}
	}
	if m := a.pending(); m != nil {
		t.Fatalf("agent got %v for an ended command", m)
	}
}

func TestStartErrors(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if _, err := h.svc.Start(ctx, "ghost", ports.CommandSpec{Command: "true"}, ports.StartOptions{}); !errors.Is(err, ports.ErrAgentNotFound) {
		t.Fatalf("unknown agent: %v", err)
	}
	a := h.connectAgent("agent-a")
	if _, err := h.svc.Start(ctx, "agent-a", ports.CommandSpec{}, ports.StartOptions{}); err == nil {
		t.Fatal("empty command accepted")
	}
	a.hangUp()
	eventually(t, "agent disconnected", func() bool { return agentInfoOf(t, h.svc, "agent-a").Status == "disconnected" })
	if _, err := h.svc.Start(ctx, "agent-a", ports.CommandSpec{Command: "true"}, ports.StartOptions{}); !errors.Is(err, ports.ErrAgentNotConnected) {
		t.Fatalf("disconnected agent: %v", err)
	}
	if info := agentInfoOf(t, h.svc, "agent-a"); info.RunningCommands != 0 {
		t.Fatalf("refused starts counted: %d", info.RunningCommands)
	}
}

func TestControlMessagesAndCancelKills(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd, err := h.svc.Start(ctx, "agent-a", ports.CommandSpec{Command: "cat", PTY: true, StdinOpen: true}, ports.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.recv() // the command

	bg := context.Background()
	for _, err := range []error{
		cmd.WriteStdin(bg, []byte("abc"), false),
		cmd.WriteStdin(bg, nil, true),
		cmd.Resize(bg, 100, 40),
		cmd.Signal(bg, 2),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	wants := []*sandboxv1.ConnectResponse{
		{Payload: &sandboxv1.ConnectResponse_Stdin{Stdin: &sandboxv1.StdinChunk{CommandId: cmd.ID(), Data: []byte("abc")}}},
		{Payload: &sandboxv1.ConnectResponse_Stdin{Stdin: &sandboxv1.StdinChunk{CommandId: cmd.ID(), Eof: true}}},
		{Payload: &sandboxv1.ConnectResponse_PtyControl{PtyControl: &sandboxv1.PtyControl{CommandId: cmd.ID(),
			Action: &sandboxv1.PtyControl_Resize{Resize: &sandboxv1.PtyResize{Cols: 100, Rows: 40}}}}},
		{Payload: &sandboxv1.ConnectResponse_PtyControl{PtyControl: &sandboxv1.PtyControl{CommandId: cmd.ID(),
			Action: &sandboxv1.PtyControl_Signal{Signal: &sandboxv1.PtySignal{Signal: 2}}}}},
	}
	for i, want := range wants {
		if got := a.recv(); !proto.Equal(got, want) {
			t.Fatalf("message %d: got %v, want %v", i, got, want)
		}
	}

	// The caller goes away: the command is killed.
	cancel()
	kill := a.recv().GetPtyControl()
	if kill.GetCommandId() != cmd.ID() || kill.GetKill() == nil {
		t.Fatalf("after cancel the agent got %v, want a kill of %s", kill, cmd.ID())
	}
	if isDone(cmd) {
		t.Fatal("command done before the agent reported its end")
	}
	a.send(result(cmd.ID(), ports.CommandResult{ExitCode: 143, Signal: 15}))
	if r := waitDone(t, cmd); r.Signal != 15 || r.ExitCode != 143 {
		t.Fatalf("result %+v", r)
	}
	if err := cmd.WriteStdin(bg, []byte("late"), false); !errors.Is(err, ports.ErrCommandEnded) {
		t.Fatalf("stdin after the end: %v", err)
	}

	// An explicit Kill sends the same message.
	cmd2, err := h.svc.Start(bg, "agent-a", ports.CommandSpec{Command: "sleep"}, ports.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()
	if err := cmd2.Kill(bg); err != nil {
		t.Fatal(err)
	}
	if k := a.recv().GetPtyControl(); k.GetCommandId() != cmd2.ID() || k.GetKill() == nil {
		t.Fatalf("Kill sent %v", k)
	}
}

func TestDetachedCommandOutlivesCallerContext(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	ctx, cancel := context.WithCancel(context.Background())
	cmd, err := h.svc.Start(ctx, "agent-a", ports.CommandSpec{Command: "sleep"}, ports.StartOptions{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()
	if c := cmd.(*command); func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.stopCtxW != nil }() {
		t.Fatal("a detached command is tied to its caller's context")
	}
	cancel()
	if err := cmd.Signal(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if got := a.recv().GetPtyControl(); got.GetSignal().GetSignal() != 10 {
		t.Fatalf("detached command got %v after its caller left, want only the signal", got)
	}
	if m := a.pending(); m != nil {
		t.Fatalf("unexpected message %v", m)
	}
	a.send(result(cmd.ID(), ports.CommandResult{}))
	waitDone(t, cmd)
}

// A disconnect loses no command, attached or detached: both run on while
// the agent is away. The agent's report when it is back settles them: the
// one it still runs goes on, the one it no longer knows (its process died)
// is lost.
func TestAgentGoneMidCommand(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	var attachedOut, detachedOut outputLog
	attached, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "a"}, ports.StartOptions{OnOutput: attachedOut.add})
	if err != nil {
		t.Fatal(err)
	}
	detached, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "d"}, ports.StartOptions{OnOutput: detachedOut.add, Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()
	a.recv()
	a.send(output(detached.ID(), stdout, 0, "before "))
	a.send(output(attached.ID(), stdout, 0, "partial"))
	a.barrier()

	a.hangUp()
	eventually(t, "the agent seen disconnected, both commands counted", func() bool {
		info := agentInfoOf(t, h.svc, "agent-a")
		return info.RunningCommands == 2 && info.Status == "disconnected"
	})
	if isDone(attached) || isDone(detached) {
		t.Fatalf("a disconnect ended a command: attached %v %+v, detached %v %+v", isDone(attached), attached.Result(), isDone(detached), detached.Result())
	}
	if err := detached.Signal(context.Background(), 2); !errors.Is(err, ports.ErrAgentNotConnected) {
		t.Fatalf("control while the agent is away: %v", err)
	}

	// The agent comes back: it runs the detached command still, not the
	// attached one (say its process was restarted). It finishes the
	// detached one, resending what it was not sure had arrived.
	b := h.connectAgent("agent-a")
	b.send(connectReport(b, detached.ID()))
	if r := waitDone(t, attached); r.Error != ports.ErrCommandLost.Error() || r.Success() {
		t.Fatalf("attached command result %+v, want ErrCommandLost", r)
	}
	b.send(output(detached.ID(), stdout, 0, "before after"))
	b.send(result(detached.ID(), ports.CommandResult{ExitCode: 0, Duration: time.Second}))
	if r := waitDone(t, detached); r != (ports.CommandResult{Duration: time.Second}) {
		t.Fatalf("detached result %+v", r)
	}
	if got := detachedOut.text(ports.StreamStdout); got != "before after" {
		t.Fatalf("detached output %q", got)
	}
	if got := attachedOut.text(ports.StreamStdout); got != "partial" {
		t.Fatalf("attached output %q", got)
	}
	b.barrier()
	if info := agentInfoOf(t, h.svc, "agent-a"); info.RunningCommands != 0 || info.Status != "ready" {
		t.Fatalf("after reconnect: %d commands, status %q", info.RunningCommands, info.Status)
	}
}

// An attached command outlives a disconnect: what it printed while the
// agent was away, and its result, arrive after the agent is back.
func TestAttachedCommandSurvivesADisconnect(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	var out outputLog
	cmd, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "a"}, ports.StartOptions{OnOutput: out.add})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()
	a.send(output(cmd.ID(), stdout, 0, "one "))
	a.barrier()
	a.hangUp()

	b := h.connectAgent("agent-a")
	b.send(output(cmd.ID(), stdout, 4, "two"))
	b.send(connectReport(b, cmd.ID()))
	b.barrier()
	if isDone(cmd) {
		t.Fatalf("the agent reports it running, yet it ended: %+v", cmd.Result())
	}
	b.send(result(cmd.ID(), ports.CommandResult{ExitCode: 3}))
	if r := waitDone(t, cmd); r.ExitCode != 3 || r.Error != "" {
		t.Fatalf("result %+v, want the agent's exit 3", r)
	}
	if got := out.text(ports.StreamStdout); got != "one two" {
		t.Fatalf("output %q", got)
	}
}

// The caller of an attached command goes away while its agent is away: the
// command is killed once the agent is back and reports it running.
func TestAbandonedWhileDisconnectedIsKilledOnReturn(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd, err := h.svc.Start(ctx, "agent-a", ports.CommandSpec{Command: "a"}, ports.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()
	a.hangUp()
	eventually(t, "the agent seen disconnected", func() bool { return agentInfoOf(t, h.svc, "agent-a").Status == "disconnected" })
	cancel()
	eventually(t, "the command marked abandoned", func() bool {
		c := cmd.(*command)
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.abandoned
	})

	b := h.connectAgent("agent-a")
	b.send(connectReport(b, cmd.ID()))
	if k := b.recv().GetPtyControl(); k.GetCommandId() != cmd.ID() || k.GetKill() == nil {
		t.Fatalf("after its return the agent got %v, want a kill of %s", k, cmd.ID())
	}
	b.send(result(cmd.ID(), ports.CommandResult{ExitCode: 137, Signal: 9}))
	if r := waitDone(t, cmd); r.Signal != 9 {
		t.Fatalf("result %+v", r)
	}
}

// An agent that never comes back within the disconnect grace takes its
// commands with it: they end as gone.
func TestAgentForgottenEndsItsCommands(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	var cmds []ports.Command
	for _, detached := range []bool{false, true} {
		cmd, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "x"}, ports.StartOptions{Detached: detached})
		if err != nil {
			t.Fatal(err)
		}
		a.recv()
		cmds = append(cmds, cmd)
	}
	a.hangUp()
	eventually(t, "the agent seen disconnected", func() bool { return agentInfoOf(t, h.svc, "agent-a").Status == "disconnected" })
	h.svc.sweep()
	for _, cmd := range cmds {
		if isDone(cmd) {
			t.Fatalf("%s ended before the grace: %+v", cmd.ID(), cmd.Result())
		}
	}
	h.clock.Advance(h.cfg.DisconnectGrace)
	h.svc.sweep()
	for _, cmd := range cmds {
		if r := waitDone(t, cmd); r.Error != ports.ErrAgentGone.Error() || r.Success() {
			t.Fatalf("%s: %+v, want ErrAgentGone", cmd.ID(), r)
		}
	}
}

func TestAgentCannotTouchAnotherAgentsCommand(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	b := h.connectAgent("agent-b")
	var out outputLog
	cmd, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "true"}, ports.StartOptions{OnOutput: out.add})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.recv().GetCommand().GetCommandId(); got != cmd.ID() {
		t.Fatalf("agent-a got %q", got)
	}
	if m := b.pending(); m != nil {
		t.Fatalf("agent-b got %v", m)
	}

	b.send(output(cmd.ID(), stdout, 0, "injected"))
	b.send(result(cmd.ID(), ports.CommandResult{ExitCode: 66}))
	b.barrier()
	if isDone(cmd) || len(out.get()) != 0 {
		t.Fatalf("agent-b reached agent-a's command: done=%v output=%+v", isDone(cmd), out.get())
	}
	if info := agentInfoOf(t, h.svc, "agent-a"); info.RunningCommands != 1 {
		t.Fatalf("agent-a running %d", info.RunningCommands)
	}

	a.send(output(cmd.ID(), stdout, 0, "real"))
	a.send(result(cmd.ID(), ports.CommandResult{ExitCode: 0}))
	if r := waitDone(t, cmd); !r.Success() {
		t.Fatalf("result %+v", r)
	}
	if got := out.text(ports.StreamStdout); got != "real" {
		t.Fatalf("output %q", got)
	}

	// And agent-b disconnecting does not fail agent-a's commands.
	cmd2, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "true"}, ports.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()
	b.hangUp()
	eventually(t, "agent-b disconnected", func() bool { return agentInfoOf(t, h.svc, "agent-b").Status == "disconnected" })
	if isDone(cmd2) {
		t.Fatalf("agent-a's command ended when agent-b left: %+v", cmd2.Result())
	}
}

func TestManyConcurrentCommands(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	const n = 20
	logs := make([]*outputLog, n)
	cmds := make([]ports.Command, n)
	for i := range n {
		logs[i] = &outputLog{}
		cmd, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "x"}, ports.StartOptions{OnOutput: logs[i].add})
		if err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for range n {
		a.recv()
	}
	// Interleave output of all commands.
	for chunk := range 10 {
		for i, cmd := range cmds {
			a.send(output(cmd.ID(), stdout, uint64(chunk*2), string(rune('a'+i))+string(rune('0'+chunk))))
		}
	}
	for i, cmd := range cmds {
		a.send(result(cmd.ID(), ports.CommandResult{ExitCode: i}))
	}
	for i, cmd := range cmds {
		if r := waitDone(t, cmd); r.ExitCode != i {
			t.Fatalf("command %d result %+v", i, r)
		}
		want := ""
		for chunk := range 10 {
			want += string(rune('a'+i)) + string(rune('0'+chunk))
		}
		if got := logs[i].text(ports.StreamStdout); got != want {
			t.Fatalf("command %d output %q, want %q", i, got, want)
		}
	}
	eventually(t, "no command counted", func() bool { return agentInfoOf(t, h.svc, "agent-a").RunningCommands == 0 })
}

// slowReaderClient is an h2c client whose streams accept only 64 KiB the
// application has not read yet, so a server write to an agent that does not
// read blocks quickly.
func slowReaderClient(t *testing.T, url string) sandboxv1connect.AgentServiceClient {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p, HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10}}
	t.Cleanup(tr.CloseIdleConnections)
	return sandboxv1connect.NewAgentServiceClient(&http.Client{Transport: tr}, url, connect.WithGRPC())
}

// A command whose request was still queued for a stream when that stream
// died never reached the agent and ends at once; one whose request was being
// written ends as lost when the agent's connect report does not list it,
// instead of staying pending forever.
func TestCommandQueuedOnDyingStreamEndsAsLost(t *testing.T) {
	h := newHarness(t)
	gate := make(chan struct{})
	a := h.connectAgentVia(slowReaderClient(t, h.url), "agent-a", gate)

	// A big request fills the stream's window, so the server's send loop
	// blocks on it; the next request waits in the connection's queue.
	big, err := h.svc.Start(context.Background(), "agent-a",
		ports.CommandSpec{Command: "big", Env: map[string]string{"PAD": strings.Repeat("x", 256<<10)}},
		ports.StartOptions{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	small, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "small"}, ports.StartOptions{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	h.svc.mu.Lock()
	c := h.svc.conns["agent-a"]
	h.svc.mu.Unlock()
	eventually(t, "send loop blocked on the big request with the small one queued", func() bool { return len(c.out) == 1 })

	// The stream dies before the small request left the queue.
	close(gate)
	a.hangUp()
	eventually(t, "agent disconnected", func() bool { return agentInfoOf(t, h.svc, "agent-a").Status == "disconnected" })
	// Whether the small request was still queued (it ends at once, not
	// delivered) or already written (it ends when the agent's report lacks
	// it) depends on timing; either way nothing stays pending or succeeds.
	b := h.connectAgent("agent-a")
	b.send(connectReport(b))
	for _, cmd := range []ports.Command{big, small} {
		r := waitDone(t, cmd)
		if r.Success() || (r.Error != ports.ErrCommandLost.Error() && !strings.Contains(r.Error, "not delivered")) {
			t.Fatalf("%s: %+v, want lost or not delivered", cmd.ID(), r)
		}
	}
	eventually(t, "nothing counted", func() bool { return agentInfoOf(t, h.svc, "agent-a").RunningCommands == 0 })
}

// A request still in a connection's queue when its stream ends never
// reached the agent: failUnsent ends that command at once.
func TestQueuedRequestEndsWhenStreamEnds(t *testing.T) {
	h := newHarness(t)
	h.connectAgent("agent-a")
	eventually(t, "agent connected", func() bool { return agentInfoOf(t, h.svc, "agent-a").Status != "disconnected" })
	cmd, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "x"}, ports.StartOptions{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	orphan := &conn{agentID: "agent-a", out: make(chan *sandboxv1.ConnectResponse, 1), closed: make(chan struct{})}
	orphan.out <- &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Command{Command: &sandboxv1.CommandRequest{CommandId: cmd.ID()}}}
	h.svc.failUnsent(orphan)
	if r := waitDone(t, cmd); !strings.Contains(r.Error, "not delivered") || r.Success() {
		t.Fatalf("queued command: %+v", r)
	}
}
