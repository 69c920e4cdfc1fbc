package agentrpc

import (
	"context"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
)

// Output acknowledgements are coalesced. An OutputAck per output message
// or data-plane read woke the server's send loop just when a viewer's
// stream had to wake for the same bytes, and ran first (the keystroke path
// hop by hop, docs/benchmarks.md); the agent needs acks only to let go of
// what it keeps for a resend, within its outbox's byte bound. So what is
// handled (stored) is acknowledged per command stream by the highest
// offset it reached:
//   - at most outputAckDelay after it was handled (one timer per
//     connection, armed by the first unacknowledged output; arming it
//     wakes nothing),
//   - at once when outputAckBytes are unacknowledged on the connection,
//     far inside the agent's outbox (64 MiB by default; an agent configured
//     with an outbox below that is paced by the delay, never stalled),
//   - at once at a command's end (its result, an end-of-stream chunk, the
//     end of a data stream or its cut),
//   - and at a drain, every ack still due goes out before the stream ends.
//
// A coalesced ack lost with its connection costs a resend, never output:
// the agent keeps what is not acknowledged and sends it again, and the
// server drops by offset what it has.

// outputAckBytes is how many unacknowledged bytes on a connection send the
// acknowledgements at once.
const outputAckBytes = 512 << 10

// outputAckDelay bounds how long handled output waits for its
// acknowledgement (a variable for tests).
var outputAckDelay = 5 * time.Millisecond

// noteAck notes that the agent's output of command id's stream is handled
// up to end, n bytes of it now; now sends the acknowledgements at once.
func (c *conn) noteAck(id string, stream sandboxv1.OutputStream, end uint64, n int, now bool) {
	k := ackKey{id, stream}
	c.ackMu.Lock()
	if c.acks == nil {
		c.acks = map[ackKey]uint64{}
	}
	if end > c.acks[k] {
		c.acks[k] = end
	}
	c.ackBytes += n
	now = now || c.ackBytes >= outputAckBytes
	if !now && !c.ackArmed {
		c.ackArmed = true
		if c.ackTimer == nil {
			c.ackTimer = time.AfterFunc(outputAckDelay, c.wakeAcks)
		} else {
			c.ackTimer.Reset(outputAckDelay)
		}
	}
	c.ackMu.Unlock()
	if now {
		c.wakeAcks()
	}
}

// flushAcks sends the acknowledgements due at once (a command's end).
func (c *conn) flushAcks() {
	c.ackMu.Lock()
	due := len(c.acks) > 0
	c.ackMu.Unlock()
	if due {
		c.wakeAcks()
	}
}

func (c *conn) wakeAcks() {
	select {
	case c.ackWake <- struct{}{}:
	default:
	}
}

// takeAcks returns the acknowledgements due and forgets them.
func (c *conn) takeAcks() []*sandboxv1.ConnectResponse {
	c.ackMu.Lock()
	due := c.acks
	c.acks = nil
	c.ackBytes = 0
	c.ackArmed = false // a timer still armed finds nothing, or what came since
	c.ackMu.Unlock()
	out := make([]*sandboxv1.ConnectResponse, 0, len(due))
	for k, off := range due {
		out = append(out, &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_OutputAck{OutputAck: &sandboxv1.OutputAck{
			CommandId: k.id, Stream: k.stream, Offset: off}}})
	}
	return out
}

// requeueAcks notes again acknowledgements taken but not sent.
func (c *conn) requeueAcks(msgs []*sandboxv1.ConnectResponse) {
	c.ackMu.Lock()
	defer c.ackMu.Unlock()
	for _, m := range msgs {
		a := m.GetOutputAck()
		if a == nil {
			continue
		}
		if c.acks == nil {
			c.acks = map[ackKey]uint64{}
		}
		k := ackKey{a.GetCommandId(), a.GetStream()}
		if a.GetOffset() > c.acks[k] {
			c.acks[k] = a.GetOffset()
		}
	}
}

// sendAcks sends the output acknowledgements as they fall due, until the
// stream ends or drains (the drain sends what is due then itself, after
// the agent's last output: drainAcks).
func (s *Service) sendAcks(ctx context.Context, c *conn, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-c.ackWake:
		case <-c.closed:
			return
		case <-c.draining:
			return
		case <-ctx.Done():
			return
		}
		due := c.takeAcks()
		for i, m := range due {
			// Not c.send: the send loop stops reading c.out at a drain.
			select {
			case c.out <- m:
				continue
			case <-c.draining:
			case <-c.closed:
			case <-ctx.Done():
			}
			c.requeueAcks(due[i:])
			return
		}
	}
}

// drainAcks sends, at the end of a drained stream, every acknowledgement
// still due: those noted and those taken but not sent (held from c.out by
// the drain, or still in it). It returns the other messages of held and
// c.out, which the stream did not send.
func drainAcks(c *conn, stream interface {
	Send(*sandboxv1.ConnectResponse) error
}, acksDone <-chan struct{}, held []*sandboxv1.ConnectResponse) []*sandboxv1.ConnectResponse {
	<-acksDone // sendAcks returns at the drain without waiting
	rest := make([]*sandboxv1.ConnectResponse, 0, len(held))
	keep := func(m *sandboxv1.ConnectResponse) {
		if m.GetOutputAck() != nil {
			c.requeueAcks([]*sandboxv1.ConnectResponse{m})
		} else {
			rest = append(rest, m)
		}
	}
	for _, m := range held {
		keep(m)
	}
	for more := true; more; {
		select {
		case m := <-c.out:
			keep(m)
		default:
			more = false
		}
	}
	for _, m := range c.takeAcks() {
		if stream.Send(m) != nil {
			break
		}
	}
	return rest
}
