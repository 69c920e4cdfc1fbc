package agentrpc

import (
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// waitAck reads what the server sends until an OutputAck of cmd's stream
// reaches offset, and returns the acknowledged offsets seen on the way.
func waitAck(a *fakeAgent, cmd string, s sandboxv1.OutputStream, offset uint64) []uint64 {
	a.t.Helper()
	var seen []uint64
	for {
		ack := testkit.Receive(a.t, waitTimeout, a.acks, "no output acknowledgement")
		if ack.GetCommandId() == cmd && ack.GetStream() == s {
			seen = append(seen, ack.GetOffset())
			if ack.GetOffset() >= offset {
				return seen
			}
		}
	}
}

// The server acknowledges output only once its handler (a session's log)
// has it, and a restarted server that knows how far it has a command's
// output (Resume) drops what the agent sends again and hands on output
// that starts past it with what never arrived counted as lost.
func TestOutputAcknowledgedOnceHandledAndResumed(t *testing.T) {
	h := newHarness(t)
	var out outputLog
	pty := sandboxv1.OutputStream_OUTPUT_STREAM_PTY
	h.svc.Attach("agent-a", "old-1", ports.StartOptions{OnOutput: out.add, Resume: map[ports.OutputStream]uint64{ports.StreamPTY: 5}})
	a := h.connectAgent("agent-a")
	if !a.ack.GetOutputAcks() {
		t.Fatal("the registration ack does not say output is acknowledged")
	}
	a.send(output("old-1", pty, 0, "01234")) // stored before the restart: sent again
	waitAck(a, "old-1", pty, 5)
	if got := out.get(); len(got) != 0 {
		t.Fatalf("output the server had was handed on again: %+v", got)
	}
	a.send(output("old-1", pty, 5, "56789"))
	waitAck(a, "old-1", pty, 10)
	if got := out.text(ports.StreamPTY); got != "56789" {
		t.Fatalf("handled %q by the time of its acknowledgement", got)
	}
	a.send(output("old-1", pty, 12, "cd")) // 10-11 never came
	waitAck(a, "old-1", pty, 14)
	got := out.get()
	if last := got[len(got)-1]; string(last.Data) != "cd" || last.Offset != 12 || last.Lost != 2 {
		t.Fatalf("output past a gap handed on as %+v; want 2 bytes lost before it", last)
	}

	// A command this server started knows its offsets from 0.
	var fresh outputLog
	cmd, err := h.svc.Start(t.Context(), "agent-a", ports.CommandSpec{Command: "x", PTY: true}, ports.StartOptions{OnOutput: fresh.add, Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	a.send(output(cmd.ID(), pty, 3, "late"))
	waitAck(a, cmd.ID(), pty, 7)
	if c := fresh.get(); len(c) != 1 || c[0].Lost != 3 {
		t.Fatalf("a fresh command's output from 3: %+v", c)
	}

	// Output of a command nobody has, after the report: acknowledged, so
	// the agent does not hold it for ever.
	a.send(connectReport(a, "old-1", cmd.ID()))
	a.send(output("nobody", pty, 0, "zz"))
	waitAck(a, "nobody", pty, 2)
}
