package agentrpc

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// execResult is everything an Exec call streamed back.
type execResult struct {
	msgs []*sandboxv1.ExecResponse
	err  error
}

// execAsync runs the Exec RPC in the background.
func (h *harness) execAsync(ctx context.Context, bearer string, req *sandboxv1.ExecRequest) <-chan execResult {
	ch := make(chan execResult, 1)
	go func() {
		r := connect.NewRequest(req)
		if bearer != "" {
			r.Header().Set("Authorization", bearer)
		}
		var res execResult
		stream, err := h.client.Exec(ctx, r)
		if err != nil {
			res.err = err
			ch <- res
			return
		}
		defer stream.Close()
		for stream.Receive() {
			res.msgs = append(res.msgs, stream.Msg())
		}
		res.err = stream.Err()
		ch <- res
	}()
	return ch
}

func waitExec(t *testing.T, ch <-chan execResult) execResult {
	t.Helper()
	return testkit.Receive(t, waitTimeout, ch, "Exec did not return")
}

func execReq(agentID, command string) *sandboxv1.ExecRequest {
	return &sandboxv1.ExecRequest{AgentId: agentID, Command: &sandboxv1.CommandRequest{Command: command}}
}

func TestExecRefusals(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	h.connectAgent("agent-b").hangUp()
	eventually(t, "agent-b disconnected", func() bool { return agentInfoOf(t, h.svc, "agent-b").Status == "disconnected" })

	for _, tc := range []struct {
		name   string
		bearer string
		req    *sandboxv1.ExecRequest
		code   connect.Code
	}{
		{"no bearer", "", execReq("agent-a", "true"), connect.CodeUnauthenticated},
		{"wrong bearer", "Bearer nope", execReq("agent-a", "true"), connect.CodeUnauthenticated},
		{"token without Bearer prefix", operatorToken, execReq("agent-a", "true"), connect.CodeUnauthenticated},
		{"unknown agent", "Bearer " + operatorToken, execReq("ghost", "true"), connect.CodeNotFound},
		{"disconnected agent", "Bearer " + operatorToken, execReq("agent-b", "true"), connect.CodeFailedPrecondition},
		{"no command", "Bearer " + operatorToken, &sandboxv1.ExecRequest{AgentId: "agent-a"}, connect.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := waitExec(t, h.execAsync(context.Background(), tc.bearer, tc.req))
			if got := connect.CodeOf(r.err); got != tc.code {
				t.Fatalf("code %v (%v), want %v", got, r.err, tc.code)
			}
			if len(r.msgs) != 0 {
				t.Fatalf("refused Exec streamed %v", r.msgs)
			}
		})
	}
	if m := a.pending(); m != nil {
		t.Fatalf("agent got %v from a refused Exec", m)
	}
}

func TestExecWithoutConfiguredTokenRefusesEveryone(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.OperatorToken = "" })
	h.connectAgent("agent-a")
	for _, bearer := range []string{"", "Bearer ", "Bearer x"} {
		r := waitExec(t, h.execAsync(context.Background(), bearer, execReq("agent-a", "true")))
		if connect.CodeOf(r.err) != connect.CodeUnauthenticated {
			t.Fatalf("bearer %q: %v", bearer, r.err)
		}
	}
}

func TestExecStreamsOutputThenResult(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	req := &sandboxv1.ExecRequest{
		AgentId: "agent-a",
		Command: &sandboxv1.CommandRequest{Command: "cat", Args: []string{"-n"}, TimeoutSeconds: 30},
		Stdin:   []byte("input\n"),
	}
	done := h.execAsync(context.Background(), "Bearer "+operatorToken, req)

	cr := a.recv().GetCommand()
	if cr.GetCommand() != "cat" || cr.GetTimeoutSeconds() != 30 || !cr.GetStdinOpen() || len(cr.GetArgs()) != 1 {
		t.Fatalf("agent got %v", cr)
	}
	id := cr.GetCommandId()
	in := a.recv().GetStdin()
	if !proto.Equal(in, &sandboxv1.StdinChunk{CommandId: id, Data: []byte("input\n"), Eof: true}) {
		t.Fatalf("stdin %v", in)
	}
	a.send(output(id, stdout, 0, "     1\t"))
	a.send(output(id, stdout, 0, "     1\t")) // duplicate: dropped
	a.send(output(id, stdout, 7, "input\n"))
	a.send(output(id, stderr, 0, "note"))
	a.send(result(id, ports.CommandResult{ExitCode: 0, Duration: 25 * time.Millisecond}))

	r := waitExec(t, done)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.msgs) == 0 {
		t.Fatal("no messages")
	}
	var gotOut, gotErr string
	for _, m := range r.msgs[:len(r.msgs)-1] {
		o := m.GetOutput()
		if o == nil || o.GetStreamId() != id {
			t.Fatalf("expected output of %s before the result, got %v", id, m)
		}
		switch o.GetStream() {
		case stdout:
			gotOut += string(o.GetData())
		case stderr:
			gotErr += string(o.GetData())
		}
	}
	if gotOut != "     1\tinput\n" || gotErr != "note" {
		t.Fatalf("streamed stdout %q stderr %q", gotOut, gotErr)
	}
	res := r.msgs[len(r.msgs)-1].GetResult()
	if !proto.Equal(res, &sandboxv1.CommandResult{CommandId: id, ExitCode: 0, DurationMs: 25, Success: true}) {
		t.Fatalf("result %v", res)
	}
}

func TestExecNoStdinKeepsStdinClosed(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	done := h.execAsync(context.Background(), "Bearer "+operatorToken, execReq("agent-a", "true"))
	cr := a.recv().GetCommand()
	if cr.GetStdinOpen() {
		t.Fatal("stdin left open without stdin data")
	}
	a.send(result(cr.GetCommandId(), ports.CommandResult{ExitCode: 1}))
	r := waitExec(t, done)
	if r.err != nil || len(r.msgs) != 1 || r.msgs[0].GetResult().GetExitCode() != 1 {
		t.Fatalf("exec: %v %v", r.msgs, r.err)
	}
}

func TestExecAgentGone(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	done := h.execAsync(context.Background(), "Bearer "+operatorToken, execReq("agent-a", "sleep"))
	a.recv()
	a.hangUp()
	// Back without the command (its process died with the agent's).
	b := h.connectAgent("agent-a")
	b.send(connectReport(b))
	r := waitExec(t, done)
	if connect.CodeOf(r.err) != connect.CodeUnavailable {
		t.Fatalf("exec on a vanished agent: %v", r.err)
	}
}

func TestExecCallerCancelKillsCommand(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	ctx, cancel := context.WithCancel(context.Background())
	done := h.execAsync(ctx, "Bearer "+operatorToken, execReq("agent-a", "sleep"))
	id := a.recv().GetCommand().GetCommandId()
	cancel()
	if k := a.recv().GetPtyControl(); k.GetCommandId() != id || k.GetKill() == nil {
		t.Fatalf("after the caller left the agent got %v, want a kill", k)
	}
	if r := waitExec(t, done); connect.CodeOf(r.err) != connect.CodeCanceled {
		t.Fatalf("cancelled exec: %v", r.err)
	}
}

// wakingLink stands for the server's decorator of the link: it counts the
// starts it sees and may refuse them (a wake that failed).
type wakingLink struct {
	ports.AgentLink
	starts atomic.Int32
	err    error
}

func (l *wakingLink) Start(ctx context.Context, agentID string, spec ports.CommandSpec, opts ports.StartOptions) (ports.Command, error) {
	l.starts.Add(1)
	if l.err != nil {
		return nil, l.err
	}
	return l.AgentLink.Start(ctx, agentID, spec, opts)
}

func TestExecStartsThroughTheExecLink(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	refusing := &wakingLink{AgentLink: h.svc, err: fmt.Errorf("%w: saved state lost", ports.ErrWakeFailed)}
	h.svc.SetExecLink(refusing)
	r := waitExec(t, h.execAsync(context.Background(), "Bearer "+operatorToken, execReq("agent-a", "true")))
	if connect.CodeOf(r.err) != connect.CodeUnavailable || !strings.Contains(r.err.Error(), "could not be woken") || refusing.starts.Load() != 1 {
		t.Fatalf("refused by the exec link: %v (%d starts)", r.err, refusing.starts.Load())
	}
	if m := a.pending(); m != nil {
		t.Fatalf("agent got %v after the exec link refused", m)
	}

	passing := &wakingLink{AgentLink: h.svc}
	h.svc.SetExecLink(passing)
	done := h.execAsync(context.Background(), "Bearer "+operatorToken, execReq("agent-a", "true"))
	id := a.recv().GetCommand().GetCommandId()
	a.send(result(id, ports.CommandResult{ExitCode: 0}))
	if r := waitExec(t, done); r.err != nil || passing.starts.Load() != 1 {
		t.Fatalf("exec: %v (%d starts through the exec link)", r.err, passing.starts.Load())
	}
}
