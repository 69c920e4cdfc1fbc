package agentd

import (
	"sync"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
)

// maxStdinQueued bounds the input waiting for a command that does not read
// it. Input is never dropped: a server that paces by offsets and acks sends
// at most agentwire.StdinWindow, which fits; for one that does not, the
// link's receive loop waits for room (the server's writes then wait too).
const maxStdinQueued = agentwire.StdinQueueBytes

// stdinQueue hands a command's input to its own writer goroutine, so a
// command that does not read its stdin blocks only that goroutine, never
// the agent's receive loop (which also carries kills and other commands).
type stdinQueue struct {
	mu     sync.Mutex
	space  *sync.Cond
	chunks [][]byte
	bytes  int
	eof    bool
	// received is the offset of the next input byte (what came before it
	// is queued or written), written what the process was given.
	received, written uint64
	// closed: the writer stopped (eof written, a write failed, or the
	// process ended); nothing more reaches the process.
	closed bool
	// paced: the server sends offsets and reads acks. An epoch's offsets
	// are the server's count: its first chunk here (offset epochOff) came
	// when epochAt bytes were received. A restarted server counts from 0
	// again; an agent process that took over a session starts with nothing
	// received while its server's count goes on.
	paced             bool
	epoch             string
	epochOff, epochAt uint64
	wake              chan struct{}
	// ackedAt is what written was at the last ack; ackArmed: an ack is
	// due within stdinAckDelay (ackSoon).
	ackedAt  uint64
	ackArmed bool
}

func newStdinQueue() *stdinQueue {
	q := &stdinQueue{wake: make(chan struct{}, 1)}
	q.space = sync.NewCond(&q.mu)
	return q
}

// pushResult says what push did with a chunk.
type pushResult int

const (
	// pushQueued: the data (and eof) is queued for the process.
	pushQueued pushResult = iota
	// pushDuplicate: the agent had all of it already (a resend).
	pushDuplicate
	// pushClosed: the process's stdin is closed; the data cannot be written.
	pushClosed
	// pushGap: the chunk starts beyond what was received: bytes before it
	// never came. Not queued (that would deliver input out of order).
	pushGap
)

// push queues data, and the end of input after it when eof. offset, when
// the server gives it, is where data starts in the input as the server's
// epoch counts it: bytes already received are skipped. When the queue is
// full it waits for room (so a server that does not pace is paced by the
// link) rather than drop.
func (q *stdinQueue) push(data []byte, eof bool, offset *uint64, epoch string) pushResult {
	q.mu.Lock()
	defer q.mu.Unlock()
	if offset != nil {
		q.paced = true
		if epoch != q.epoch {
			q.epoch, q.epochOff, q.epochAt = epoch, *offset, q.received
		}
		if *offset < q.epochOff { // before the epoch's first chunk: had
			if q.closed {
				return pushClosed
			}
			return pushDuplicate
		}
		off := *offset - q.epochOff + q.epochAt // in the agent's count
		if off > q.received {
			return pushGap
		}
		skip := q.received - off
		if skip >= uint64(len(data)) && (!eof || q.eof) {
			if q.closed {
				return pushClosed
			}
			return pushDuplicate
		}
		data = data[min(skip, uint64(len(data))):]
	}
	for !q.closed && q.bytes > 0 && q.bytes+len(data) > maxStdinQueued {
		q.space.Wait()
	}
	if q.closed {
		return pushClosed
	}
	if len(data) > 0 {
		q.chunks = append(q.chunks, append([]byte(nil), data...))
		q.bytes += len(data)
		q.received += uint64(len(data))
	}
	q.eof = q.eof || eof
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return pushQueued
}

// take returns what is queued and whether the input ends after it. The
// bytes stay counted until written (wrote), so a full queue stays full
// while its writer is blocked on the process.
func (q *stdinQueue) take() ([][]byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	chunks, eof := q.chunks, q.eof
	q.chunks = nil
	return chunks, eof
}

// wrote counts n bytes given to the process and makes room for them.
func (q *stdinQueue) wrote(n int) {
	q.mu.Lock()
	q.bytes -= n
	q.written += uint64(n) //nolint:gosec // n is a chunk's length
	q.mu.Unlock()
	q.space.Broadcast()
}

// close stops the queue: pushers waiting for room give up.
func (q *stdinQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.space.Broadcast()
}

// ack is the StdinAck for the queue's state now, nil when the server does
// not pace (it would not understand it).
func (q *stdinQueue) ack(commandID string) *sandboxv1.ConnectRequest {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.paced {
		return nil
	}
	q.ackedAt, q.ackArmed = q.written, false
	written := q.epochOff // in the server's count (input of an earlier epoch is not its)
	if q.written > q.epochAt {
		written += q.written - q.epochAt
	}
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_StdinAck{StdinAck: &sandboxv1.StdinAck{
		CommandId: commandID, Written: written, Closed: q.closed,
	}}}
}

// sendAck tells the server how far r's input got.
func (a *Agent) sendAck(r *running, q *stdinQueue) {
	if m := q.ack(r.id); m != nil {
		// Small, and never dropped: the server's window opens only with it.
		a.out.pushNow(m)
	}
}

// stdinLoop writes r's queued input in order until the input ends or the
// command does, acknowledging what it wrote after each batch.
func (a *Agent) stdinLoop(r *running, q *stdinQueue) {
	for {
		select {
		case <-q.wake:
		case <-r.proc.Done():
			q.close()
			return
		}
		chunks, eof := q.take()
		for _, c := range chunks {
			hoptrace.Mark("agent.pty_write")
			if err := r.proc.WriteStdin(c); err != nil {
				a.log.Info("stdin write failed; the rest of the input cannot be delivered", "command_id", r.id, "err", err)
				q.close()
				a.sendAck(r, q)
				return
			}
			q.wrote(len(c))
		}
		if eof {
			_ = r.proc.CloseStdin()
			q.close()
			a.sendAck(r, q)
			return
		}
		if len(chunks) > 0 {
			a.ackSoon(r, q)
		}
	}
}

// Acknowledgements of input written are coalesced: a keystroke's ack
// would cross the link (two processes' goroutines woken on each side)
// just while the keystroke's echo is on its way back, and that echo waits
// behind it. The server needs acks only to open its window
// (agentwire.StdinWindow) and to forget what it keeps for a resend, so
// what was written is acknowledged at most stdinAckDelay after it was,
// or at once when stdinAckBytes are unacknowledged (far inside the
// window). Duplicates, refusals, the end of input and a failed write are
// acknowledged at once as before.
const stdinAckBytes = agentwire.StdinWindow / 8

// stdinAckDelay: a variable for tests.
var stdinAckDelay = 10 * time.Millisecond

// ackSoon acknowledges what r's writer wrote: now past stdinAckBytes,
// else within stdinAckDelay.
func (a *Agent) ackSoon(r *running, q *stdinQueue) {
	q.mu.Lock()
	due := q.written-q.ackedAt >= stdinAckBytes
	arm := !due && !q.ackArmed && q.paced
	if arm {
		q.ackArmed = true
	}
	q.mu.Unlock()
	switch {
	case due:
		a.sendAck(r, q)
	case arm:
		time.AfterFunc(stdinAckDelay, func() { a.sendAck(r, q) })
	}
}

// stdinChunk queues a chunk of input for r's process.
func (a *Agent) stdinChunk(r *running, c *sandboxv1.StdinChunk) {
	hoptrace.Mark("agent.link_stdin")
	r.stdinOnce.Do(func() {
		r.stdin = newStdinQueue()
		go a.stdinLoop(r, r.stdin)
	})
	var offset *uint64
	if c.Offset != nil {
		offset = c.Offset
	}
	switch r.stdin.push(c.GetData(), c.GetEof(), offset, c.GetInputEpoch()) {
	case pushQueued:
	case pushDuplicate:
		// A resend after a reconnect: the ack that answered it may have
		// been lost with the old connection.
		a.sendAck(r, r.stdin)
	case pushClosed:
		a.log.Info("stdin after the process's stdin closed; not delivered", "command_id", r.id, "bytes", len(c.GetData()))
		a.sendAck(r, r.stdin)
	case pushGap:
		a.log.Error("stdin chunk beyond the input received; refused", "command_id", r.id, "offset", c.GetOffset(), "bytes", len(c.GetData()))
		a.sendAck(r, r.stdin)
	}
}
