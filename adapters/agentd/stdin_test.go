package agentd

import (
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

func joined(chunks [][]byte) string {
	var b strings.Builder
	for _, c := range chunks {
		b.Write(c)
	}
	return b.String()
}

func TestStdinQueueKeepsOrder(t *testing.T) {
	q := newStdinQueue()
	for _, s := range []string{"a", "b"} {
		if got := q.push([]byte(s), false, nil, ""); got != pushQueued {
			t.Fatalf("push %q: %v", s, got)
		}
	}
	if got := q.push(nil, true, nil, ""); got != pushQueued {
		t.Fatalf("the end of input: %v", got)
	}
	chunks, eof := q.take()
	if joined(chunks) != "ab" || !eof {
		t.Fatalf("took %q eof %v", joined(chunks), eof)
	}
}

// A full queue never drops input: the push waits for the writer to make
// room (the link is paced), then queues all of it, in order.
func TestStdinQueueFullWaitsInsteadOfDropping(t *testing.T) {
	if maxStdinQueued < agentwire.StdinWindow {
		t.Fatalf("the agent's queue (%d) must hold the server's window (%d)", maxStdinQueued, agentwire.StdinWindow)
	}
	q := newStdinQueue()
	first := []byte(strings.Repeat("x", maxStdinQueued))
	if got := q.push(first, false, nil, ""); got != pushQueued {
		t.Fatalf("a queue's worth: %v", got)
	}
	// The writer took it and is blocked writing it to the process.
	chunks, _ := q.take()
	done := make(chan pushResult, 1)
	go func() { done <- q.push([]byte("more"), false, nil, "") }()
	select {
	case got := <-done:
		t.Fatalf("a push into a full queue returned %v before room was made", got)
	default:
	}
	q.wrote(len(chunks[0]))
	if got := within(t, done, "the push never got the room the writer made"); got != pushQueued {
		t.Fatalf("after room was made: %v", got)
	}
	if chunks, _ := q.take(); joined(chunks) != "more" {
		t.Fatalf("then took %q", joined(chunks))
	}
	q.wrote(len("more"))
	// A closed queue (the process ended) wakes a waiting push, which says so.
	big := []byte(strings.Repeat("y", maxStdinQueued))
	if got := q.push(big, false, nil, ""); got != pushQueued {
		t.Fatalf("refill: %v", got)
	}
	go func() { done <- q.push([]byte("late"), false, nil, "") }()
	q.close()
	if got := within(t, done, "a push waiting on a closed queue never returned"); got != pushClosed {
		t.Fatalf("a push into a closed queue: %v", got)
	}
}

// Offsets make a resend harmless: bytes already received are skipped, a
// chunk beyond them is refused rather than queued out of order.
func TestStdinQueueOffsets(t *testing.T) {
	q := newStdinQueue()
	off := func(n uint64) *uint64 { return &n }
	if got := q.push([]byte("abc"), false, off(0), "e1"); got != pushQueued {
		t.Fatalf("first: %v", got)
	}
	if got := q.push([]byte("abc"), false, off(0), "e1"); got != pushDuplicate {
		t.Fatalf("a resend: %v", got)
	}
	if got := q.push([]byte("cdef"), false, off(2), "e1"); got != pushQueued {
		t.Fatalf("a resend that goes further: %v", got)
	}
	if got := q.push([]byte("zz"), false, off(10), "e1"); got != pushGap {
		t.Fatalf("beyond what was received: %v", got)
	}
	chunks, _ := q.take()
	if joined(chunks) != "abcdef" {
		t.Fatalf("took %q", joined(chunks))
	}
	q.wrote(4)
	if a := q.ack("c1").GetStdinAck(); a.GetCommandId() != "c1" || a.GetWritten() != 4 || a.GetClosed() {
		t.Fatalf("ack %v", a)
	}
	// A restarted server counts from 0 again under a new epoch: its offsets
	// start at what was received, and its acks count from there too.
	if got := q.push([]byte("gh"), false, off(0), "e2"); got != pushQueued {
		t.Fatalf("a new epoch's first chunk: %v", got)
	}
	if got := q.push([]byte("gh"), false, off(0), "e2"); got != pushDuplicate {
		t.Fatalf("its resend: %v", got)
	}
	if a := q.ack("c1").GetStdinAck(); a.GetWritten() != 0 {
		t.Fatalf("ack in the new epoch before its bytes were written: %v", a)
	}
	q.wrote(2) // the rest of the first epoch's
	if got := q.push(nil, true, off(2), "e2"); got != pushQueued {
		t.Fatalf("eof: %v", got)
	}
	chunks, eof := q.take()
	if joined(chunks) != "gh" || !eof {
		t.Fatalf("took %q eof %v", joined(chunks), eof)
	}
	q.wrote(2)
	if a := q.ack("c1").GetStdinAck(); a.GetWritten() != 2 {
		t.Fatalf("ack in the new epoch %v, want 2", a)
	}
}

// An agent process that took over a session (tmux) has received nothing
// while its server's count goes on: the first chunk of the epoch sets
// where the count stands, and later chunks follow it without a gap.
func TestStdinQueueJoinsAServersCountMidway(t *testing.T) {
	q := newStdinQueue()
	off := func(n uint64) *uint64 { return &n }
	if got := q.push([]byte("fgh"), false, off(5), "e1"); got != pushQueued {
		t.Fatalf("first chunk at 5: %v", got)
	}
	if got := q.push([]byte("de"), false, off(3), "e1"); got != pushDuplicate {
		t.Fatalf("before the first: %v", got)
	}
	if got := q.push([]byte("hij"), false, off(7), "e1"); got != pushQueued {
		t.Fatalf("overlapping: %v", got)
	}
	chunks, _ := q.take()
	if joined(chunks) != "fghij" {
		t.Fatalf("took %q", joined(chunks))
	}
	q.wrote(5)
	if a := q.ack("c1").GetStdinAck(); a.GetWritten() != 10 {
		t.Fatalf("ack %v, want 10 in the server's count", a)
	}
	// A queue the server does not pace sends no acks (it would not know them).
	if m := newStdinQueue().ack("c2"); m != nil {
		t.Fatalf("an unpaced queue acked: %v", m)
	}
}

// The agent acknowledges the input it wrote, and a resend after a
// reconnect: the server's window opens only with these.
func TestStdinIsAcknowledgedAsWritten(t *testing.T) {
	_, r, _, s := connectedAgent(t)
	p := startCommand(t, s, r, &sandboxv1.CommandRequest{CommandId: "cmd-in", Command: "cat", StdinOpen: true})
	off := func(n uint64) *uint64 { return &n }
	stdin := func(data string, at uint64, eof bool) {
		s.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Stdin{Stdin: &sandboxv1.StdinChunk{
			CommandId: "cmd-in", Data: []byte(data), Offset: off(at), Eof: eof}}})
	}
	ackUpTo := func(written uint64, closed bool) {
		t.Helper()
		for {
			m := s.next(t)
			a := m.GetStdinAck()
			if a == nil {
				t.Fatalf("expected an ack, got %v", m)
			}
			if a.GetCommandId() != "cmd-in" || a.GetWritten() > written {
				t.Fatalf("ack %v, want up to %d", a, written)
			}
			if a.GetWritten() == written && a.GetClosed() == closed {
				return
			}
		}
	}
	stdin("hello", 0, false)
	if e := p.event(t); e != "stdin:hello" {
		t.Fatalf("process saw %q", e)
	}
	ackUpTo(5, false)
	// A resend of what the agent has: not written again, acknowledged again.
	stdin("hello", 0, false)
	ackUpTo(5, false)
	stdin("lo bye", 3, true)
	if e := p.event(t); e != "stdin: bye" {
		t.Fatalf("process saw %q", e)
	}
	if e := p.event(t); e != "eof" {
		t.Fatalf("process saw %q", e)
	}
	ackUpTo(9, true)
}

// Input written is acknowledged within stdinAckDelay, not once per write
// (a keystroke's ack would cross the link just when its echo does), and at
// once when stdinAckBytes wait for an ack, far inside the server's window.
func TestStdinAcksAreCoalesced(t *testing.T) {
	if stdinAckBytes >= agentwire.StdinWindow/2 {
		t.Fatalf("an ack every %d bytes would let the server's window (%d) close", stdinAckBytes, agentwire.StdinWindow)
	}
	old := stdinAckDelay
	stdinAckDelay = time.Hour // only the byte count can make an ack here
	t.Cleanup(func() { stdinAckDelay = old })
	a, err := New(testConfig("http://127.0.0.1:1", newFakeRunner()))
	if err != nil {
		t.Fatal(err)
	}
	r := &running{id: "c1"}
	q := newStdinQueue()
	off := func(n uint64) *uint64 { return &n }
	write := func(data []byte, at uint64) {
		t.Helper()
		if got := q.push(data, false, off(at), "e1"); got != pushQueued {
			t.Fatalf("push at %d: %v", at, got)
		}
		chunks, _ := q.take()
		q.wrote(len(joined(chunks)))
		a.ackSoon(r, q)
	}
	write([]byte("k"), 0)
	write([]byte("e"), 1)
	if n := a.out.len(); n != 0 {
		t.Fatalf("%d messages queued after two keystrokes, want none before stdinAckDelay", n)
	}
	write(make([]byte, stdinAckBytes), 2)
	m := a.out.peek()
	if a := m.GetStdinAck(); a.GetCommandId() != "c1" || a.GetWritten() != stdinAckBytes+2 || a.GetClosed() {
		t.Fatalf("after %d bytes: %v, want an ack of all of them", stdinAckBytes+2, m)
	}
}

// The ack that waits comes without more input.
func TestStdinAckComesAfterTheDelay(t *testing.T) {
	old := stdinAckDelay
	stdinAckDelay = time.Millisecond
	t.Cleanup(func() { stdinAckDelay = old })
	a, err := New(testConfig("http://127.0.0.1:1", newFakeRunner()))
	if err != nil {
		t.Fatal(err)
	}
	r := &running{id: "c1"}
	q := newStdinQueue()
	at := uint64(0)
	if got := q.push([]byte("k"), false, &at, "e1"); got != pushQueued {
		t.Fatalf("push: %v", got)
	}
	q.take()
	q.wrote(1)
	a.ackSoon(r, q)
	testkit.Eventually(t, 15*time.Second, "the delayed ack", func() bool { return a.out.len() == 1 })
	if m := a.out.peek(); m.GetStdinAck().GetWritten() != 1 {
		t.Fatalf("queued %v, want the ack of 1 byte", m)
	}
}
