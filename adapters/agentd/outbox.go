package agentd

import (
	"sync"

	"google.golang.org/protobuf/proto"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
)

// outbox holds command output and results until a connection takes them.
// It outlives connections, so output produced while the agent is
// disconnected is delivered after it reconnects. When it is full, producers
// block: the process is paced instead of output being dropped.
//
// A sent message is not yet a delivered one: the stream's transport takes
// it before the server has it, and a server killed (-9) loses what was on
// the way. So while the server acknowledges output (OutputAck, acks on),
// sent output is retained, in send order and within the same byte bound,
// until an acknowledgement covers it; requeue puts what is still retained
// back at the head for the next connection, and the server drops by offset
// the bytes it already has.
type outbox struct {
	mu       sync.Mutex
	space    *sync.Cond
	items    []*sandboxv1.ConnectRequest
	sizes    []int
	bytes    int
	limit    int
	notify   chan struct{}
	acks     bool
	retained []retainedOutput
	// early are acknowledgements that came before the output they cover
	// was retained: a data stream's writer sends the bytes it is handed
	// before the send loop pops them, and on a session connection the
	// server's ack can come back first. Kept for this connection, bounded.
	early map[outKey]uint64
}

// maxEarlyAcks bounds the early acknowledgements kept; past it they are
// forgotten, and what they covered waits for the next ack or goes again on
// the next connection (the server drops it by offset).
const maxEarlyAcks = 1024

// retainedOutput is output sent on the current connection and not yet
// acknowledged.
type retainedOutput struct {
	msg    *sandboxv1.ConnectRequest
	size   int
	id     string
	stream sandboxv1.OutputStream
	end    uint64
}

func newOutbox(limit int) *outbox {
	o := &outbox{limit: limit, notify: make(chan struct{}, 1)}
	o.space = sync.NewCond(&o.mu)
	return o
}

func (o *outbox) push(m *sandboxv1.ConnectRequest) { o.put(m, true) }

// pushNow queues m even when the box is full. It is for small messages
// (command started, session reports) pushed where waiting for space could
// deadlock: before the send loop runs, or on the receive loop, which serve
// waits for after a send error.
func (o *outbox) pushNow(m *sandboxv1.ConnectRequest) { o.put(m, false) }

// put queues m, first waiting for space when wait is set.
func (o *outbox) put(m *sandboxv1.ConnectRequest, wait bool) {
	n := proto.Size(m)
	o.mu.Lock()
	for wait && o.bytes > 0 && o.bytes+n > o.limit {
		o.space.Wait()
	}
	o.items = append(o.items, m)
	o.sizes = append(o.sizes, n)
	o.bytes += n
	o.mu.Unlock()
	if hoptrace.On() {
		if out := m.GetOutput(); out != nil && out.GetOffset() == 0 && len(out.GetData()) > 0 {
			hoptrace.Mark("agent.out_queued") // a stream's first bytes (benchrun -exec-hops)
		}
	}
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// peek returns the oldest message without removing it, so a send that fails
// leaves it to be sent again on the next connection.
func (o *outbox) peek() *sandboxv1.ConnectRequest {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.items) == 0 {
		return nil
	}
	return o.items[0]
}

// pop removes the oldest message, which was sent: output is retained until
// acknowledged when the server acknowledges output.
func (o *outbox) pop() { o.take(true) }

// drop removes the oldest message, which needs no sending (an end of
// output the data plane carries itself).
func (o *outbox) drop() { o.take(false) }

func (o *outbox) take(retain bool) {
	o.mu.Lock()
	if len(o.items) > 0 {
		m, n := o.items[0], o.sizes[0]
		o.items[0] = nil
		o.items = o.items[1:]
		o.sizes = o.sizes[1:]
		out := m.GetOutput()
		end := out.GetOffset() + uint64(len(out.GetData()))
		if acked, ok := o.early[outKey{out.GetStreamId(), out.GetStream()}]; retain && o.acks && out != nil && (!ok || acked < end) {
			o.retained = append(o.retained, retainedOutput{msg: m, size: n, id: out.GetStreamId(), stream: out.GetStream(), end: end})
		} else {
			o.bytes -= n
		}
	}
	o.mu.Unlock()
	o.space.Broadcast()
}

// ack lets go of the retained output of a command's stream that ends at or
// before offset: the server has it.
func (o *outbox) ack(id string, stream sandboxv1.OutputStream, offset uint64) {
	o.mu.Lock()
	kept := o.retained[:0]
	found := false
	for _, r := range o.retained {
		if r.id == id && r.stream == stream && r.end <= offset {
			o.bytes -= r.size
			found = true
			continue
		}
		kept = append(kept, r)
	}
	clear(o.retained[len(kept):])
	o.retained = kept
	k := outKey{id, stream}
	switch {
	case found:
		delete(o.early, k)
	case o.acks:
		if o.early == nil || len(o.early) >= maxEarlyAcks {
			o.early = map[outKey]uint64{}
		}
		o.early[k] = max(o.early[k], offset)
	}
	o.mu.Unlock()
	o.space.Broadcast()
}

// requeue starts a connection: output sent on the last one and not
// acknowledged goes first, in the order it was sent; acks says whether
// the new connection's server acknowledges output.
func (o *outbox) requeue(acks bool) {
	o.mu.Lock()
	if len(o.retained) > 0 {
		items := make([]*sandboxv1.ConnectRequest, 0, len(o.retained)+len(o.items))
		sizes := make([]int, 0, cap(items))
		for _, r := range o.retained {
			items, sizes = append(items, r.msg), append(sizes, r.size)
		}
		o.items, o.sizes = append(items, o.items...), append(sizes, o.sizes...)
		o.retained = nil
	}
	o.acks = acks
	o.early = nil // acknowledgements of the last connection's sends
	n := len(o.items)
	o.mu.Unlock()
	if n > 0 {
		select {
		case o.notify <- struct{}{}:
		default:
		}
	}
}

func (o *outbox) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.items)
}

// pending counts the messages not sent and the output not acknowledged.
func (o *outbox) pending() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.items) + len(o.retained)
}
