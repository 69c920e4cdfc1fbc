package agentrpc

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// withAckDelay sets outputAckDelay for one test.
func withAckDelay(t *testing.T, d time.Duration) {
	old := outputAckDelay
	outputAckDelay = d
	t.Cleanup(func() { outputAckDelay = old })
}

// noAckYet fails if an acknowledgement of cmd came (after a barrier, so
// everything sent before was handled).
func noAckYet(t *testing.T, a *fakeAgent, cmd, what string) {
	t.Helper()
	a.barrier()
	for {
		select {
		case ack := <-a.acks:
			if ack.GetCommandId() == cmd {
				t.Fatalf("%s: acknowledged at once (%d) instead of coalesced", what, ack.GetOffset())
			}
		default:
			return
		}
	}
}

// acksOf reads the acknowledgements of cmd that came, up to a barrier.
func acksOf(a *fakeAgent, cmd string) []uint64 {
	a.barrier()
	var seen []uint64
	for {
		select {
		case ack := <-a.acks:
			if ack.GetCommandId() == cmd {
				seen = append(seen, ack.GetOffset())
			}
		default:
			return seen
		}
	}
}

func startDetached(t *testing.T, h *harness, a *fakeAgent, out *outputLog) ports.Command {
	t.Helper()
	cmd, err := h.svc.Start(t.Context(), a.id, ports.CommandSpec{Command: "x"}, ports.StartOptions{OnOutput: out.add, Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	a.recv() // the command request
	return cmd
}

// Many small chunks are acknowledged once, by the highest offset handled,
// when the delay is up; nothing is acknowledged before.
func TestOutputAcksAreCoalesced(t *testing.T) {
	withAckDelay(t, time.Hour) // only the command's end can send them in the test's time
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	a.send(connectReport(a))
	var out outputLog
	cmd := startDetached(t, h, a, &out)
	for i := range 50 {
		a.send(output(cmd.ID(), stdout, uint64(i), "x"))
	}
	noAckYet(t, a, cmd.ID(), "50 keystrokes' echo")
	if got := out.text(ports.StreamStdout); got != strings.Repeat("x", 50) {
		t.Fatalf("handled %q", got)
	}
	a.send(result(cmd.ID(), ports.CommandResult{}))
	if seen := waitAck(a, cmd.ID(), stdout, 50); len(seen) != 1 {
		t.Fatalf("acknowledgements %v for 50 chunks, want one at 50", seen)
	}
	if more := acksOf(a, cmd.ID()); len(more) != 0 {
		t.Fatalf("more acknowledgements after the command's end: %v", more)
	}
}

// Without anything else to send them, the acknowledgements go out when
// the delay is up.
func TestOutputAckComesAfterTheDelay(t *testing.T) {
	withAckDelay(t, 20*time.Millisecond)
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	a.send(connectReport(a))
	var out outputLog
	cmd := startDetached(t, h, a, &out)
	a.send(output(cmd.ID(), stdout, 0, "a"))
	a.send(output(cmd.ID(), stderr, 0, "bc"))
	// Both, in either order (one wake takes them together).
	reached := map[sandboxv1.OutputStream]uint64{}
	for reached[stdout] < 1 || reached[stderr] < 2 {
		ack := testkit.Receive(t, waitTimeout, a.acks, "no output acknowledgement")
		if ack.GetCommandId() == cmd.ID() {
			reached[ack.GetStream()] = max(reached[ack.GetStream()], ack.GetOffset())
		}
	}
	// And again for output after the first acknowledgements.
	a.send(output(cmd.ID(), stdout, 1, "de"))
	waitAck(a, cmd.ID(), stdout, 3)
}

// Past outputAckBytes unacknowledged, the acknowledgement goes at once:
// the agent's outbox does not wait for the delay.
func TestOutputAckAtOncePastTheThreshold(t *testing.T) {
	withAckDelay(t, time.Hour)
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	a.send(connectReport(a))
	var out outputLog
	cmd := startDetached(t, h, a, &out)
	chunk := strings.Repeat("y", 32<<10)
	var off uint64
	for off+uint64(len(chunk)) < outputAckBytes {
		a.send(output(cmd.ID(), stdout, off, chunk))
		off += uint64(len(chunk))
	}
	noAckYet(t, a, cmd.ID(), "output below the threshold")
	a.send(output(cmd.ID(), stdout, off, chunk))
	off += uint64(len(chunk))
	if seen := waitAck(a, cmd.ID(), stdout, off); len(seen) != 1 {
		t.Fatalf("acknowledgements %v past the threshold, want one at %d", seen, off)
	}
}

// An end-of-stream chunk, and a data stream's end, are acknowledged at once.
func TestOutputAckAtOnceAtTheEnd(t *testing.T) {
	withAckDelay(t, time.Hour)
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	a.send(connectReport(a))
	var out outputLog
	cmd := startDetached(t, h, a, &out)
	a.send(output(cmd.ID(), stdout, 0, "bye"))
	noAckYet(t, a, cmd.ID(), "output before its end")
	a.send(eofChunk(cmd.ID(), stdout, 3))
	waitAck(a, cmd.ID(), stdout, 3)

	p := h.connectOutputPlaneAgent("agent-b")
	var pout outputLog
	pcmd, err := h.svc.Start(t.Context(), p.id, ports.CommandSpec{Command: "x"}, ports.StartOptions{OnOutput: pout.add, Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	p.recv()
	h.postOK(p.post(pcmd.ID(), "stdout", 0, "over the data plane"))
	waitAck(p, pcmd.ID(), stdout, uint64(len("over the data plane")))
}

// A drain sends every acknowledgement still due before the stream ends,
// including those of output that came after the Drain.
func TestOutputAcksFlushedAtDrain(t *testing.T) {
	withAckDelay(t, time.Hour)
	defer func(d time.Duration) { drainTimeout = d }(drainTimeout)
	drainTimeout = time.Hour
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	a.send(connectReport(a))
	var out outputLog
	cmd := startDetached(t, h, a, &out)
	a.send(output(cmd.ID(), stdout, 0, "before"))
	noAckYet(t, a, cmd.ID(), "output before the drain")
	h.svc.CloseStreams()
	if d := a.recv().GetDrain(); d == nil {
		t.Fatal("not told to drain")
	}
	a.send(output(cmd.ID(), stdout, 6, " and after"))
	if err := a.stream.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	if err := a.waitClosed(); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("stream ended with %v, want unavailable", err)
	}
	ack := testkit.Receive(t, waitTimeout, a.acks, "no acknowledgement at the drain")
	if ack.GetCommandId() != cmd.ID() || ack.GetOffset() != 16 {
		t.Fatalf("acknowledged %v at the drain, want %s at 16", ack, cmd.ID())
	}
}
