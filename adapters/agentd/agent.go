// Package agentd is the agent's side of the agent link: it keeps one Connect
// stream open to the management server, registers, heartbeats, runs the
// commands it is sent and streams their output back, reconnecting with
// backoff when the stream breaks. Commands keep running while it is away.
package agentd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1/sandboxv1connect"
	"github.com/agentic-sandbox/agentic-sandbox/internal/runas"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Config is what an agent needs to know.
type Config struct {
	AgentID   string
	Secret    string
	ServerURL string
	Runtime   sandboxv1.RuntimeKind
	Labels    map[string]string
	Version   string
	Runner    ports.ProcessRunner
	// NoTmux keeps sessions out of tmux even where it is installed: an
	// agent that runs its commands as another user would run the tmux
	// server, and so the sessions, as itself.
	NoTmux bool
	// TmuxUser (AGENT_RUN_AS with AGENT_TMUX=on) runs the tmux server, and
	// so the sessions kept in it, as the commands' user, where the agent
	// may switch to that user (root of its own user namespace).
	TmuxUser string
	// CAFile is the PEM CA an https:// server must be signed by
	// (MANAGEMENT_CA); empty trusts the system's roots. Verification is
	// never skipped.
	CAFile string
	Logger *slog.Logger
	// Reconnect backoff, 5 s doubling to 60 s by default.
	BackoffMin, BackoffMax time.Duration
	// OutboxBytes bounds output waiting to be sent (default 64 MiB).
	OutboxBytes int
	// OnShutdown is called when the server asks the agent to shut down.
	OnShutdown func(reason string)
	// Files does the file work the server asks for; nil refuses it.
	Files ports.FileSystem
	// EgressListen, when set (AGENT_EGRESS_PROXY, e.g. 127.0.0.1:3128), is
	// where the agent serves the egress proxy; its commands get
	// HTTPS_PROXY and friends pointing at it.
	EgressListen string
	// IdentityFile, when set (AGENT_IDENTITY_FILE), is where the agent
	// keeps the identity a rename gave it, so that it registers under it
	// after it restarts too; the caller reads it at start.
	IdentityFile string
	// IdentityFromLink (AGENT_IDENTITY_FROM_LINK=1, serial:// only): the
	// agent starts without an id and secret and asks the host side of its
	// serial link for them (a VM restored from a template that must hold
	// no credential).
	IdentityFromLink bool
	// BulkConnection says the server's unix:// address takes more than one
	// connection (MANAGEMENT_BULK_CONNECTION=1: a real listening socket,
	// not a relayed serial port), so files and tunnels get their own.
	// http:// and https:// always do; serial:// never.
	BulkConnection bool
	// PortsInterval is how often the agent looks at the TCP ports
	// listening in its environment (0: every 2 s; negative: never).
	PortsInterval time.Duration
	// NoFileDataPlane makes the agent register without file_data_plane,
	// as an agent from before it did: file bytes then go in Transfer
	// messages (AGENT_NO_FILE_DATA_PLANE=1; tests of the fallback).
	NoFileDataPlane bool
	// NoOutputDataPlane makes the agent register without
	// output_data_plane, as an agent from before it did: command output
	// then goes in OutputChunk messages on the Connect stream
	// (AGENT_NO_OUTPUT_DATA_PLANE=1; tests of the fallback).
	NoOutputDataPlane bool
	// NoTunnelRaw makes the agent register without tunnel_raw and carry
	// every egress tunnel on a Tunnel stream, as an agent from before it
	// did (AGENT_NO_TUNNEL_RAW=1; tests of the fallback).
	NoTunnelRaw bool
	// NoSessionRaw makes the agent register without session_raw: a PTY
	// session's bytes then go on the link's connection as before
	// (AGENT_NO_SESSION_RAW=1; tests of the fallback).
	NoSessionRaw bool
}

// Agent is a running agent.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	client sandboxv1connect.AgentServiceClient
	// files opens Transfer streams on the same connection, without gzip:
	// compressing file bytes cost the server a core for 30 MiB/s, and
	// most archives and binaries do not shrink.
	files sandboxv1connect.AgentServiceClient
	out   *outbox
	// control carries small messages (heartbeats, pongs) ahead of output.
	control   chan *sandboxv1.ConnectRequest
	heartbeat atomic.Int64 // nanoseconds
	// heartbeatAfter is the heartbeat loop's timer: time.After (a test puts
	// its own in, to see the intervals asked for and fire them).
	heartbeatAfter func(time.Duration) <-chan time.Time

	draining  atomic.Bool
	connected atomic.Bool
	cpu       cpuSampler
	// ident is who the agent is now: Config's id and secret until the
	// server renames it.
	ident atomic.Pointer[identity]

	lastMetrics atomic.Pointer[sandboxv1.Metrics]

	machineOnce sync.Once
	machine     *sandboxv1.SystemInfo
	tools       []string
	guest       guestSystem

	// tmux is whether sessions can be kept in tmux here.
	tmux bool

	// perms are the permission requests waiting for the server.
	perms permissions

	// ports finds the listening ports (used by one connection at a time).
	ports *portScanner
	// rawDial opens a connection of its own to the server for a forwarded
	// connection (nil: the address takes one connection only).
	rawDial func(context.Context) (net.Conn, error)
	// noRawTunnels is set when the server answered a raw tunnel's upgrade
	// with 404 (it is older than TunnelRawPath): tunnels go on Tunnel
	// streams until the agent registers again.
	noRawTunnels atomic.Bool
	// serverHTTP and serverBase reach the server's plain routes (injected
	// secrets' requests), on the files' connection.
	serverHTTP *http.Client
	serverBase string
	inject     injectEndpoint

	// linkHTTP is the link's own connection (the Connect stream's), which
	// the output data streams share (outputplane.go).
	linkHTTP *http.Client

	mu       sync.Mutex
	running  map[string]*running
	finished map[string]finished
	idle     *sync.Cond
}

// New builds an agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	if cfg.IdentityFromLink && !strings.HasPrefix(cfg.ServerURL, "serial:") {
		return nil, errors.New("an identity from the link needs a serial:// management server")
	}
	if ((cfg.AgentID == "" || cfg.Secret == "") && !cfg.IdentityFromLink) || cfg.ServerURL == "" {
		return nil, errors.New("agent id, secret and management server URL are required")
	}
	client, bulk, base, err := serverClient(cfg.ServerURL, cfg.CAFile, cfg.BulkConnection)
	if err != nil {
		return nil, err
	}
	rawDial, err := rawDialer(cfg.ServerURL, cfg.CAFile, cfg.BulkConnection)
	if err != nil {
		return nil, err
	}
	if cfg.Runner == nil {
		return nil, errors.New("no process runner")
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = 5 * time.Second
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 60 * time.Second
	}
	if cfg.OutboxBytes <= 0 {
		cfg.OutboxBytes = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TmuxUser != "" {
		cred, _, err := runas.Credential(cfg.TmuxUser)
		if err != nil {
			return nil, fmt.Errorf("tmux user: %w", err)
		}
		if cred != nil {
			tmuxUser.Store(cred)
		}
	}
	a := &Agent{
		cfg:      cfg,
		log:      cfg.Logger.With("agent_id", cfg.AgentID),
		client:   sandboxv1connect.NewAgentServiceClient(client, base, connect.WithGRPC(), connect.WithReadMaxBytes(8<<20)),
		files:    sandboxv1connect.NewAgentServiceClient(bulk, base, connect.WithGRPC(), connect.WithReadMaxBytes(8<<20), connect.WithAcceptCompression("gzip", nil, nil)),
		out:      newOutbox(cfg.OutboxBytes),
		control:  make(chan *sandboxv1.ConnectRequest, 64),
		running:  map[string]*running{},
		finished: map[string]finished{},
		tmux:     !cfg.NoTmux && haveTmux(),
		guest:    realGuest,
		ports:    newPortScanner("/proc"),
		rawDial:  rawDial,

		serverHTTP: bulk,
		serverBase: base,
		linkHTTP:   client,

		heartbeatAfter: time.After,
	}
	a.idle = sync.NewCond(&a.mu)
	a.heartbeat.Store(int64(5 * time.Second))
	a.ident.Store(&identity{ID: cfg.AgentID, Secret: cfg.Secret})
	return a, nil
}

// Shutdown stops every running command (TERM, then KILL) and waits up to
// timeout for their results to be handed to the server.
func (a *Agent) Shutdown(timeout time.Duration) {
	a.mu.Lock()
	a.draining.Store(true) // under a.mu: startCommand kills what this loop cannot see
	for _, r := range a.running {
		if t, ok := r.proc.(interface{ Detach() }); ok {
			t.Detach() // kept in tmux: the next agent process adopts it
		} else if r.proc != nil {
			r.proc.Kill()
		}
	}
	a.mu.Unlock()
	deadline := time.Now().Add(timeout)
	done := make(chan struct{})
	go func() {
		a.mu.Lock()
		for len(a.running) > 0 {
			a.idle.Wait()
		}
		a.mu.Unlock()
		// Until the server has it all: sent, and acknowledged when it
		// acknowledges output (data streams included).
		for a.connected.Load() && a.out.pending() > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		a.log.Warn("shutdown timed out with commands or output still pending")
	}
}
