package agentrpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// stdinPipe paces a command's input to an agent that acknowledges it
// (Registration.stdin_acks): at most agentwire.StdinWindow bytes are on
// their way (sent, not acknowledged written to the process); a write
// beyond that is refused with ErrStdinBusy, never sent to be dropped.
// What is not acknowledged yet is kept and sent again, with its offset, on
// the agent's next connection (the agent skips what it already has), so a
// write once accepted reaches the process in order even across a
// reconnect. Memory: at most the window per command.
type stdinPipe struct {
	// writeMu serialises writers for the whole write, so the order
	// offsets are given in is the order the link carries the chunks.
	writeMu sync.Mutex
	// on is the connection the input went on (writeMu).
	on *conn
	// epoch names this handle's count of offsets (writeMu): an agent that
	// had input from an earlier server counts the new offsets from there.
	epoch string
	// onRaw is the session connection the input not acknowledged went on,
	// if it went on one (writeMu; sessionraw.go).
	onRaw *sessionRaw

	mu      sync.Mutex
	sent    uint64       // offset of the next input byte
	acked   uint64       // written to the process, as the agent said
	unacked []stdinPiece // sent, not yet acknowledged written
	eof     bool         // the end of input was sent
	closed  bool         // the agent said the process's stdin is closed
	raw     *sessionRaw  // the PTY stream's session connection, if any
}

type stdinPiece struct {
	off  uint64
	data []byte
	eof  bool
}

func (p stdinPiece) end() uint64 { return p.off + uint64(len(p.data)) }

// WriteStdin queues data for the process; see ports.Command.
func (c *command) WriteStdin(ctx context.Context, data []byte, eof bool) error {
	if c.isDone() {
		return ports.ErrCommandEnded
	}
	p := &c.stdin
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	p.mu.Lock()
	closed, busy, off := p.closed || p.eof, p.sent-p.acked, p.sent
	p.mu.Unlock()
	if closed {
		return ports.ErrStdinClosed
	}
	conn, err := c.svc.liveConn(c.agentID)
	if err != nil {
		return err
	}
	select {
	case <-conn.draining:
		// The server is going away: what is not sent by now would be lost.
		return ports.ErrAgentNotConnected
	default:
	}
	if !conn.stdinAcks {
		// An agent that does not acknowledge input is sent it unpaced.
		return conn.send(ctx, stdinMessage(c.id, data, eof, nil, ""))
	}
	if p.epoch == "" {
		p.epoch = newEpoch()
	}
	raw := p.sessionRawFor(conn, busy)
	if raw == nil {
		if err := c.catchUpStdin(ctx, conn); err != nil {
			return err
		}
	}
	if busy > 0 && busy+uint64(len(data)) > agentwire.StdinWindow {
		return ports.ErrStdinBusy
	}
	hoptrace.Mark("mgmt.link_send")
	if raw != nil && raw.send(agentwire.SessionInput{Epoch: p.epoch, Offset: off, Data: data, EOF: eof}) != nil {
		// Cut: what went on it and is not acknowledged goes again on the
		// stream (the agent skips what it has), then this.
		raw, p.onRaw, p.on = nil, nil, nil
		if err := c.catchUpStdin(ctx, conn); err != nil {
			return err
		}
	}
	if raw == nil {
		if err := conn.send(ctx, stdinMessage(c.id, data, eof, &off, p.epoch)); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.unacked = append(p.unacked, stdinPiece{off: off, data: append([]byte(nil), data...), eof: eof})
	p.sent += uint64(len(data))
	p.eof = eof
	p.mu.Unlock()
	return nil
}

// catchUpStdin sends again, on conn, the input not acknowledged on the
// connection it went on. writeMu must be held.
func (c *command) catchUpStdin(ctx context.Context, conn *conn) error {
	p := &c.stdin
	if p.on == conn {
		return nil
	}
	p.mu.Lock()
	resend := append([]stdinPiece(nil), p.unacked...)
	p.mu.Unlock()
	for _, piece := range resend {
		off := piece.off
		if err := conn.send(ctx, stdinMessage(c.id, piece.data, piece.eof, &off, p.epoch)); err != nil {
			return err
		}
	}
	p.on, p.onRaw = conn, nil
	return nil
}

// sessionRawFor is the session connection to send input on now, or nil
// for the Connect stream. writeMu must be held; busy is the input not
// acknowledged. Input moves to a session connection only when nothing
// sent before is unacknowledged (it could otherwise overtake it, and the
// agent refuses input past a gap); it leaves one that way too or, when the
// connection is gone, by sending again what was not acknowledged
// (catchUpStdin, as after a reconnect).
func (p *stdinPipe) sessionRawFor(conn *conn, busy uint64) *sessionRaw {
	p.mu.Lock()
	raw := p.raw
	p.mu.Unlock()
	if raw != nil && raw.c == conn && (busy == 0 || p.onRaw == raw) {
		p.on, p.onRaw = conn, raw
		return raw
	}
	if p.onRaw != nil && busy > 0 {
		p.on = nil // what went on it goes again
	}
	p.onRaw = nil
	return nil
}

// attachRaw makes raw the connection for the PTY's input.
func (p *stdinPipe) attachRaw(raw *sessionRaw) {
	p.mu.Lock()
	p.raw = raw
	p.mu.Unlock()
}

// detachRaw stops input going on raw: it ended.
func (p *stdinPipe) detachRaw(raw *sessionRaw) {
	p.mu.Lock()
	if p.raw == raw {
		p.raw = nil
	}
	p.mu.Unlock()
}

// resendStdin sends conn what its agent's commands were sent on an earlier
// connection and did not acknowledge, so it arrives without waiting for the
// next write. It runs once conn's send loop runs, until ctx (the stream's)
// ends.
func (s *Service) resendStdin(ctx context.Context, conn *conn) {
	if !conn.stdinAcks {
		return
	}
	s.mu.Lock()
	cmds := s.runningOn(conn.agentID, nil)
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-conn.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	for _, cmd := range cmds {
		p := &cmd.stdin
		p.writeMu.Lock()
		p.mu.Lock()
		pending := len(p.unacked) > 0
		p.mu.Unlock()
		var err error
		if pending && p.on != nil {
			err = cmd.catchUpStdin(ctx, conn)
		}
		p.writeMu.Unlock()
		if err != nil {
			return
		}
	}
}

// stdinAcked takes the agent's word on how far the input got.
func (c *command) stdinAcked(a *sandboxv1.StdinAck) {
	p := &c.stdin
	p.mu.Lock()
	defer p.mu.Unlock()
	written := min(a.GetWritten(), p.sent)
	p.acked = max(p.acked, written)
	p.closed = p.closed || a.GetClosed()
	if p.closed {
		// Nothing more reaches the process: nothing to send again.
		p.unacked = nil
		p.acked = p.sent
		return
	}
	n := 0
	for n < len(p.unacked) && p.unacked[n].end() <= p.acked && !p.unacked[n].eof {
		n++
	}
	if n > 0 {
		p.unacked = append([]stdinPiece(nil), p.unacked[n:]...)
	}
}

// forgetStdin drops what was kept for sending again: the command ended.
func (c *command) forgetStdin() {
	c.stdin.mu.Lock()
	c.stdin.unacked = nil
	c.stdin.mu.Unlock()
}

// sendQueuedStdin sends the input queued for c before its stream is
// drained (the rest of c.out is returned, for failUnsent): what a client was
// told is queued reaches the agent before the drain.
func sendQueuedStdin(c *conn, stream interface {
	Send(*sandboxv1.ConnectResponse) error
}) ([]*sandboxv1.ConnectResponse, error) {
	var held []*sandboxv1.ConnectResponse
	for {
		select {
		case msg := <-c.out:
			if msg.GetStdin() == nil {
				held = append(held, msg)
				continue
			}
			if err := stream.Send(msg); err != nil {
				return held, err
			}
		default:
			return held, nil
		}
	}
}

func stdinMessage(id string, data []byte, eof bool, off *uint64, epoch string) *sandboxv1.ConnectResponse {
	return &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Stdin{Stdin: &sandboxv1.StdinChunk{
		CommandId: id, Data: data, Eof: eof, Offset: off, InputEpoch: epoch,
	}}}
}

// newEpoch is a name no other handle on a command has had.
func newEpoch() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}
