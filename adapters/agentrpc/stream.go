package agentrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// maxStreamsPerAgent bounds one agent's concurrent streams (a new one
// replaces the old, so more than a couple is never legitimate).
const maxStreamsPerAgent = 4

// conn is one live Connect stream of an agent.
type conn struct {
	agentID string
	gen     uint64
	out     chan *sandboxv1.ConnectResponse
	closed  chan struct{}
	once    sync.Once
	// reason is what the agent is told when the server closes the stream.
	reason error
	// draining is closed when the server goes away: the agent is told to
	// close its side, and the stream is read up to that close.
	draining  chan struct{}
	drainOnce sync.Once
	// Until the connect report is handled, output of commands the server
	// does not know yet is held: an agent sends what it kept while the
	// server was away before its report, and the report is what lets a
	// restarted server adopt those commands. Receive loop only.
	reported    bool
	orphans     []*sandboxv1.OutputChunk
	orphanBytes int
	// stdinAcks: the agent acknowledges input, so it is paced (stdin.go).
	stdinAcks bool
	// fileDataPlane: the agent moves file bytes on the data plane
	// (dataplane.go).
	fileDataPlane bool
	// outputDataPlane: the agent may send command output on the data
	// plane (outputplane.go); its data streams wait for reportedCh (closed
	// once the connect report is handled) and are counted in dataStreams.
	outputDataPlane bool
	reportedCh      chan struct{}
	reportedOnce    sync.Once
	dataStreams     dataStreams
	// acks are the output acknowledgements due to the agent (OutputAck),
	// coalesced per command stream: each is noted once the output is
	// handled (stored), sendAcks sends them when due (ackcoalesce.go).
	ackMu    sync.Mutex
	acks     map[ackKey]uint64
	ackBytes int         // handled since the last acknowledgements
	ackArmed bool        // ackTimer will wake sendAcks
	ackTimer *time.Timer // made on first use
	ackWake  chan struct{}
	// listening is what the agent last reported listens in its
	// environment on this connection (Service.mu).
	listening ports.ListeningPorts
}

type ackKey struct {
	id     string
	stream sandboxv1.OutputStream
}

// ackOutput notes that the agent's output o is handled: stored where it is
// kept, or deliberately dropped (a command nobody has). Receive loop only.
func (c *conn) ackOutput(o *sandboxv1.OutputChunk) {
	c.noteAck(o.GetStreamId(), o.GetStream(), o.GetOffset()+uint64(len(o.GetData())), len(o.GetData()), o.GetEof())
}

// drainTimeout bounds how long a drained stream is read for the agent's
// close (an agent that does not know Drain keeps sending). A variable for
// tests, which push it past their waits so that only the agent's close can
// end a drained stream in time; each Service takes it when made.
var drainTimeout = 3 * time.Second

// maxOrphanBytes bounds the output held per connection before its report.
const maxOrphanBytes = 16 << 20

func (c *conn) close() { c.closeWith(nil) }

func (c *conn) closeWith(reason error) {
	c.once.Do(func() {
		c.reason = reason
		close(c.closed)
	})
}

func (c *conn) drain() { c.drainOnce.Do(func() { close(c.draining) }) }

// errShuttingDown is what agents hear once the server goes away.
var errShuttingDown = connect.NewError(connect.CodeUnavailable, errors.New(shuttingDown))

const shuttingDown = "management server shutting down"

// CloseStreams drains every agent stream and refuses new ones; used at
// shutdown. Each agent is told to close its side, and its stream is read up
// to that close (drainTimeout at most), so output it sent into the stream
// is handled, not lost with it; the stream then ends with Unavailable and
// the agent reconnects to the next server. The http.Server's Shutdown
// waits for those handlers.
func (s *Service) CloseStreams() {
	s.mu.Lock()
	s.closing = true
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.drain()
	}
}

// send queues msg for the agent; it fails once the stream is gone.
func (c *conn) send(ctx context.Context, msg *sandboxv1.ConnectResponse) error {
	// select picks at random among ready cases: check closed first so a
	// message is never queued on a stream that will not send it.
	select {
	case <-c.closed:
		return ports.ErrAgentNotConnected
	default:
	}
	select {
	case c.out <- msg:
		return nil
	case <-c.closed:
		return ports.ErrAgentNotConnected
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Connect serves one agent's stream.
func (s *Service) Connect(ctx context.Context, stream *connect.BidiStream[sandboxv1.ConnectRequest, sandboxv1.ConnectResponse]) error {
	id := stream.RequestHeader().Get(HeaderAgentID)
	secret := stream.RequestHeader().Get(HeaderAgentSecret)
	if err := s.auth.authenticate(id, secret); err != nil {
		return err
	}
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return errShuttingDown
	}
	if !s.streams.take(id, maxStreamsPerAgent) {
		s.log.WarnContext(ctx, "refused: too many streams of one agent", "agent_id", id, "limit", maxStreamsPerAgent)
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("agent %q has %d streams open already", id, maxStreamsPerAgent))
	}
	defer s.streams.release(id)
	first, err := stream.Receive()
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("expected a registration: %w", err))
	}
	reg := first.GetRegistration()
	if reg == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the first message must be a registration"))
	}
	if reg.GetAgentId() != id {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("registration agent_id %q does not match header %s", reg.GetAgentId(), HeaderAgentID))
	}
	if err := s.auth.checkKind(id, reg.GetRuntime()); err != nil {
		return err
	}

	c := &conn{agentID: id, out: make(chan *sandboxv1.ConnectResponse, 256), closed: make(chan struct{}), draining: make(chan struct{}),
		stdinAcks: reg.GetStdinAcks(), fileDataPlane: reg.GetFileDataPlane(), ackWake: make(chan struct{}, 1),
		outputDataPlane: reg.GetOutputDataPlane(), reportedCh: make(chan struct{})}
	s.mu.Lock()
	if s.closing { // CloseStreams ran while this stream registered
		s.mu.Unlock()
		return errShuttingDown
	}
	gen, replaced := s.registry.Connect(id, infoFromRegistration(reg), s.cfg.HeartbeatInterval, s.cfg.Clock.Now())
	c.gen = gen
	old := s.conns[id]
	s.conns[id] = c
	s.mu.Unlock()
	if replaced && old != nil {
		old.close()
		s.log.InfoContext(ctx, "agent connection replaced by a new one", "agent_id", id)
	}
	s.cfg.Changes.Changed(ports.ChangeAgents)
	s.log.InfoContext(ctx, "agent connected", "agent_id", id, "hostname", reg.GetHostname(), "runtime", reg.GetRuntime().String())

	ack := &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_RegistrationAck{RegistrationAck: &sandboxv1.RegistrationAck{
		Accepted:                 true,
		Message:                  "welcome " + id,
		HeartbeatIntervalSeconds: uint32(s.cfg.HeartbeatInterval / time.Second), //nolint:gosec // a configured interval of seconds
		Config:                   map[string]string{ConfigConnectionID: strconv.FormatUint(gen, 10)},
		OutputAcks:               true,
		OutputDataPlane:          c.outputDataPlane,
		SessionRaw:               c.outputDataPlane && reg.GetSessionRaw(), // sessionraw.go
	}}}
	if err := stream.Send(ack); err != nil {
		s.disconnect(c)
		return err
	}

	recvDone := make(chan error, 1)
	go func() { recvDone <- s.receiveLoop(c, stream) }()
	go s.resendStdin(ctx, c)
	acksDone := make(chan struct{})
	go s.sendAcks(ctx, c, acksDone)

	var result error
	var held []*sandboxv1.ConnectResponse // taken from c.out, not sent
loop:
	for {
		select {
		case msg := <-c.out:
			if err := stream.Send(msg); err != nil {
				result = err
				break loop
			}
		case err := <-recvDone:
			recvDone = nil
			if err != nil && !errors.Is(err, context.Canceled) {
				result = err
			}
			break loop
		case <-c.closed:
			result = c.reason
			if result == nil {
				result = connect.NewError(connect.CodeAborted, errors.New("replaced by a newer connection of the same agent"))
			}
			break loop
		case <-c.draining:
			result = errShuttingDown
			// Input already accepted goes out before the drain: a
			// restarted server does not know it.
			var err error
			if held, err = sendQueuedStdin(c, stream); err != nil {
				break loop
			}
			if err := stream.Send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Drain{Drain: &sandboxv1.Drain{Reason: shuttingDown}}}); err != nil {
				break loop
			}
			// Read on until the agent closed its side; what came before
			// that close is handled by the receive loop before it returns.
			drainEnd := time.Now().Add(s.drainTimeout)
			select {
			case err := <-recvDone:
				recvDone = nil
				if err != nil && !errors.Is(err, io.EOF) {
					s.log.InfoContext(ctx, "drained agent stream ended without its close", "agent_id", c.agentID, "err", err)
				}
			case <-time.After(s.drainTimeout):
				s.log.WarnContext(ctx, "agent did not close its drained stream in time; ending it", "agent_id", c.agentID)
			case <-c.closed:
			case <-ctx.Done():
			}
			// The agent ended its output data streams before its side of
			// this one: what they carried is handled, and acknowledged below.
			c.dataStreams.wait(time.Until(drainEnd))
			// The agent reads until the stream ends: it lets go of what
			// this server has, and sends only the rest to the next one.
			held = drainAcks(c, stream, acksDone, held)
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	s.disconnect(c)
	s.failUnsent(c, held...)
	return result
}

// failUnsent ends the commands whose request was still queued when the
// stream ended: the agent never got them.
func (s *Service) failUnsent(c *conn, held ...*sandboxv1.ConnectResponse) {
	fail := func(msg *sandboxv1.ConnectResponse) {
		if req := msg.GetCommand(); req != nil {
			if cmd := s.commandOf(c.agentID, req.GetCommandId()); cmd != nil {
				s.finish(cmd, ports.CommandResult{ExitCode: -1, Error: "not delivered to the agent: " + ports.ErrAgentNotConnected.Error()})
			}
		}
	}
	for _, msg := range held {
		fail(msg)
	}
	for {
		select {
		case msg := <-c.out:
			fail(msg)
		default:
			return
		}
	}
}

// disconnect marks c gone. Its commands run on (agent.FateOnDisconnect):
// the agent keeps them and their output while it is away, and its connect
// report settles them when it is back (reconcileCommands); an agent that
// never comes back takes them with it at the end of the disconnect grace
// (sweep).
func (s *Service) disconnect(c *conn) {
	c.close()
	s.mu.Lock()
	current := s.registry.Disconnect(c.agentID, c.gen, s.cfg.Clock.Now())
	if s.conns[c.agentID] == c {
		delete(s.conns, c.agentID)
	}
	hadPorts := !c.listening.UpdatedAt.IsZero()
	s.mu.Unlock()
	if current {
		s.log.Info("agent disconnected", "agent_id", c.agentID)
		kinds := ports.ChangeAgents
		if hadPorts { // its list is unknown now
			kinds |= ports.ChangePorts
		}
		s.cfg.Changes.Changed(kinds)
	}
}

func (s *Service) receiveLoop(c *conn, stream *connect.BidiStream[sandboxv1.ConnectRequest, sandboxv1.ConnectResponse]) error {
	for {
		msg, err := stream.Receive()
		if err != nil {
			return err
		}
		if err := s.handle(c, msg); err != nil {
			return err
		}
	}
}

// handle takes one message of the agent; an error (bad input) ends the
// stream with its code.
func (s *Service) handle(c *conn, msg *sandboxv1.ConnectRequest) error {
	now := s.cfg.Clock.Now()
	switch p := msg.GetPayload().(type) {
	case *sandboxv1.ConnectRequest_Heartbeat:
		s.mu.Lock()
		_, changed := s.registry.Heartbeat(c.agentID, c.gen, reportedStatus(p.Heartbeat.GetStatus()), now)
		if m := p.Heartbeat.GetMetrics(); m != nil {
			s.registry.SetMetrics(c.agentID, c.gen, agentwire.Metrics(m))
		}
		s.mu.Unlock()
		// Ten thousand agents beat two thousand times a second: watchers of
		// the list hear of a status change, of the rest as metrics.
		if changed {
			s.cfg.Changes.Changed(ports.ChangeAgents)
		} else {
			s.cfg.Changes.Changed(ports.ChangeAgentMetrics)
		}
	case *sandboxv1.ConnectRequest_Metrics:
		s.mu.Lock()
		s.registry.SetMetrics(c.agentID, c.gen, agentwire.Metrics(p.Metrics))
		s.mu.Unlock()
		s.cfg.Changes.Changed(ports.ChangeAgentMetrics)
	case *sandboxv1.ConnectRequest_Output:
		// Acknowledged once handled (stored, for a session): the agent
		// keeps it until then and sends it again on its next connection.
		// Output held for the report is acknowledged when delivered; held
		// output over the bound is not, so the agent sends it again.
		switch cmd := s.commandOf(c.agentID, p.Output.GetStreamId()); {
		case cmd != nil:
			cmd.deliver(p.Output)
			c.ackOutput(p.Output)
		case c.reported:
			c.ackOutput(p.Output) // a command nobody has: nothing to keep
		case c.orphanBytes+len(p.Output.GetData()) <= maxOrphanBytes:
			c.orphans = append(c.orphans, p.Output)
			c.orphanBytes += len(p.Output.GetData())
		}
	case *sandboxv1.ConnectRequest_CommandResult:
		if cmd := s.commandOf(c.agentID, p.CommandResult.GetCommandId()); cmd != nil {
			// Its output may still be on the way on the data plane.
			s.finishAfterOutput(cmd, p.CommandResult, nil)
		}
		c.flushAcks() // the command's end: the agent lets go of its output
	case *sandboxv1.ConnectRequest_CommandStarted:
		if cmd := s.commandOf(c.agentID, p.CommandStarted.GetCommandId()); cmd != nil {
			cmd.markStarted()
		}
	case *sandboxv1.ConnectRequest_SessionReport:
		s.reconcileCommands(c, p.SessionReport)
		if c.reported {
			c.markReported()
		}
	case *sandboxv1.ConnectRequest_PermissionRequest:
		s.permissionAsked(c.agentID, p.PermissionRequest)
	case *sandboxv1.ConnectRequest_StdinAck:
		if cmd := s.commandOf(c.agentID, p.StdinAck.GetCommandId()); cmd != nil {
			cmd.stdinAcked(p.StdinAck)
		}
	case *sandboxv1.ConnectRequest_PortsReport:
		return s.portsReported(c, p.PortsReport, now)
	case *sandboxv1.ConnectRequest_SpanReport:
		s.spansReported(c, p.SpanReport)
	case *sandboxv1.ConnectRequest_Pong, *sandboxv1.ConnectRequest_SessionAck:
	case *sandboxv1.ConnectRequest_Registration:
		s.log.Warn("agent sent a second registration; ignored", "agent_id", c.agentID)
	default:
		s.log.Warn("agent sent an unknown message; ignored", "agent_id", c.agentID)
	}
	return nil
}
