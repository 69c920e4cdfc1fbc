package agentrpc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
	"github.com/agentic-sandbox/agentic-sandbox/internal/telemetry/spanwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// command is the server's handle on a command running on an agent.
type command struct {
	svc      *Service
	id       string
	agentID  string
	detached bool
	pty      bool
	onOutput func(ports.OutputChunk)
	// kept: the command is a kept session's (an interactive or background
	// session: its agent's KeptSessions counts it); guarded by svc.mu.
	kept bool
	// sentGen is the connection generation the command was sent on (0 for
	// attached commands); a report from a later connection that lacks it
	// means the agent lost it.
	sentGen   uint64
	started   sync.Once
	onStarted func()

	// deliverMu serialises output delivery and guards next offsets, the
	// handlers (a claim sets them) and startedSeen. A stream's next offset
	// is known when it is in next or fromZero is set (a command this
	// server started): output past a known one is a gap (Lost).
	deliverMu   sync.Mutex
	next        map[ports.OutputStream]uint64
	fromZero    bool
	startedSeen bool
	// progress is closed at the next delivery (a result waiting for its
	// output, outputplane.go); made by whoever waits.
	progress chan struct{}

	// stdin paces the command's input (stdin.go).
	stdin stdinPipe

	mu       sync.Mutex
	done     chan struct{}
	result   ports.CommandResult
	ended    bool
	endedAt  time.Time
	stopCtxW func() bool
	// abandoned: its caller went away (an attached command's context
	// ended, or nobody claimed a held one); killed when its agent is back
	// if the kill could not reach it at once.
	abandoned bool
	// heldAt is when a report made the server hold the command, unknown
	// and unclaimed (zero when it is not held): Attach claims it, and the
	// sweep kills it once the claim grace is over.
	heldAt time.Time

	// trace is the link's span of a traced command (nil otherwise).
	trace *linkSpan
}

var _ ports.Command = (*command)(nil)

func (c *command) ID() string            { return c.id }
func (c *command) AgentID() string       { return c.agentID }
func (c *command) Done() <-chan struct{} { return c.done }
func (c *command) Result() ports.CommandResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.result
}

func (c *command) isDone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended
}

func (c *command) finishedAt(now time.Time, retention time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended && now.Sub(c.endedAt) >= retention
}

// complete records the result once; later results (a resend after a
// reconnect) are ignored. beforeDone (may be nil) runs after the result is
// claimed and before waiters wake, so a waiter sees the bookkeeping done.
func (c *command) complete(r ports.CommandResult, now time.Time, beforeDone func()) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended = true
	c.endedAt = now
	c.result = r
	stop := c.stopCtxW
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	c.forgetStdin()
	c.trace.done(r)
	if beforeDone != nil {
		beforeDone()
	}
	hoptrace.Mark("mgmt.cmd_done")
	close(c.done)
}

// claim binds a command held since a report (unknown then, unclaimed) to
// the caller that knows it now; a command not held is left as it is.
func (c *command) claim(opts ports.StartOptions) {
	c.mu.Lock()
	held := !c.heldAt.IsZero()
	c.heldAt = time.Time{}
	c.mu.Unlock()
	if !held {
		return
	}
	c.deliverMu.Lock()
	c.onOutput, c.onStarted = opts.OnOutput, opts.OnStarted
	started := c.startedSeen
	c.deliverMu.Unlock()
	if started && opts.OnStarted != nil {
		opts.OnStarted()
	}
}

// markStarted fires OnStarted once.
func (c *command) markStarted() {
	c.started.Do(func() {
		if c.detached {
			// A session or a mission may run for days: its trace shows
			// it sent and started, the agent's spans its end.
			c.trace.end(ports.CommandResult{})
		}
		c.deliverMu.Lock()
		f := c.onStarted
		c.startedSeen = true
		c.deliverMu.Unlock()
		if f != nil {
			f()
		}
	})
}

// deliver hands a chunk to the caller, dropping bytes it already received
// (an agent resends what it was not sure got through).
func (c *command) deliver(o *sandboxv1.OutputChunk) {
	data := o.GetData()
	if len(data) == 0 {
		return
	}
	stream := agentwire.StreamFromProto(o.GetStream())
	c.markStarted()
	c.deliverMu.Lock()
	defer c.deliverMu.Unlock()
	off := o.GetOffset()
	next, known := c.next[stream]
	known = known || c.fromZero
	if off+uint64(len(data)) <= next {
		return
	}
	if off < next {
		data = data[next-off:]
		off = next
	}
	var lost uint64
	if known && off > next {
		lost = off - next
		c.svc.log.Warn("output of a command never arrived; marked as a gap", "agent_id", c.agentID, "command_id", c.id,
			"stream", int(stream), "from", next, "to", off)
	}
	c.next[stream] = off + uint64(len(data))
	if c.onOutput != nil {
		c.onOutput(ports.OutputChunk{Stream: stream, Data: data, Offset: off, Lost: lost})
	}
	if c.progress != nil {
		close(c.progress)
		c.progress = nil
	}
}

func (c *command) control(ctx context.Context, ctl *sandboxv1.PtyControl) error {
	if c.isDone() {
		return ports.ErrCommandEnded
	}
	conn, err := c.svc.liveConn(c.agentID)
	if err != nil {
		return err
	}
	ctl.CommandId = c.id
	return conn.send(ctx, &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_PtyControl{PtyControl: ctl}})
}

func (c *command) Resize(ctx context.Context, cols, rows uint16) error {
	return c.control(ctx, &sandboxv1.PtyControl{Action: &sandboxv1.PtyControl_Resize{Resize: &sandboxv1.PtyResize{Cols: uint32(cols), Rows: uint32(rows)}}})
}

func (c *command) Signal(ctx context.Context, signal int) error {
	return c.control(ctx, &sandboxv1.PtyControl{Action: &sandboxv1.PtyControl_Signal{Signal: &sandboxv1.PtySignal{Signal: int32(signal)}}}) //nolint:gosec // signal numbers are validated at the API (1-64)
}

func (c *command) Kill(ctx context.Context) error {
	err := c.control(ctx, &sandboxv1.PtyControl{Action: &sandboxv1.PtyControl_Kill{Kill: &sandboxv1.CommandKill{Reason: "killed by the server"}}})
	if err == nil {
		// The agent reports the end; if it never does, the server ends it.
		time.AfterFunc(c.svc.cfg.KillTimeout, func() {
			c.svc.finish(c, ports.CommandResult{ExitCode: -1, Error: "the agent did not report the end of a killed command"})
		})
	}
	return err
}

// Start sends a command to a connected agent.
func (s *Service) Start(ctx context.Context, agentID string, spec ports.CommandSpec, opts ports.StartOptions) (ports.Command, error) {
	if spec.Command == "" && spec.SessionType != ports.SessionInteractive {
		// Only a terminal has a default: the agent's shell.
		return nil, errors.New("empty command")
	}
	if !opts.Housekeeping && s.isHeld(agentID) {
		return nil, fmt.Errorf("%w: %s", ports.ErrAgentHeld, agentID)
	}
	conn, err := s.liveConn(agentID)
	if err != nil {
		return nil, err
	}
	spec = s.withInjected(agentID, spec)
	id := opts.CommandID
	if id == "" {
		id = s.cfg.IDs.NewID()
	}
	ls := s.startLinkSpan(ctx, agentID, id, opts.Detached)
	cmd := &command{
		trace:     ls,
		svc:       s,
		id:        id,
		agentID:   agentID,
		detached:  opts.Detached,
		pty:       spec.PTY,
		onOutput:  opts.OnOutput,
		onStarted: opts.OnStarted,
		sentGen:   conn.gen,
		next:      map[ports.OutputStream]uint64{},
		fromZero:  true,
		done:      make(chan struct{}),
	}
	s.mu.Lock()
	if _, dup := s.commands[cmd.id]; dup {
		s.mu.Unlock()
		ls.done(ports.CommandResult{ExitCode: -1, Error: "command id in use"})
		return nil, fmt.Errorf("command id %q already in use", cmd.id)
	}
	s.commands[cmd.id] = cmd
	s.registry.CommandStarted(agentID)
	if keptSession(spec.SessionType) {
		cmd.kept = true
		s.registry.SessionKept(agentID)
	}
	s.mu.Unlock()
	s.cfg.Changes.Changed(ports.ChangeAgents)

	req := agentwire.CommandRequest(cmd.id, spec)
	req.Traceparent = ls.traceparent()
	if err := conn.send(ctx, &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Command{Command: req}}); err != nil {
		s.finish(cmd, ports.CommandResult{ExitCode: -1, Error: "not sent to the agent: " + err.Error()})
		return nil, err
	}
	hoptrace.Mark("mgmt.cmd_queued")
	if !opts.Detached {
		// A caller that goes away takes its command with it; when its agent
		// is disconnected, the kill waits for the agent's return.
		stop := context.AfterFunc(ctx, func() {
			cmd.mu.Lock()
			cmd.abandoned = true
			cmd.mu.Unlock()
			switch err := cmd.Kill(context.Background()); {
			case err == nil, errors.Is(err, ports.ErrCommandEnded):
			case errors.Is(err, ports.ErrAgentNotConnected):
				s.log.Info("abandoned command to be killed once its agent is back", "agent_id", agentID, "command_id", cmd.id)
			default:
				s.log.Warn("could not kill abandoned command", "command_id", cmd.id, "err", err)
			}
		})
		cmd.mu.Lock()
		if cmd.ended {
			cmd.mu.Unlock()
			stop()
		} else {
			cmd.stopCtxW = stop
			cmd.mu.Unlock()
		}
	}
	return cmd, nil
}

// keptSession is a session type whose command lives on whether or not
// anyone works with it: a terminal or a background process.
func keptSession(t ports.SessionType) bool {
	return t == ports.SessionInteractive || t == ports.SessionBackground
}

// markKept counts agentID's running command id as a kept session's (one
// bound again by Attach, which names no type: the agent's report does).
func (s *Service) markKept(agentID, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cmd := s.commands[id]; cmd != nil && cmd.agentID == agentID && !cmd.kept && !cmd.isDone() {
		cmd.kept = true
		s.registry.SessionKept(agentID)
	}
}

// Attach binds to a detached command that an earlier run of the server started.
func (s *Service) Attach(agentID, commandID string, opts ports.StartOptions) ports.Command {
	s.mu.Lock()
	if cmd, ok := s.commands[commandID]; ok && cmd.agentID == agentID {
		s.mu.Unlock()
		// Outside s.mu: a claim waits for a delivery in progress, whose
		// handler may call into the link.
		cmd.claim(opts)
		return cmd
	}
	defer s.mu.Unlock()
	if cmd, ok := s.commands[commandID]; ok {
		// Another agent's command: whoever names it gets a command that has
		// already ended, never a handle on that agent's process.
		s.log.Warn("refused: an agent named another agent's command", "agent_id", agentID, "command_id", commandID, "owner", cmd.agentID)
		foreign := &command{svc: s, id: commandID, agentID: agentID, detached: true, next: map[ports.OutputStream]uint64{}, done: make(chan struct{})}
		foreign.complete(ports.CommandResult{ExitCode: -1, Error: ports.ErrCommandLost.Error()}, s.cfg.Clock.Now(), nil)
		return foreign
	}
	cmd := &command{
		svc:       s,
		id:        commandID,
		agentID:   agentID,
		detached:  true,
		onOutput:  opts.OnOutput,
		onStarted: opts.OnStarted,
		next:      maps.Clone(opts.Resume),
		done:      make(chan struct{}),
	}
	if cmd.next == nil {
		cmd.next = map[ports.OutputStream]uint64{}
	}
	s.commands[commandID] = cmd
	s.registry.CommandStarted(agentID)
	s.cfg.Changes.Changed(ports.ChangeAgents) // never blocks: safe under s.mu
	return cmd
}

// Lookup finds a command that has not been forgotten yet.
func (s *Service) Lookup(commandID string) (ports.Command, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd, ok := s.commands[commandID]
	if !ok {
		return nil, false
	}
	return cmd, true
}

// linkSpan is the link's span of a traced command or transfer: from the
// request sent to the agent to its result (a detached command's: to its
// start). The agent's spans come back as its children in a SpanReport,
// taken while the relay expects the trace.
type linkSpan struct {
	span       trace.Span
	parent     string
	expectDone func()
	once       sync.Once
}

// startLinkSpan starts the span of work sent to agentID; nil when tracing
// is off or the work is not sampled.
func (s *Service) startLinkSpan(ctx context.Context, agentID, id string, detached bool) *linkSpan {
	tr := s.cfg.Tracing.Tracer()
	if tr == nil {
		return nil
	}
	_, span := tr.Start(ctx, "agentrpc.Command", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("agentic.agent_id", agentID), attribute.String("agentic.command_id", id), attribute.Bool("agentic.detached", detached)))
	return s.linkSpan(agentID, span)
}

func (s *Service) linkSpan(agentID string, span trace.Span) *linkSpan {
	tp := spanwire.Traceparent(span.SpanContext())
	if !span.IsRecording() || tp == "" {
		span.End()
		return nil
	}
	return &linkSpan{span: span, parent: tp, expectDone: s.cfg.Tracing.Relay().Expect(agentID, span.SpanContext().TraceID())}
}

func (l *linkSpan) traceparent() string {
	if l == nil {
		return ""
	}
	return l.parent
}

// end ends the span once, with the command's result; the relay still takes
// the agent's spans for ReportGrace.
func (l *linkSpan) end(r ports.CommandResult) {
	if l == nil {
		return
	}
	l.once.Do(func() {
		if r.Error != "" {
			l.span.SetStatus(codes.Error, r.Error)
		}
		if r.ExitCode != 0 || r.Signal != 0 {
			l.span.SetAttributes(attribute.Int("agentic.exit_code", r.ExitCode), attribute.Int("agentic.signal", r.Signal))
		}
		l.span.End()
	})
}

// done ends the span and the relay's expectation (the command or transfer
// is over).
func (l *linkSpan) done(r ports.CommandResult) {
	if l == nil {
		return
	}
	l.end(r)
	l.expectDone()
}
