// Package agentrpc is the server side of the agent link: the Connect
// AgentService every agent streams to, the registry of connected agents, and
// the dispatcher that routes commands out and their output back.
//
// The files follow its concerns: the stream and its drain (stream.go),
// authentication and the failed-login limiter (auth.go), the directory of
// agents: registry queries, retire, rename, held (directory.go), commands
// and their reconciliation after a reconnect (commands.go, reconcile.go),
// those of an agent gone with its environment (agentdown.go),
// files (files.go), egress tunnels (tunnel.go), permission questions
// (permissions.go) and the operator's Exec (exec.go).
package agentrpc

import (
	"context"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/agentic-sandbox/agentic-sandbox/core/agent"
	"github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1/sandboxv1connect"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/telemetry"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Header names of the agent's credentials.
const (
	HeaderAgentID     = agentwire.HeaderAgentID
	HeaderAgentSecret = agentwire.HeaderAgentSecret
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
	// MaxFinishedCommands bounds the finished commands kept for Lookup
	// within CommandRetention (default 10000, about 650 bytes each): past
	// it the oldest-ended go first, checked every second, so that many
	// short commands (1,000 execs a second) cannot grow the server for
	// the whole retention.
	MaxFinishedCommands int
	// KillTimeout is how long a killed command may take to be reported
	// ended before the server ends it itself (default 1m): an agent that
	// never answers (or names a command it does not run) cannot keep it.
	KillTimeout time.Duration
	// ClaimGrace is how long a command an agent reports that this server
	// does not know, and nobody adopts, is held for a claim (Attach: a
	// task binding to its run again after a restart) before the server
	// kills it (default 2m).
	ClaimGrace time.Duration
	// OperatorToken authenticates the operator Exec RPC.
	OperatorToken string
	// MaxFileBytes is the largest file or archive moved to or from an
	// agent (default DefaultMaxFileBytes).
	MaxFileBytes int64
	// Changes hears when the agent list changes (connects, disconnects,
	// heartbeats with metrics, commands started and ended).
	Changes ports.ChangeNotifier
	// Reports hears what agents report (their sessions on each connect,
	// their commands' permission questions) and names the agents held for
	// someone (nil: ports.NoLinkReports).
	Reports ports.LinkReports
	// Egress configures the tunnels; without a Policy this server gives
	// no egress.
	Egress Egress
	// Forwards configures the connections into environments (previews,
	// port-forward).
	Forwards Forwards
	// Tracing traces the commands and transfers sent to agents and takes
	// the agents' spans back (nil: off; agents get no traceparent).
	Tracing *telemetry.Tracing
}

// Service implements sandboxv1connect.AgentServiceHandler, ports.AgentLink and
// ports.AgentDirectory.
type Service struct {
	sandboxv1connect.UnimplementedAgentServiceHandler

	cfg  Config
	log  *slog.Logger
	auth authenticator
	// drainTimeout as it was when the service was made.
	drainTimeout time.Duration

	// mu guards what changes together: the agents known and their live
	// connections, whether new streams are taken on, and the commands
	// (the registry counts each agent's running ones, and a disconnect or
	// a retirement ends an agent's commands in the same step).
	mu       sync.Mutex
	registry *agent.Registry
	conns    map[string]*conn // the live connection of each agent
	commands map[string]*command
	// adopter takes the commands agents report that this server does not
	// know (nil: none are adopted; they are held, then killed).
	adopter ports.CommandAdopter
	// closing is set by CloseStreams: no new stream is taken on.
	closing bool

	// streams counts each agent's open Connect streams, authenticated or
	// waiting for their registration: one stolen credential cannot open
	// streams without bound.
	streams agentCounts
	// tunnels counts each agent's open tunnels.
	tunnels  agentCounts
	forwards forwardTable
	// serverPorts are refused to host agents' forwards (SetServerPorts).
	serverPorts atomic.Pointer[[]uint16]
	transfers   transfers
	// inject serves injected secrets' requests (SetInject).
	inject atomic.Pointer[InjectHandler]
	// commandEnv adds an environment's injected secrets to its commands
	// (SetCommandEnv).
	commandEnv atomic.Pointer[CommandEnv]
	// execLink starts the operator Exec RPC's commands (SetExecLink; nil:
	// this service itself).
	execLink atomic.Pointer[ports.AgentLink]
}

// New returns a service; call Run to sweep expired agents and commands.
func New(cfg Config) *Service {
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 5 * time.Second
	}
	if cfg.DisconnectGrace <= 0 {
		cfg.DisconnectGrace = 5 * time.Minute
	}
	if cfg.MaxFinishedCommands <= 0 {
		cfg.MaxFinishedCommands = DefaultMaxFinishedCommands
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
	if cfg.ClaimGrace <= 0 {
		cfg.ClaimGrace = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Changes == nil {
		cfg.Changes = ports.NoChanges{}
	}
	if cfg.Reports == nil {
		cfg.Reports = ports.NoLinkReports{}
	}
	cfg.Egress = cfg.Egress.withDefaults()
	cfg.Forwards = cfg.Forwards.withDefaults()
	svc := &Service{
		cfg:      cfg,
		log:      cfg.Logger,
		auth:     authenticator{creds: cfg.Credentials, clock: cfg.Clock, log: cfg.Logger, operatorToken: cfg.OperatorToken},
		registry: agent.NewRegistry(),
		conns:    map[string]*conn{},
		commands: map[string]*command{},

		drainTimeout: drainTimeout,
	}
	svc.SetServerPorts(cfg.Forwards.ServerPorts)
	return svc
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
			if !s.auth.operatorAuthorized(r.Header.Get("Authorization")) {
				w.Header().Set("WWW-Authenticate", "Bearer")
				http.Error(w, "missing or wrong operator bearer token", http.StatusUnauthorized)
				return
			}
		}
		if r.URL.Path == sandboxv1connect.AgentServiceTransferProcedure || r.URL.Path == sandboxv1connect.AgentServiceTunnelProcedure ||
			r.URL.Path == sandboxv1connect.AgentServiceForwardProcedure {
			// File, tunnel and forwarded bytes go uncompressed whatever the agent
			// accepts: gzip cost a core for 30 MiB/s, and archives, binaries
			// and TLS records do not shrink.
			r.Header.Del("Grpc-Accept-Encoding")
			r.Header.Del("Connect-Accept-Encoding")
		}
		h.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET "+ForwardRawPath, s.serveForwardRaw)
	mux.HandleFunc("GET "+TunnelRawPath, s.serveTunnelRaw)
	mux.HandleFunc(DataPath+"{id}", s.serveData)
	mux.HandleFunc("POST "+OutputPath+"{id}/{stream}", s.serveOutput)
	mux.HandleFunc("GET "+OutputPath+"{id}/{stream}", s.serveSessionRaw)
	mux.HandleFunc(InjectPath, s.serveInject)
	mux.Handle(grpchealth.NewHandler(grpchealth.NewStaticChecker(sandboxv1connect.AgentServiceName)))
	reflector := grpcreflect.NewStaticReflector(sandboxv1connect.AgentServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
}

// Run sweeps forgotten agents and old commands until ctx ends.
func (s *Service) Run(ctx context.Context) {
	clock.Every(ctx, time.Second, s.sweep)
}

func (s *Service) sweep() {
	now := s.cfg.Clock.Now()
	// An agent away on purpose (its environment hibernated) is kept past
	// the grace, and so is what it runs. Asked outside s.mu: whoever
	// answers may ask this link under a lock of its own.
	s.mu.Lock()
	expired := s.registry.Expired(now, s.cfg.DisconnectGrace)
	s.mu.Unlock()
	var awaited []string
	for _, id := range expired {
		if s.cfg.Reports.AgentAwaited(id) {
			awaited = append(awaited, id)
		}
	}
	s.mu.Lock()
	gone := s.registry.Sweep(now, s.cfg.DisconnectGrace, awaited...)
	var lost []*command
	for _, id := range gone {
		lost = append(lost, s.runningOn(id, nil)...)
	}
	s.forgetFinishedLocked(now)
	unclaimed := s.unclaimed(now)
	s.mu.Unlock()
	for _, id := range gone {
		s.log.Info("agent forgotten after disconnect grace", "agent_id", id)
	}
	// The agent did not come back: its commands are lost with it
	// (agent.FateOnForgotten).
	for _, cmd := range lost {
		s.log.Warn("agent gone for good; its command is lost", "agent_id", cmd.agentID, "command_id", cmd.id)
		s.finish(cmd, agent.LostResult(false))
	}
	for _, cmd := range unclaimed {
		s.killUnclaimed(cmd)
	}
	if len(gone) > 0 {
		s.cfg.Changes.Changed(ports.ChangeAgents)
	}
}

// DefaultMaxFinishedCommands is Config.MaxFinishedCommands' default.
const DefaultMaxFinishedCommands = 10_000

// forgetFinishedLocked forgets the finished commands past CommandRetention,
// then the oldest-ended beyond MaxFinishedCommands; s.mu held.
func (s *Service) forgetFinishedLocked(now time.Time) {
	type fin struct {
		id string
		at time.Time
	}
	var kept []fin
	for id, c := range s.commands {
		if c.finishedAt(now, s.cfg.CommandRetention) {
			delete(s.commands, id)
			continue
		}
		c.mu.Lock()
		ended, at := c.ended, c.endedAt
		c.mu.Unlock()
		if ended {
			kept = append(kept, fin{id, at})
		}
	}
	if over := len(kept) - s.cfg.MaxFinishedCommands; over > 0 {
		sort.Slice(kept, func(i, j int) bool { return kept[i].at.Before(kept[j].at) })
		for _, f := range kept[:over] {
			delete(s.commands, f.id)
		}
	}
}

// agentCounts counts what each agent holds open (streams, tunnels,
// transfers) against a bound, under a lock of its own.
type agentCounts struct {
	mu sync.Mutex
	n  map[string]int
}

// take counts one more for id unless it holds limit already (limit <= 0:
// no bound); release gives it back.
func (c *agentCounts) take(id string, limit int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if limit > 0 && c.n[id] >= limit {
		return false
	}
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[id]++
	return true
}

func (c *agentCounts) release(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[id]--; c.n[id] <= 0 {
		delete(c.n, id)
	}
}
