// Package agentrpc is the server side of the agent link: the Connect
// AgentService every agent streams to, the registry of connected agents, and
// the dispatcher that routes commands out and their output back.
package agentrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/agentic-sandbox/agentic-sandbox/core/agent"
	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1/sandboxv1connect"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Header names of the agent's credentials.
const (
	HeaderAgentID     = "x-agent-id"
	HeaderAgentSecret = "x-agent-secret"
)

// ConfigConnectionID is the registration-ack config key naming the
// connection; the agent's connect report echoes it as "connect:<id>".
const ConfigConnectionID = "connection_id"

// MaxMessageBytes bounds one message on the agent stream.
const MaxMessageBytes = 8 << 20

// compressMinBytes is the smallest message worth compressing for an agent.
const compressMinBytes = 4 << 10

// ValidAgentID reports whether id is usable as an agent id (and so as a file,
// container or domain name).
func ValidAgentID(id string) bool { return agentwire.ValidAgentID(id) }

// Config is what the service needs.
type Config struct {
	Credentials ports.AgentCredentials
	Clock       ports.Clock
	IDs         ports.IDGenerator
	Logger      *slog.Logger
	// HeartbeatInterval is told to agents in the registration ack.
	HeartbeatInterval time.Duration
	// DisconnectGrace is how long a disconnected agent stays listed.
	DisconnectGrace time.Duration
	// CommandRetention is how long a finished command can still be looked up.
	CommandRetention time.Duration
	// KillTimeout is how long a killed command may take to be reported
	// ended before the server ends it itself (default 1m): an agent that
	// never answers (or names a command it does not run) cannot keep it.
	KillTimeout time.Duration
	// OperatorToken authenticates the operator Exec RPC.
	OperatorToken string
	// MaxFileBytes is the largest file or archive moved to or from an
	// agent (default DefaultMaxFileBytes).
	MaxFileBytes int64
	// Changes hears when the agent list changes (connects, disconnects,
	// heartbeats with metrics, commands started and ended).
	Changes ports.ChangeNotifier
}

// Service implements sandboxv1connect.AgentServiceHandler, ports.AgentLink and
// ports.AgentDirectory.
type Service struct {
	sandboxv1connect.UnimplementedAgentServiceHandler

	cfg Config
	log *slog.Logger
	// held says an agent is a warm pool's idle member (SetHeld).
	held atomic.Pointer[func(agentID string) bool]

	mu sync.Mutex
	// egress configures tunnels (nil: none); tunnelCount counts the open
	// ones per agent.
	egress      *Egress
	tunnelCount map[string]int
	registry    *agent.Registry
	conns       map[string]*conn // the live connection of each agent
	commands    map[string]*command
	sessions    ports.SessionReconciler
	// streams counts each agent's open Connect streams, authenticated or
	// waiting for their registration: one stolen credential cannot open
	// streams without bound.
	streams map[string]int
	// closing is set by CloseStreams: no new stream is taken on.
	closing bool
	// failedLogins rate-limits the log lines of failed logins.
	failedLogins loginLog
	// transfers are the file transfers asked of agents, by transfer id;
	// transferCount counts each agent's.
	transfers     map[string]*transfer
	transferCount map[string]int
	// permissions hears commands' permission requests (nil: refused).
	permissions ports.PermissionAsker
}

// maxReportedSessions bounds the entries of one connect report taken on:
// well above what an agent may run (live sessions, REST commands,
// missions), far below what a rogue report can list.
const maxReportedSessions = 1024

// maxStreamsPerAgent bounds one agent's concurrent streams (a new one
// replaces the old, so more than a couple is never legitimate).
const maxStreamsPerAgent = 4

// loginLog keeps the log from flooding with failed logins: at most one
// line per agent id per loginLogEvery, saying how many were left out.
type loginLog struct {
	mu   sync.Mutex
	last map[string]time.Time
	left map[string]int
}

const loginLogEvery = 10 * time.Second

// allow reports whether a failure for id may be logged now, and how many
// were not since the last line.
func (l *loginLog) allow(id string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil || len(l.last) > 4096 { // random ids cannot grow it without bound
		l.last, l.left = map[string]time.Time{}, map[string]int{}
	}
	if t, ok := l.last[id]; ok && now.Sub(t) < loginLogEvery {
		l.left[id]++
		return false, 0
	}
	n := l.left[id]
	l.last[id], l.left[id] = now, 0
	return true, n
}

// SetSessionReconciler makes r hear every agent's session report (set once
// at wiring, before agents connect).
func (s *Service) SetSessionReconciler(r ports.SessionReconciler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions = r
}

// New returns a service; call Run to sweep expired agents and commands.
func New(cfg Config) *Service {
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 5 * time.Second
	}
	if cfg.DisconnectGrace <= 0 {
		cfg.DisconnectGrace = 5 * time.Minute
	}
	if cfg.CommandRetention <= 0 {
		cfg.CommandRetention = 10 * time.Minute
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
	}
	if cfg.KillTimeout <= 0 {
		cfg.KillTimeout = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Changes == nil {
		cfg.Changes = ports.NoChanges{}
	}
	return &Service{
		cfg:      cfg,
		log:      cfg.Logger,
		registry: agent.NewRegistry(),
		conns:    map[string]*conn{},
		commands: map[string]*command{},
		streams:  map[string]int{},

		transfers:     map[string]*transfer{},
		transferCount: map[string]int{},
		tunnelCount:   map[string]int{},
	}
}

// Mount registers the agent service, gRPC health and reflection on mux.
// With operator false (the agent socket every container mounts) the
// operator Exec RPC is not served; with it, Exec's bearer token is checked
// before a byte of its body is read.
func (s *Service) Mount(mux *http.ServeMux, operator bool) {
	// Small messages (commands, keystrokes, pings) go uncompressed: gzip's
	// per-message reset cost more than they would save (profiled on the
	// exec path: a tenth of the server's CPU, docs/benchmarks.md).
	path, h := sandboxv1connect.NewAgentServiceHandler(s, connect.WithReadMaxBytes(MaxMessageBytes), connect.WithCompressMinBytes(compressMinBytes))
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == sandboxv1connect.AgentServiceExecProcedure {
			if !operator {
				http.NotFound(w, r) // Connect and gRPC clients read 404 as unimplemented
				return
			}
			if !s.operatorAuthorized(r.Header.Get("Authorization")) {
				w.Header().Set("WWW-Authenticate", "Bearer")
				http.Error(w, "missing or wrong operator bearer token", http.StatusUnauthorized)
				return
			}
		}
		if r.URL.Path == sandboxv1connect.AgentServiceTransferProcedure || r.URL.Path == sandboxv1connect.AgentServiceTunnelProcedure {
			// File and tunnel bytes go uncompressed whatever the agent
			// accepts: gzip cost a core for 30 MiB/s, and archives, binaries
			// and TLS records do not shrink.
			r.Header.Del("Grpc-Accept-Encoding")
			r.Header.Del("Connect-Accept-Encoding")
		}
		h.ServeHTTP(w, r)
	}))
	mux.Handle(grpchealth.NewHandler(grpchealth.NewStaticChecker(sandboxv1connect.AgentServiceName)))
	reflector := grpcreflect.NewStaticReflector(sandboxv1connect.AgentServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
}

// Run sweeps forgotten agents and old commands until ctx ends.
func (s *Service) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sweep()
		}
	}
}

func (s *Service) sweep() {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	gone := s.registry.Sweep(now, s.cfg.DisconnectGrace)
	for id, c := range s.commands {
		if c.finishedAt(now, s.cfg.CommandRetention) {
			delete(s.commands, id)
		}
	}
	s.mu.Unlock()
	for _, id := range gone {
		s.log.Info("agent forgotten after disconnect grace", "agent_id", id)
	}
	if len(gone) > 0 {
		s.cfg.Changes.Changed(ports.ChangeAgents)
	}
}

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
}

// drainTimeout bounds how long a drained stream is read for the agent's
// close (an agent that does not know Drain keeps sending).
const drainTimeout = 3 * time.Second

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
	if err := s.authenticate(id, secret); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return errShuttingDown
	}
	if s.streams[id] >= maxStreamsPerAgent {
		s.mu.Unlock()
		s.log.Warn("refused: too many streams of one agent", "agent_id", id, "limit", maxStreamsPerAgent)
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("agent %q has %d streams open already", id, maxStreamsPerAgent))
	}
	s.streams[id]++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.streams[id]--; s.streams[id] <= 0 {
			delete(s.streams, id)
		}
		s.mu.Unlock()
	}()
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
	if err := s.checkKind(id, reg.GetRuntime()); err != nil {
		return err
	}

	c := &conn{agentID: id, out: make(chan *sandboxv1.ConnectResponse, 256), closed: make(chan struct{}), draining: make(chan struct{})}
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
		s.log.Info("agent connection replaced by a new one", "agent_id", id)
	}
	s.cfg.Changes.Changed(ports.ChangeAgents)
	s.log.Info("agent connected", "agent_id", id, "hostname", reg.GetHostname(), "runtime", reg.GetRuntime().String())

	ack := &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_RegistrationAck{RegistrationAck: &sandboxv1.RegistrationAck{
		Accepted:                 true,
		Message:                  "welcome " + id,
		HeartbeatIntervalSeconds: uint32(s.cfg.HeartbeatInterval / time.Second), //nolint:gosec // a configured interval of seconds
		Config:                   map[string]string{ConfigConnectionID: strconv.FormatUint(gen, 10)},
	}}}
	if err := stream.Send(ack); err != nil {
		s.disconnect(c)
		return err
	}

	recvDone := make(chan error, 1)
	go func() { recvDone <- s.receiveLoop(c, stream) }()

	var result error
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
			if err := stream.Send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Drain{Drain: &sandboxv1.Drain{Reason: shuttingDown}}}); err != nil {
				break loop
			}
			// Read on until the agent closed its side; what came before
			// that close is handled by the receive loop before it returns.
			select {
			case err := <-recvDone:
				recvDone = nil
				if err != nil && !errors.Is(err, io.EOF) {
					s.log.Info("drained agent stream ended without its close", "agent_id", c.agentID, "err", err)
				}
			case <-time.After(drainTimeout):
				s.log.Warn("agent did not close its drained stream in time; ending it", "agent_id", c.agentID)
			case <-c.closed:
			case <-ctx.Done():
			}
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	s.disconnect(c)
	s.failUnsent(c)
	return result
}

// failUnsent ends the commands whose request was still queued when the
// stream ended: the agent never got them.
func (s *Service) failUnsent(c *conn) {
	for {
		select {
		case msg := <-c.out:
			if req := msg.GetCommand(); req != nil {
				if cmd := s.commandOf(c.agentID, req.GetCommandId()); cmd != nil {
					s.finish(cmd, ports.CommandResult{ExitCode: -1, Error: "not delivered to the agent: " + ports.ErrAgentNotConnected.Error()})
				}
			}
		default:
			return
		}
	}
}

func (s *Service) authenticate(id, secret string) error {
	unauth := connect.NewError(connect.CodeUnauthenticated, errors.New("unknown agent or wrong secret"))
	if !ValidAgentID(id) || secret == "" {
		return unauth
	}
	ok, err := s.cfg.Credentials.Verify(id, secret)
	if err != nil {
		s.log.Error("agent credential store unreadable", "agent_id", id, "err", err)
		return connect.NewError(connect.CodeUnavailable, errors.New("credential store unavailable"))
	}
	if !ok {
		if log, left := s.failedLogins.allow(id, s.cfg.Clock.Now()); log {
			s.log.Warn("agent authentication failed", "agent_id", id, "not_logged_since_last", left)
		}
		return unauth
	}
	return nil
}

// checkKind holds an agent to the runtime kind recorded with its credential:
// the isolation tier missions are routed by is never the agent's say.
func (s *Service) checkKind(id string, declared sandboxv1.RuntimeKind) error {
	kind := agentwire.RuntimeKindFromProto(declared)
	if !kind.Valid() {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("registration runtime %v: want host, container or vm", declared))
	}
	recorded, err := s.cfg.Credentials.PinKind(id, kind)
	if err != nil {
		s.log.Error("agent credential store unwritable", "agent_id", id, "err", err)
		return connect.NewError(connect.CodeUnavailable, errors.New("credential store unavailable"))
	}
	if recorded != kind {
		s.log.Warn("refused: an agent declared another runtime kind than its credential's", "agent_id", id, "declared", kind, "recorded", recorded)
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("agent %q is a %s agent; it cannot register as %s", id, recorded, kind))
	}
	return nil
}

// disconnect marks c gone and fails the commands that cannot outlive it.
func (s *Service) disconnect(c *conn) {
	c.close()
	s.mu.Lock()
	current := s.registry.Disconnect(c.agentID, c.gen, s.cfg.Clock.Now())
	if s.conns[c.agentID] == c {
		delete(s.conns, c.agentID)
	}
	var lost []*command
	if current {
		for _, cmd := range s.commands {
			if cmd.agentID == c.agentID && !cmd.detached && !cmd.isDone() {
				lost = append(lost, cmd)
			}
		}
	}
	s.mu.Unlock()
	for _, cmd := range lost {
		s.finish(cmd, ports.CommandResult{ExitCode: -1, Error: ports.ErrAgentGone.Error()})
	}
	if current {
		s.log.Info("agent disconnected", "agent_id", c.agentID)
		s.cfg.Changes.Changed(ports.ChangeAgents)
	}
}

func (s *Service) receiveLoop(c *conn, stream *connect.BidiStream[sandboxv1.ConnectRequest, sandboxv1.ConnectResponse]) error {
	for {
		msg, err := stream.Receive()
		if err != nil {
			return err
		}
		s.handle(c, msg)
	}
}

func (s *Service) handle(c *conn, msg *sandboxv1.ConnectRequest) {
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
		if cmd := s.commandOf(c.agentID, p.Output.GetStreamId()); cmd != nil {
			cmd.deliver(p.Output)
		} else if !c.reported && c.orphanBytes+len(p.Output.GetData()) <= maxOrphanBytes {
			c.orphans = append(c.orphans, p.Output)
			c.orphanBytes += len(p.Output.GetData())
		}
	case *sandboxv1.ConnectRequest_CommandResult:
		if cmd := s.commandOf(c.agentID, p.CommandResult.GetCommandId()); cmd != nil {
			s.finish(cmd, agentwire.Result(p.CommandResult))
		}
	case *sandboxv1.ConnectRequest_CommandStarted:
		if cmd := s.commandOf(c.agentID, p.CommandStarted.GetCommandId()); cmd != nil {
			cmd.markStarted()
		}
	case *sandboxv1.ConnectRequest_SessionReport:
		s.reconcileCommands(c, p.SessionReport)
	case *sandboxv1.ConnectRequest_PermissionRequest:
		s.permissionAsked(c.agentID, p.PermissionRequest)
	case *sandboxv1.ConnectRequest_Pong, *sandboxv1.ConnectRequest_SessionAck:
	case *sandboxv1.ConnectRequest_Registration:
		s.log.Warn("agent sent a second registration; ignored", "agent_id", c.agentID)
	default:
		s.log.Warn("agent sent an unknown message; ignored", "agent_id", c.agentID)
	}
}

// reconcileCommands settles the commands sent before this connection with
// the agent's connect report, which comes behind every message the agent
// still held: a command it still runs goes on; one it reports finished ends
// with its reported result, after the end of its output is filled in from the
// reported tail (result and output may have been written into a connection
// that died); one it does not know any more is lost.
func (s *Service) reconcileCommands(c *conn, rep *sandboxv1.SessionReport) {
	if rep.GetRequestId() != "connect:"+strconv.FormatUint(c.gen, 10) {
		return // a report made for an earlier connection, or an answer to a query
	}
	reported := map[string]*sandboxv1.SessionInfo{}
	var sessions []ports.ReportedSession
	infos := rep.GetSessions()
	if len(infos) > maxReportedSessions {
		// More than an agent can have (its sessions, commands and missions
		// are bounded): the rest is not taken on, nor killed one by one.
		s.log.Warn("refused: an agent reported more commands than it can run; the rest ignored", "agent_id", c.agentID, "reported", len(infos), "limit", maxReportedSessions)
		infos = infos[:maxReportedSessions]
	}
	for _, si := range infos {
		if owner := s.ownerOf(si.GetCommandId()); owner != "" && owner != c.agentID {
			s.log.Warn("refused: an agent reported another agent's command", "agent_id", c.agentID, "command_id", si.GetCommandId(), "owner", owner)
			continue
		}
		reported[si.GetCommandId()] = si
		if si.GetState() == sandboxv1.SessionState_SESSION_STATE_RUNNING && si.GetType() != sandboxv1.SessionType_SESSION_TYPE_UNSPECIFIED {
			rs := ports.ReportedSession{
				SessionID: si.GetSessionId(), AgentName: si.GetName(), Type: agentwire.SessionTypeFromProto(si.GetType()),
				CommandID: si.GetCommandId(),
			}
			if si.GetStartedAt() != nil {
				rs.StartedAt = si.GetStartedAt().AsTime()
			}
			sessions = append(sessions, rs)
		}
	}
	s.mu.Lock()
	reconciler, current := s.sessions, s.registry.IsCurrent(c.agentID, c.gen)
	s.mu.Unlock()
	if reconciler != nil && current {
		reconciler.ReconcileSessions(c.agentID, sessions)
	}
	// Output that came ahead of the report goes to the commands adopted now.
	c.reported = true
	for _, o := range c.orphans {
		if cmd := s.commandOf(c.agentID, o.GetStreamId()); cmd != nil {
			cmd.deliver(o)
		}
	}
	c.orphans, c.orphanBytes = nil, 0
	s.mu.Lock()
	var pending []*command
	if s.registry.IsCurrent(c.agentID, c.gen) {
		for _, cmd := range s.commands {
			if cmd.agentID == c.agentID && cmd.sentGen < c.gen && !cmd.isDone() {
				pending = append(pending, cmd)
			}
		}
	}
	s.mu.Unlock()
	for _, cmd := range pending {
		si := reported[cmd.id]
		switch {
		case si.GetState() == sandboxv1.SessionState_SESSION_STATE_RUNNING:
			// Still running: its output and result will come.
		case si.GetState() == sandboxv1.SessionState_SESSION_STATE_EXITED && si.GetResult() != nil:
			if tail := si.GetOutputTail(); len(tail) > 0 && uint64(len(tail)) <= si.GetOutputOffset() {
				cmd.deliver(&sandboxv1.OutputChunk{StreamId: cmd.id, Stream: si.GetTailStream(), Data: tail, Offset: si.GetOutputOffset() - uint64(len(tail))})
			}
			s.finish(cmd, agentwire.Result(si.GetResult()))
		default:
			s.log.Warn("agent no longer runs a command; marking it lost", "agent_id", c.agentID, "command_id", cmd.id)
			s.finish(cmd, ports.CommandResult{ExitCode: -1, Error: ports.ErrCommandLost.Error()})
		}
	}
}

// ownerOf is the agent a known command runs on, "" for an unknown id.
func (s *Service) ownerOf(commandID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cmd := s.commands[commandID]; cmd != nil {
		return cmd.agentID
	}
	return ""
}

// commandOf finds a command of agentID; an agent cannot touch another's commands.
func (s *Service) commandOf(agentID, commandID string) *command {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := s.commands[commandID]
	if cmd == nil || cmd.agentID != agentID {
		return nil
	}
	return cmd
}

func (s *Service) finish(cmd *command, r ports.CommandResult) {
	cmd.complete(r, s.cfg.Clock.Now(), func() {
		s.mu.Lock()
		s.registry.CommandEnded(cmd.agentID)
		s.mu.Unlock()
		s.cfg.Changes.Changed(ports.ChangeAgents)
	})
}

// RetireAgent implements ports.AgentRetirer: the agent leaves the registry
// at once (not after the disconnect grace), its stream is closed and every
// command it ran, detached ones too, ends with reason.
func (s *Service) RetireAgent(_ context.Context, agentID, reason string) {
	s.mu.Lock()
	c := s.conns[agentID]
	delete(s.conns, agentID)
	known := s.registry.Forget(agentID)
	var ending []*command
	for _, cmd := range s.commands {
		if cmd.agentID == agentID && !cmd.isDone() {
			ending = append(ending, cmd)
		}
	}
	s.mu.Unlock()
	if c != nil {
		c.closeWith(connect.NewError(connect.CodePermissionDenied, errors.New("agent retired: "+reason)))
	}
	for _, cmd := range ending {
		s.finish(cmd, ports.CommandResult{ExitCode: -1, Error: reason})
	}
	if known {
		s.log.Info("agent retired", "agent_id", agentID, "reason", reason, "commands_ended", len(ending))
		s.cfg.Changes.Changed(ports.ChangeAgents)
	}
}

// RenameAgent implements ports.AgentRenamer: the agent is told its new
// identity over its own stream; it ends the stream and registers again as
// newID (whose credential the caller stored first).
func (s *Service) RenameAgent(ctx context.Context, agentID, newID, newSecret string) error {
	if !ValidAgentID(newID) || newSecret == "" {
		return fmt.Errorf("%w: a rename needs a valid id and a secret", ports.ErrInvalidSpec)
	}
	c, err := s.liveConn(agentID)
	if err != nil {
		return err
	}
	s.log.Info("agent renamed", "agent_id", agentID, "new_id", newID)
	return c.send(ctx, &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Rename{
		Rename: &sandboxv1.Rename{AgentId: newID, Secret: newSecret}}})
}

// SetHeld names the agents held for someone (a warm pool's idle members):
// no command but housekeeping, and no file work, reaches them. Set once at
// start, by the environment service made after this one.
func (s *Service) SetHeld(f func(agentID string) bool) { s.held.Store(&f) }

func (s *Service) isHeld(agentID string) bool {
	f := s.held.Load()
	return f != nil && (*f)(agentID)
}

// liveConn returns the live connection of agentID or the port error saying why not.
func (s *Service) liveConn(agentID string) (*conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.registry.Get(agentID); !ok {
		return nil, ports.ErrAgentNotFound
	}
	c := s.conns[agentID]
	if c == nil {
		return nil, ports.ErrAgentNotConnected
	}
	return c, nil
}

// Agents lists every agent in the registry.
func (s *Service) Agents() []ports.AgentInfo {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	records := s.registry.All()
	out := make([]ports.AgentInfo, 0, len(records))
	for _, r := range records {
		out = append(out, agentInfo(r, now))
	}
	return out
}

// Agent returns one agent.
func (s *Service) Agent(id string) (ports.AgentInfo, bool) {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.registry.Get(id)
	if !ok {
		return ports.AgentInfo{}, false
	}
	return agentInfo(r, now), true
}

func agentInfo(r agent.Record, now time.Time) ports.AgentInfo {
	return ports.AgentInfo{
		ID:              r.ID,
		Status:          agent.StatusAt(r, now),
		Runtime:         r.Info.Runtime,
		Hostname:        r.Info.Hostname,
		IPAddress:       r.Info.IPAddress,
		AgentVersion:    r.Info.AgentVersion,
		Labels:          r.Info.Labels,
		Capabilities:    r.Info.Capabilities,
		System:          r.Info.System,
		Metrics:         r.Metrics,
		ConnectedAt:     r.ConnectedAt,
		LastHeartbeat:   r.LastHeartbeat,
		DisconnectedAt:  r.DisconnectedAt,
		RunningCommands: r.RunningCommands,
	}
}
