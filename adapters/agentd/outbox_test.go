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
