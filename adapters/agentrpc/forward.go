package agentrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Connections into environments (previews, port-forward): the server asks
// the agent with a PortDial on Connect; the agent dials the port inside its
// own environment and opens a Forward stream for the connection, so it
// works where the environment has no network device at all.

// Forwards configures the connections into environments.
type Forwards struct {
	// MaxPerAgent bounds one environment's open connections (default
	// DefaultMaxForwards).
	MaxPerAgent int
	// Idle closes a connection that moved no byte either way for this long
	// (default DefaultForwardIdle).
	Idle time.Duration
	// ServerPorts are the server's own ports: refused to a host agent,
	// which shares the server's network, so a preview cannot reach the
	// server's listeners from inside. SetServerPorts replaces them once the
	// listeners are bound (port 0 picks them then).
	ServerPorts []uint16
}

// Defaults of Forwards.
const (
	DefaultMaxForwards = 1024
	DefaultForwardIdle = 15 * time.Minute
	// forwardOpenTimeout is how long the agent may take to dial and open
	// the stream.
	forwardOpenTimeout = 15 * time.Second
	forwardChunk       = 256 << 10
)

func (f Forwards) withDefaults() Forwards {
	if f.MaxPerAgent <= 0 {
		f.MaxPerAgent = DefaultMaxForwards
	}
	if f.Idle <= 0 {
		f.Idle = DefaultForwardIdle
	}
	return f
}

var _ ports.PortDialer = (*Service)(nil)

type forwardServerStream = *connect.BidiStream[sandboxv1.ForwardRequest, sandboxv1.ForwardResponse]

// pendingForward is a dial waiting for the agent's connection.
type pendingForward struct {
	agentID string
	opened  chan forwardResult
	claimed bool
}

// forwardResult is how the agent answered a dial: a connection (on a
// Forward stream or a raw connection of its own), or why not.
type forwardResult struct {
	conn interface {
		ports.Conn
		setRelease(func())
	}
	err error
}

type forwardTable struct {
	mu       sync.Mutex
	byID     map[string]*pendingForward
	perAgent agentCounts
}

func (t *forwardTable) add(id string, p *pendingForward) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID == nil {
		t.byID = map[string]*pendingForward{}
	}
	t.byID[id] = p
}

func (t *forwardTable) remove(id string) {
	t.mu.Lock()
	delete(t.byID, id)
	t.mu.Unlock()
}

// deliver hands the agent's connection to the dial waiting for it, once,
// and only to the dial asked of that agent; under the lock, so a dial that
// gives up (abandon) either sees the connection or makes it undeliverable.
func (t *forwardTable) deliver(id, agentID string, r forwardResult) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.byID[id]
	if p == nil || p.agentID != agentID || p.claimed {
		return false
	}
	p.claimed = true
	p.opened <- r // buffered: never blocks
	return true
}

// abandon removes a dial that gave up and closes a connection delivered to
// it meanwhile.
func (t *forwardTable) abandon(id string, p *pendingForward) {
	t.remove(id)
	select {
	case r := <-p.opened:
		if r.conn != nil {
			_ = r.conn.Close()
		}
	default:
	}
}

// SetServerPorts names the server's own ports (see Forwards.ServerPorts).
func (s *Service) SetServerPorts(list []uint16) {
	list = slices.Clone(list)
	s.serverPorts.Store(&list)
}

// DialPort opens a connection to port inside agentID's environment.
func (s *Service) DialPort(ctx context.Context, agentID string, port uint16) (ports.Conn, error) {
	f := s.cfg.Forwards
	if port == 0 {
		return nil, fmt.Errorf("%w: port 0", ports.ErrPortRefused)
	}
	if s.isHeld(agentID) {
		return nil, fmt.Errorf("%w: %s", ports.ErrAgentHeld, agentID)
	}
	c, err := s.liveConn(agentID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	rec, _ := s.registry.Get(agentID)
	address := ""
	for _, p := range c.listening.Ports {
		if p.Port == port {
			address = p.Address
			break
		}
	}
	s.mu.Unlock()
	if rec.Info.Runtime == ports.KindHost && slices.Contains(*s.serverPorts.Load(), port) {
		return nil, fmt.Errorf("%w: %d is this server's own port, and %s shares its network", ports.ErrPortRefused, port, agentID)
	}
	if !s.forwards.perAgent.take(agentID, f.MaxPerAgent) {
		return nil, fmt.Errorf("%w (at most %d)", ports.ErrTooManyForwards, f.MaxPerAgent)
	}
	id := s.cfg.IDs.NewID()
	p := &pendingForward{agentID: agentID, opened: make(chan forwardResult, 1)}
	s.forwards.add(id, p)
	var once sync.Once
	release := func() { once.Do(func() { s.forwards.perAgent.release(agentID) }) }
	fail := func(err error) (ports.Conn, error) {
		s.forwards.abandon(id, p)
		release()
		return nil, err
	}
	dial := &sandboxv1.PortDial{ForwardId: id, Port: uint32(port), Address: address}
	if err := c.send(ctx, &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_PortDial{PortDial: dial}}); err != nil {
		return fail(err)
	}
	timer := time.NewTimer(forwardOpenTimeout)
	defer timer.Stop()
	select {
	case r := <-p.opened:
		s.forwards.remove(id)
		if r.err != nil {
			release()
			return nil, r.err
		}
		r.conn.setRelease(release)
		return r.conn, nil
	case <-c.closed:
		return fail(ports.ErrAgentGone)
	case <-timer.C:
		return fail(fmt.Errorf("%w: the agent did not open the connection within %v", ports.ErrAgentGone, forwardOpenTimeout))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
}

// Forward serves the stream an agent opens for a PortDial.
func (s *Service) Forward(ctx context.Context, stream forwardServerStream) error {
	id, first, err := opened(&s.auth, stream, "a forward open")
	if err != nil {
		return err
	}
	op := first.GetOpened()
	if op == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the first message must name the dial"))
	}
	if op.GetError() != "" {
		if !s.forwards.deliver(op.GetForwardId(), id, forwardResult{err: dialError(id, op.GetError(), op.GetNotListening())}) {
			return connect.NewError(connect.CodeNotFound, errors.New("no such dial for this agent"))
		}
		return nil
	}
	fc := newForwardConn(stream, s.cfg.Forwards.Idle)
	if !s.forwards.deliver(op.GetForwardId(), id, forwardResult{conn: fc}) {
		_ = fc.Close()
		return connect.NewError(connect.CodeNotFound, errors.New("no such dial for this agent"))
	}
	go fc.receive()
	select {
	case <-fc.closed:
	case <-ctx.Done():
		fc.fail(io.ErrUnexpectedEOF)
	}
	// Past this the handler returns; a Send then would touch a finished
	// response, so none is in flight and none starts.
	fc.sendMu.Lock()
	fc.dead = true
	fc.sendMu.Unlock()
	return nil
}

// dialError is the error of a dial the agent could not make.
func dialError(agentID, reason string, notListening bool) error {
	if notListening {
		return fmt.Errorf("%w: %s", ports.ErrPortNotListening, clipReason(reason))
	}
	return fmt.Errorf("agent %s: %s", agentID, clipReason(reason))
}

func clipReason(s string) string {
	if len(s) > 256 {
		return s[:256] + "…"
	}
	return s
}

// forwardConn is a connection into an environment as a net.Conn. Reads come
// from a goroutine that receives the agent's messages; writes are sent on
// the stream. A deadline that passes closes the connection (it cannot be
// extended afterwards), as does the idle time.
type forwardConn struct {
	stream forwardServerStream
	slot   forwardSlot

	data     chan []byte // from the agent; closed at its end of writes
	rest     []byte
	readErr  error // set before data closes
	closed   chan struct{}
	once     sync.Once
	sendMu   sync.Mutex
	dead     bool
	idle     time.Duration
	idleT    *time.Timer
	deadMu   sync.Mutex
	deadline *time.Timer
}

func newForwardConn(stream forwardServerStream, idle time.Duration) *forwardConn {
	fc := &forwardConn{stream: stream, data: make(chan []byte, 4), closed: make(chan struct{}), idle: idle}
	// Set before it can fire: the callback reads fc.idleT.
	fc.idleT = time.AfterFunc(time.Hour, func() { fc.fail(os.ErrDeadlineExceeded) })
	fc.idleT.Reset(idle)
	return fc
}

func (fc *forwardConn) setRelease(release func()) { fc.slot.set(release) }

func (fc *forwardConn) touch() { fc.idleT.Reset(fc.idle) }

func (fc *forwardConn) receive() {
	defer close(fc.data)
	for {
		m, err := fc.stream.Receive()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fc.readErr = io.ErrUnexpectedEOF
			}
			return
		}
		if m.GetCloseWrite() {
			return
		}
		if b := m.GetData(); len(b) > 0 {
			select {
			case fc.data <- b:
			case <-fc.closed:
				return
			}
		}
	}
}

func (fc *forwardConn) Read(b []byte) (int, error) {
	if len(fc.rest) == 0 {
		select {
		case d, ok := <-fc.data:
			if !ok {
				if fc.readErr != nil {
					return 0, fc.readErr
				}
				return 0, io.EOF
			}
			fc.rest = d
		case <-fc.closed:
			return 0, net.ErrClosed
		}
	}
	n := copy(b, fc.rest)
	fc.rest = fc.rest[n:]
	fc.touch()
	return n, nil
}

func (fc *forwardConn) Write(b []byte) (int, error) {
	fc.sendMu.Lock()
	defer fc.sendMu.Unlock()
	written := 0
	for len(b) > 0 {
		if fc.dead || fc.isClosed() {
			return written, net.ErrClosed
		}
		n := min(len(b), forwardChunk)
		if err := fc.stream.Send(&sandboxv1.ForwardResponse{Payload: &sandboxv1.ForwardResponse_Data{Data: b[:n]}}); err != nil {
			fc.failLocked()
			return written, err
		}
		written += n
		b = b[n:]
		fc.touch()
	}
	return written, nil
}

// CloseWrite tells the port inside that the client sends no more.
func (fc *forwardConn) CloseWrite() error {
	fc.sendMu.Lock()
	defer fc.sendMu.Unlock()
	if fc.dead || fc.isClosed() {
		return net.ErrClosed
	}
	return fc.stream.Send(&sandboxv1.ForwardResponse{Payload: &sandboxv1.ForwardResponse_CloseWrite{CloseWrite: true}})
}

func (fc *forwardConn) isClosed() bool {
	select {
	case <-fc.closed:
		return true
	default:
		return false
	}
}

// failLocked ends the connection from inside Write (sendMu held).
func (fc *forwardConn) failLocked() { fc.fail(io.ErrUnexpectedEOF) }

func (fc *forwardConn) fail(error) {
	fc.once.Do(func() {
		// The slot first: once the end is seen (the agent's stream
		// ends), a new connection may take it.
		fc.slot.end()
		close(fc.closed)
		fc.idleT.Stop()
		fc.deadMu.Lock()
		if fc.deadline != nil {
			fc.deadline.Stop()
		}
		fc.deadMu.Unlock()
	})
}

// Close ends the connection; the agent then closes its side inside.
func (fc *forwardConn) Close() error {
	fc.fail(net.ErrClosed)
	return nil
}

func (fc *forwardConn) LocalAddr() net.Addr  { return forwardAddr{} }
func (fc *forwardConn) RemoteAddr() net.Addr { return forwardAddr{} }

func (fc *forwardConn) SetDeadline(t time.Time) error {
	fc.deadMu.Lock()
	defer fc.deadMu.Unlock()
	if fc.deadline != nil {
		fc.deadline.Stop()
		fc.deadline = nil
	}
	if !t.IsZero() {
		fc.deadline = time.AfterFunc(time.Until(t), func() { fc.fail(os.ErrDeadlineExceeded) })
	}
	return nil
}

func (fc *forwardConn) SetReadDeadline(t time.Time) error  { return fc.SetDeadline(t) }
func (fc *forwardConn) SetWriteDeadline(t time.Time) error { return fc.SetDeadline(t) }

type forwardAddr struct{}

func (forwardAddr) Network() string { return "agent-link" }
func (forwardAddr) String() string  { return "agent-link" }

// forwardSlot is a connection's place in its environment's bound, given
// back once when the connection ends, whichever comes first: the end, or
// learning what to give back.
type forwardSlot struct {
	mu      sync.Mutex
	release func()
	ended   bool
}

// set names what to give back (at once if the connection ended already).
func (s *forwardSlot) set(release func()) {
	s.mu.Lock()
	s.release = release
	ended := s.ended
	s.mu.Unlock()
	if ended {
		release()
	}
}

// end gives the slot back, if it is known yet.
func (s *forwardSlot) end() {
	s.mu.Lock()
	release := s.release
	s.ended = true
	s.mu.Unlock()
	if release != nil {
		release()
	}
}
