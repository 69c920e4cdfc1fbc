package agentd

import (
	"sync"

	"google.golang.org/protobuf/proto"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
)

// outbox holds command output and results until a connection takes them.
// It outlives connections, so output produced while the agent is
// disconnected is delivered after it reconnects. When it is full, producers
// block: the process is paced instead of output being dropped.
type outbox struct {
	mu     sync.Mutex
	space  *sync.Cond
	items  []*sandboxv1.ConnectRequest
	sizes  []int
	bytes  int
	limit  int
	notify chan struct{}
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

func (o *outbox) pop() {
	o.mu.Lock()
	if len(o.items) > 0 {
		o.bytes -= o.sizes[0]
		o.items[0] = nil
		o.items = o.items[1:]
		o.sizes = o.sizes[1:]
	}
	o.mu.Unlock()
	o.space.Broadcast()
}

func (o *outbox) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.items)
}
