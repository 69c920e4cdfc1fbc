package agentd

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
)

func chunk(data string) *sandboxv1.ConnectRequest {
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Output{Output: &sandboxv1.OutputChunk{
		StreamId: "c", Data: []byte(data),
	}}}
}

func dataOf(m *sandboxv1.ConnectRequest) string { return string(m.GetOutput().GetData()) }

func notified(o *outbox) bool {
	select {
	case <-o.notify:
		return true
	default:
		return false
	}
}

func TestOutboxFIFO(t *testing.T) {
	o := newOutbox(1 << 20)
	if o.peek() != nil || o.len() != 0 || notified(o) {
		t.Fatal("new outbox not empty")
	}
	o.pop() // popping an empty box is harmless
	for _, s := range []string{"a", "b", "c"} {
		o.push(chunk(s))
	}
	if !notified(o) {
		t.Fatal("push did not notify")
	}
	if notified(o) {
		t.Fatal("notify holds more than one wake-up")
	}
	if o.len() != 3 {
		t.Fatalf("len %d", o.len())
	}
	// peek does not remove: a failed send leaves the message for the next connection.
	first, again := dataOf(o.peek()), dataOf(o.peek())
	if first != "a" || again != "a" || o.len() != 3 {
		t.Fatal("peek removed or reordered")
	}
	var got []string
	for m := o.peek(); m != nil; m = o.peek() {
		got = append(got, dataOf(m))
		o.pop()
	}
	if strings.Join(got, "") != "abc" || o.len() != 0 || o.bytes != 0 {
		t.Fatalf("got %v, len %d, bytes %d", got, o.len(), o.bytes)
	}
}

func TestOutboxPushBlocksWhenFull(t *testing.T) {
	one := proto.Size(chunk("0123456789"))
	o := newOutbox(2 * one)
	o.push(chunk("0123456789"))
	o.push(chunk("abcdefghij"))

	pushed := pushAside(o, chunk("ABCDEFGHIJ"))
	// The third push must wait for space.
	stillBlocked(t, pushed, "push over the limit did not block")
	if o.len() != 2 {
		t.Fatalf("len %d while full", o.len())
	}

	o.pop()
	within(t, pushed, "pop did not unblock the waiting push")
	var got []string
	for m := o.peek(); m != nil; m = o.peek() {
		got = append(got, dataOf(m))
		o.pop()
	}
	if strings.Join(got, ",") != "abcdefghij,ABCDEFGHIJ" {
		t.Fatalf("order %v", got)
	}
}

func TestOutboxOversizedMessageFitsAnEmptyBox(t *testing.T) {
	o := newOutbox(16)
	big := strings.Repeat("x", 1000)
	within(t, pushAside(o, chunk(big)), "a message larger than the limit blocked on an empty outbox")
	if dataOf(o.peek()) != big {
		t.Fatal("big message lost")
	}

	// But a second one waits until the big one is gone.
	second := pushAside(o, chunk("y"))
	stillBlocked(t, second, "push into an over-full box did not block")
	o.pop()
	within(t, second, "push not released")
	if dataOf(o.peek()) != "y" || o.len() != 1 {
		t.Fatal("second message wrong")
	}
}

func TestOutboxConcurrentProducers(t *testing.T) {
	o := newOutbox(4 * proto.Size(chunk("p0-000")))
	const producers, each = 4, 50
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				o.push(chunk(fmt.Sprintf("%c%05d", 'a'+p, i)))
			}
		}()
	}
	got := map[byte]int{}
	deadline := time.After(waitTimeout)
	for n := 0; n < producers*each; {
		if m := o.peek(); m != nil {
			got[dataOf(m)[0]]++
			o.pop()
			n++
			continue
		}
		select {
		case <-o.notify:
		case <-deadline:
			t.Fatalf("consumed only %d of %d", n, producers*each)
		}
	}
	wg.Wait()
	for p := range producers {
		if got[byte('a'+p)] != each {
			t.Fatalf("counts %v", got)
		}
	}
}

// pushAside pushes m on a goroutine of its own; the channel closes once the
// push returned.
func pushAside(o *outbox, m *sandboxv1.ConnectRequest) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.push(m)
	}()
	return done
}

// stillBlocked fails the test with what when pushed closes within 30 ms.
func stillBlocked(t *testing.T, pushed <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-pushed:
		t.Fatal(what)
	case <-time.After(30 * time.Millisecond):
	}
}

func outChunk(id string, off uint64, data string) *sandboxv1.ConnectRequest {
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Output{Output: &sandboxv1.OutputChunk{
		StreamId: id, Stream: sandboxv1.OutputStream_OUTPUT_STREAM_PTY, Data: []byte(data), Offset: off,
	}}}
}

// drainBox sends (pops) everything queued and returns it in order.
func drainBox(o *outbox) string {
	var got []string
	for m := o.peek(); m != nil; m = o.peek() {
		if out := m.GetOutput(); out != nil {
			got = append(got, fmt.Sprintf("%s@%d:%s", out.GetStreamId(), out.GetOffset(), out.GetData()))
		} else {
			got = append(got, "other")
		}
		o.pop()
	}
	return strings.Join(got, " ")
}

// Output sent to a server that acknowledges output is kept until an
// acknowledgement covers it; what was not acknowledged goes again first,
// in send order, on the next connection; other messages go once.
func TestOutboxRetainsUnacknowledgedOutput(t *testing.T) {
	o := newOutbox(1 << 20)
	o.requeue(true)
	o.push(outChunk("a", 0, "a1"))
	o.push(outChunk("b", 0, "b1"))
	o.pushNow(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_CommandStarted{CommandStarted: &sandboxv1.CommandStarted{CommandId: "a"}}})
	o.push(outChunk("a", 2, "a2"))
	if got := drainBox(o); got != "a@0:a1 b@0:b1 other a@2:a2" {
		t.Fatalf("sent %q", got)
	}
	if o.bytes == 0 {
		t.Fatal("sent output no longer counted against the bound before its acknowledgement")
	}
	o.ack("a", sandboxv1.OutputStream_OUTPUT_STREAM_PTY, 2)    // covers a1 only
	o.ack("b", sandboxv1.OutputStream_OUTPUT_STREAM_STDOUT, 9) // another stream: covers nothing
	o.push(outChunk("b", 2, "b2"))                             // queued, not sent yet

	// The connection dies; the next server acknowledges output too.
	o.requeue(true)
	if !notified(o) {
		t.Fatal("requeue did not wake the sender")
	}
	if got := drainBox(o); got != "b@0:b1 a@2:a2 b@2:b2" {
		t.Fatalf("sent on the next connection %q; want the unacknowledged output first, in order", got)
	}
	o.ack("a", sandboxv1.OutputStream_OUTPUT_STREAM_PTY, 4)
	o.ack("b", sandboxv1.OutputStream_OUTPUT_STREAM_PTY, 4)
	if o.bytes != 0 || len(o.retained) != 0 {
		t.Fatalf("after every acknowledgement: %d bytes, %d retained", o.bytes, len(o.retained))
	}

	// A server that does not acknowledge output: sent output goes at once.
	o.push(outChunk("a", 4, "a3"))
	o.requeue(false)
	if got := drainBox(o); got != "a@4:a3" || o.bytes != 0 || len(o.retained) != 0 {
		t.Fatalf("without acknowledgements: sent %q, %d bytes left", got, o.bytes)
	}
}

// Unacknowledged output counts against the bound: producers wait for
// acknowledgements as they wait for sends.
func TestOutboxBoundHoldsUnacknowledgedOutput(t *testing.T) {
	o := newOutbox(proto.Size(outChunk("a", 0, "0123456789")))
	o.requeue(true)
	o.push(outChunk("a", 0, "0123456789"))
	o.pop() // sent, not acknowledged
	pushed := pushAside(o, outChunk("a", 10, "abcdefghij"))
	stillBlocked(t, pushed, "a push went past the bound held by unacknowledged output")
	o.ack("a", sandboxv1.OutputStream_OUTPUT_STREAM_PTY, 10)
	within(t, pushed, "the acknowledgement did not make room")
}
