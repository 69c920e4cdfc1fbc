package agentrpc

import (
	"bytes"
	"context"
	"errors"
	"testing"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// connectPacedAgent registers id as an agent that acknowledges stdin.
func (h *harness) connectPacedAgent(id string) *fakeAgent {
	h.t.Helper()
	fa := h.openVia(h.client, id, secretPrefix+id)
	reg := registration(id)
	reg.GetRegistration().StdinAcks = true
	if err := fa.stream.Send(reg); err != nil {
		h.t.Fatalf("send registration of %s: %v", id, err)
	}
	msg, err := fa.stream.Receive()
	if err != nil || msg.GetRegistrationAck() == nil {
		h.t.Fatalf("registration of %s: %v %v", id, msg, err)
	}
	fa.ack = msg.GetRegistrationAck()
	fa.msgs = make(chan *sandboxv1.ConnectResponse, 1024)
	fa.done = make(chan struct{})
	go func() {
		defer close(fa.done)
		for {
			m, err := fa.stream.Receive()
			if err != nil {
				fa.err = err
				return
			}
			fa.msgs <- m
		}
	}()
	return fa
}

func stdinAck(id string, written uint64, closed bool) *sandboxv1.ConnectRequest {
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_StdinAck{StdinAck: &sandboxv1.StdinAck{
		CommandId: id, Written: written, Closed: closed}}}
}

// nextStdin returns the next stdin chunk the agent got, skipping the rest.
func (fa *fakeAgent) nextStdin() *sandboxv1.StdinChunk {
	fa.t.Helper()
	for {
		if c := fa.recv().GetStdin(); c != nil {
			return c
		}
	}
}

// A paced agent gets at most the window of input not acknowledged written;
// a write beyond it is refused (busy) and nothing of it is sent, and an
// acknowledgement makes room again.
func TestStdinIsPacedByTheAgentsAcks(t *testing.T) {
	h := newHarness(t)
	a := h.connectPacedAgent("agent-a")
	ctx := context.Background()
	cmd, err := h.svc.Start(ctx, "agent-a", ports.CommandSpec{Command: "cat", StdinOpen: true}, ports.StartOptions{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	a.recv() // the command
	const mib = 1 << 20
	chunk := func(b byte) []byte { return bytes.Repeat([]byte{b}, mib) }
	for i := range agentwire.StdinWindow / mib {
		if err := cmd.WriteStdin(ctx, chunk(byte('a'+i)), false); err != nil {
			t.Fatalf("write %d within the window: %v", i, err)
		}
	}
	if err := cmd.WriteStdin(ctx, chunk('x'), false); !errors.Is(err, ports.ErrStdinBusy) {
		t.Fatalf("a write beyond the window: %v, want busy", err)
	}
	var epoch string
	for i := range agentwire.StdinWindow / mib {
		c := a.nextStdin()
		if i == 0 {
			epoch = c.GetInputEpoch()
		}
		if epoch == "" || c.GetInputEpoch() != epoch {
			t.Fatalf("chunk %d: epoch %q, want one, the same for each", i, c.GetInputEpoch())
		}
		if c.Offset == nil || c.GetOffset() != uint64(i*mib) || c.GetData()[0] != byte('a'+i) || len(c.GetData()) != mib {
			t.Fatalf("chunk %d: offset %v, %d bytes of %q", i, c.Offset, len(c.GetData()), c.GetData()[:1])
		}
	}
	// The agent wrote the first MiB: one more fits, and it is the next
	// thing the agent gets (the refused write never went out).
	a.send(stdinAck(cmd.ID(), mib, false))
	eventually(t, "the ack to open the window", func() bool {
		err := cmd.WriteStdin(ctx, chunk('y'), false)
		if err != nil && !errors.Is(err, ports.ErrStdinBusy) {
			t.Fatal(err)
		}
		return err == nil
	})
	if c := a.nextStdin(); c.GetOffset() != agentwire.StdinWindow || c.GetData()[0] != 'y' {
		t.Fatalf("after the ack the agent got offset %d %q", c.GetOffset(), c.GetData()[:1])
	}
	// The process closed its stdin: later writes are refused as closed.
	a.send(stdinAck(cmd.ID(), 2*mib, true))
	eventually(t, "the closed stdin to be known", func() bool {
		return errors.Is(cmd.WriteStdin(ctx, []byte("z"), false), ports.ErrStdinClosed)
	})
}

// Input sent but not acknowledged when the link drops is sent again on the
// agent's next connection, at its offsets, before anything newer; while
// the agent is away a write is refused (not connected), not queued.
func TestUnacknowledgedStdinIsResentAfterAReconnect(t *testing.T) {
	h := newHarness(t)
	a := h.connectPacedAgent("agent-a")
	ctx := context.Background()
	cmd, err := h.svc.Start(ctx, "agent-a", ports.CommandSpec{Command: "cat", StdinOpen: true}, ports.StartOptions{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()
	for _, s := range []string{"abc", "def"} {
		if err := cmd.WriteStdin(ctx, []byte(s), false); err != nil {
			t.Fatal(err)
		}
	}
	epoch := a.nextStdin().GetInputEpoch()
	a.nextStdin()
	a.send(stdinAck(cmd.ID(), 3, false))
	a.barrier()
	a.hangUp()
	eventually(t, "agent disconnected", func() bool { return agentInfoOf(t, h.svc, "agent-a").Status == "disconnected" })
	if err := cmd.WriteStdin(ctx, []byte("lost?"), false); !errors.Is(err, ports.ErrAgentNotConnected) {
		t.Fatalf("a write while the agent is away: %v", err)
	}

	b := h.connectPacedAgent("agent-a")
	b.send(connectReport(b, cmd.ID()))
	if c := b.nextStdin(); c.GetCommandId() != cmd.ID() || c.GetOffset() != 3 || string(c.GetData()) != "def" || c.GetInputEpoch() != epoch {
		t.Fatalf("resent %v, want def at 3 in epoch %q", c, epoch)
	}
	if err := cmd.WriteStdin(ctx, []byte("ghi"), true); err != nil {
		t.Fatal(err)
	}
	if c := b.nextStdin(); c.GetOffset() != 6 || string(c.GetData()) != "ghi" || !c.GetEof() {
		t.Fatalf("then %v, want ghi at 6 with eof", c)
	}
	if err := cmd.WriteStdin(ctx, []byte("more"), false); !errors.Is(err, ports.ErrStdinClosed) {
		t.Fatalf("a write after eof: %v", err)
	}
}

type recordingStream struct{ sent []*sandboxv1.ConnectResponse }

func (r *recordingStream) Send(m *sandboxv1.ConnectResponse) error {
	r.sent = append(r.sent, m)
	return nil
}

// At a drain, the input still queued for the agent is sent before the
// drain (a restarted server would not know it); the rest is left to fail
// as undelivered.
func TestQueuedStdinGoesOutBeforeADrain(t *testing.T) {
	c := &conn{out: make(chan *sandboxv1.ConnectResponse, 8)}
	off0, off3 := uint64(0), uint64(3)
	cmdReq := &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Command{Command: &sandboxv1.CommandRequest{CommandId: "c2"}}}
	ping := &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Ping{Ping: &sandboxv1.Ping{Nonce: 1}}}
	in1, in2 := stdinMessage("c1", []byte("abc"), false, &off0, "e"), stdinMessage("c1", []byte("def"), true, &off3, "e")
	for _, m := range []*sandboxv1.ConnectResponse{cmdReq, in1, ping, in2} {
		c.out <- m
	}
	var st recordingStream
	held, err := sendQueuedStdin(c, &st)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.sent) != 2 || st.sent[0] != in1 || st.sent[1] != in2 {
		t.Fatalf("sent %v, want the two stdin chunks in order", st.sent)
	}
	if len(held) != 2 || held[0] != cmdReq || held[1] != ping || len(c.out) != 0 {
		t.Fatalf("held %v (left %d), want the command and the ping", held, len(c.out))
	}
}
