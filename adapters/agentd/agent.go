// Package agent is the agent's side of the agent link: it keeps one Connect
// stream open to the management server, registers, heartbeats, runs the
// commands it is sent and streams their output back, reconnecting with
// backoff when the stream breaks. Commands keep running while it is away.
package agentd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1/sandboxv1connect"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
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

	mu       sync.Mutex
	running  map[string]*running
	finished map[string]finished
	idle     *sync.Cond
}

type running struct {
	id   string
	proc ports.Process
	// The session the command is, if any: reported on every connect.
	sessionID, sessionName string
	sessionType            ports.SessionType
	startedAt              time.Time
	// offsets per stream, and the tail of the main stream (the PTY, else
	// stdout), touched only from the serialised output callback.
	offsets map[ports.OutputStream]uint64
	tail    []byte
	// stdin is the command's input queue, made on its first input.
	stdinOnce sync.Once
	stdin     *stdinQueue
}

// finished is a command that ended recently. Its result and output tail go
// into every connect report, because the messages carrying them may have
// been written into a connection that died.
type finished struct {
	info *sandboxv1.SessionInfo
	at   time.Time
}

// Bounds of what the agent remembers of finished commands.
const (
	finishedTailBytes = 4096
	finishedKeep      = 256
	finishedFor       = 15 * time.Minute
)

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
	}
	a.idle = sync.NewCond(&a.mu)
	a.heartbeat.Store(int64(5 * time.Second))
	a.ident.Store(&identity{ID: cfg.AgentID, Secret: cfg.Secret})
	return a, nil
}

// serverClient returns the HTTP clients and base URL for a management
// server address: http:// (h2c) or https:// over TCP; unix:///path for the
// agent socket mounted into a container without a network; serial:///dev/…
// for a virtio-serial port of a VM (one byte stream the host side relays).
// The bulk client (files, egress tunnels) has a connection of its own where
// the address allows one: a download's bytes then never queue ahead of a
// keystroke in a socket buffer or a frame writer (measured: terminal echo
// during tunnel downloads, docs/benchmarks.md). A serial port, or a unix
// socket that relays one (a VM's), is one stream: everything shares it.
func serverClient(server, caFile string, unixTakesTwo bool) (control, bulk *http.Client, base string, err error) {
	control, base, err = serverClientOnce(server, caFile)
	if err != nil {
		return nil, nil, "", err
	}
	if strings.HasPrefix(server, "serial:") || (strings.HasPrefix(server, "unix:") && !unixTakesTwo) {
		return control, control, base, nil
	}
	bulk, _, err = serverClientOnce(server, caFile)
	return control, bulk, base, err
}

func serverClientOnce(server, caFile string) (*http.Client, string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, "", errors.New("management server must be an http://, https://, unix:// or serial:// URL")
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 15 * time.Second}
	switch {
	case (u.Scheme == "http" || u.Scheme == "https") && u.Host != "":
		c := httpClient(u.Scheme == "http", dialer.DialContext)
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return nil, "", fmt.Errorf("MANAGEMENT_CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, "", fmt.Errorf("MANAGEMENT_CA %s: no certificate in it", caFile)
			}
			c.Transport.(wholeEnvelopes).next.(*http.Transport).TLSClientConfig.RootCAs = pool
		}
		return c, server, nil
	case u.Scheme == "unix" && u.Path != "":
		return httpClient(true, func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", u.Path)
		}), "http://agent-socket", nil
	case u.Scheme == "serial" && u.Path != "":
		return httpClient(true, func(context.Context, string, string) (net.Conn, error) {
			return openSerial(u.Path)
		}), "http://agent-serial", nil
	}
	return nil, "", errors.New("management server must be an http://, https://, unix:// or serial:// URL")
}

// httpClient speaks HTTP/2, over cleartext (h2c) or TLS, and pings an idle
// connection so a dead server is noticed.
func httpClient(cleartext bool, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Client {
	tr := &http.Transport{
		DialContext:       dial,
		TLSClientConfig:   &tls.Config{MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
		// The server's windows (agentrpc.HTTP2Config): a stalled upload
		// holds at most its stream's 4 MiB of the connection's 64 MiB.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 10 * time.Second,
			MaxReceiveBufferPerStream: 4 << 20, MaxReceiveBufferPerConnection: 64 << 20, MaxReadFrameSize: 1 << 20},
	}
	p := new(http.Protocols)
	if cleartext {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP2(true)
	}
	tr.Protocols = p
	return &http.Client{Transport: wholeEnvelopes{next: tr}}
}

// Connected reports whether the stream is up.
func (a *Agent) Connected() bool { return a.connected.Load() }

// Run connects and serves until ctx ends, reconnecting with backoff.
func (a *Agent) Run(ctx context.Context) error {
	defer a.perms.removeDir()
	if me := a.ident.Load(); a.cfg.IdentityFromLink && me.Secret == "" {
		if err := a.identityFromLink(ctx); err != nil {
			return nil // ctx ended
		}
	}
	if a.tmux {
		a.adoptTmuxSessions(ctx)
	}
	if a.cfg.EgressListen != "" {
		ln, err := net.Listen("tcp", a.cfg.EgressListen)
		if err != nil {
			return fmt.Errorf("egress proxy: %w", err)
		}
		a.log.Info("egress proxy listening", "addr", ln.Addr().String())
		go func() { _ = a.ServeEgress(ctx, ln) }()
	}
	backoff := a.cfg.BackoffMin
	for {
		registered, err := a.serve(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errRenamed) {
			continue // the server waits for the new identity: no backoff
		}
		if registered {
			backoff = a.cfg.BackoffMin
		}
		wait := jitter(backoff)
		if errors.Is(err, errDrained) {
			// The server is restarting: its successor is usually up within
			// a second, and a refused attempt falls back to the backoff.
			wait = jitter(min(backoff, drainedRetry))
		}
		if connect.CodeOf(err) == connect.CodeUnauthenticated {
			a.log.Error("management server rejected this agent's credentials; will retry", "retry_in", wait)
		} else {
			a.log.Warn("agent stream ended; reconnecting", "err", err, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		if !registered {
			backoff = min(backoff*2, a.cfg.BackoffMax)
		}
	}
}

// jitter spreads reconnects of many agents by up to ±10%.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d)) //nolint:gosec // jitter needs no unpredictability
}

// serve runs one connection; registered says whether the server accepted us.
func (a *Agent) serve(ctx context.Context) (registered bool, err error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := a.client.Connect(cctx)
	me := a.ident.Load()
	stream.RequestHeader().Set("x-agent-id", me.ID)
	stream.RequestHeader().Set("x-agent-secret", me.Secret)
	if err := stream.Send(a.registration(me.ID)); err != nil {
		return false, drainErr(stream, err)
	}
	first, err := stream.Receive()
	if err != nil {
		return false, err
	}
	ack := first.GetRegistrationAck()
	if ack == nil || !ack.GetAccepted() {
		_ = stream.CloseRequest()
		return false, errors.New("registration not accepted: " + ack.GetMessage())
	}
	if s := ack.GetHeartbeatIntervalSeconds(); s > 0 {
		a.heartbeat.Store(int64(time.Duration(s) * time.Second))
	}
	a.connected.Store(true)
	defer a.connected.Store(false)
	a.log.Info("registered with management server", "server", a.cfg.ServerURL)

	// Heartbeats queued during a previous connection are stale.
	for len(a.control) > 0 {
		<-a.control
	}
	// The server counts the agent ready at its first heartbeat, so it must
	// not go before the ack: the connect report right behind it has to be
	// in before the server starts sessions on this connection, or it would
	// count them lost (the server's session reconcile rule).
	a.queueControl(a.connectHeartbeat())
	// Queued behind any output still held, so the server learns which of
	// its commands this agent no longer runs.
	a.out.pushNow(a.sessionReport("connect:" + ack.GetConfig()["connection_id"]))
	// After the report (which tells a restarted server of the commands):
	// the questions still waiting, asked again.
	for _, ask := range a.perms.pending() {
		a.out.pushNow(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_PermissionRequest{PermissionRequest: ask}})
	}

	var wg sync.WaitGroup
	errc := make(chan error, 3)
	draining := make(chan struct{})
	recvEnded := make(chan struct{})
	wg.Add(3)
	go func() {
		defer wg.Done()
		defer close(recvEnded)
		for {
			msg, err := stream.Receive()
			if err != nil {
				errc <- err
				return
			}
			if r := msg.GetRename(); r != nil {
				if err := a.rename(r); err != nil {
					a.log.Error("rename refused", "err", err)
					continue
				}
				errc <- errRenamed
				return
			}
			if d := msg.GetDrain(); d != nil {
				select {
				case <-draining:
				default:
					a.log.Info("management server is draining this stream; connecting again", "reason", d.GetReason())
					close(draining)
				}
				continue
			}
			a.handle(cctx, msg)
		}
	}()
	go func() { defer wg.Done(); errc <- a.sendLoop(cctx, stream, draining) }()
	go func() { defer wg.Done(); a.heartbeatLoop(cctx) }()

	err = <-errc
	if errors.Is(err, errDrained) {
		// Our side ends here; the server reads up to this close, then ends
		// the stream. Cancelling first could cut off what is still in flight.
		_ = stream.CloseRequest()
		select {
		case <-recvEnded:
		case <-time.After(drainWait):
		case <-ctx.Done():
		}
	}
	cancel()
	_ = stream.CloseRequest()
	_ = stream.CloseResponse()
	wg.Wait()
	return true, err
}

func drainErr(stream *connect.BidiStreamForClient[sandboxv1.ConnectRequest, sandboxv1.ConnectResponse], err error) error {
	// A failed Send hides the server's real error; Receive returns it.
	if errors.Is(err, io.EOF) {
		if _, rerr := stream.Receive(); rerr != nil {
			return rerr
		}
	}
	return err
}

// errDrained ends a stream the server drained: the agent connects again.
var errDrained = errors.New("stream drained by the management server")

// drainedRetry is the wait before connecting again after a drain.
const drainedRetry = 500 * time.Millisecond

// drainWait bounds the wait, after a drained stream's side was closed, for
// the server to end it.
const drainWait = 5 * time.Second

// sendLoop sends the control messages and the outbox until the stream
// fails or the server drains it; a message leaves the outbox only once
// sent, so what is left goes on the next connection.
func (a *Agent) sendLoop(ctx context.Context, stream *connect.BidiStreamForClient[sandboxv1.ConnectRequest, sandboxv1.ConnectResponse], draining <-chan struct{}) error {
	for {
		select {
		case <-draining:
			return errDrained
		default:
		}
		select {
		case m := <-a.control:
			if err := stream.Send(m); err != nil {
				return err
			}
			continue
		default:
		}
		if m := a.out.peek(); m != nil {
			if err := stream.Send(m); err != nil {
				return err
			}
			a.out.pop()
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-draining:
			return errDrained
		case m := <-a.control:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-a.out.notify:
		}
	}
}

func (a *Agent) heartbeatLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(a.heartbeat.Load())):
			a.queueControl(a.heartbeatMessage())
		}
	}
}

// queueControl never blocks: a control message that does not fit is dropped
// (the next heartbeat replaces it).
func (a *Agent) queueControl(m *sandboxv1.ConnectRequest) {
	select {
	case a.control <- m:
	default:
	}
}

func (a *Agent) registration(id string) *sandboxv1.ConnectRequest {
	host, _ := os.Hostname()
	// The machine's size and tools are looked up once: under TCG that
	// took ~9 ms of every registration, a pool member's take included.
	a.machineOnce.Do(func() { a.machine, a.tools = systemInfo(), detectCapabilities() })
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Registration{Registration: &sandboxv1.Registration{
		AgentId:      id,
		Hostname:     host,
		IpAddress:    primaryIP(),
		SystemInfo:   a.machine,
		Labels:       a.cfg.Labels,
		Runtime:      a.cfg.Runtime,
		AgentVersion: a.cfg.Version,
		Capabilities: a.tools,
	}}}
}

// detectCapabilities lists the tools found on this machine that sessions use.
func detectCapabilities() []string {
	var caps []string
	for _, tool := range []string{"tmux", "claude", "git"} {
		if _, err := exec.LookPath(tool); err == nil {
			caps = append(caps, tool)
		}
	}
	return caps
}

func (a *Agent) heartbeatMessage() *sandboxv1.ConnectRequest {
	m := readMetrics(&a.cpu)
	a.lastMetrics.Store(m)
	return a.heartbeatWith(m)
}

// connectHeartbeat is the heartbeat sent on connecting: with the last
// metrics read (at most one interval old) when there are any, as reading
// /proc took ~10 ms under TCG, on the way to being ready.
func (a *Agent) connectHeartbeat() *sandboxv1.ConnectRequest {
	if m := a.lastMetrics.Load(); m != nil {
		return a.heartbeatWith(m)
	}
	return a.heartbeatMessage()
}

func (a *Agent) heartbeatWith(m *sandboxv1.Metrics) *sandboxv1.ConnectRequest {
	a.mu.Lock()
	n := len(a.running)
	a.mu.Unlock()
	status := sandboxv1.AgentStatus_AGENT_STATUS_READY
	switch {
	case a.draining.Load():
		status = sandboxv1.AgentStatus_AGENT_STATUS_DRAINING
	case n > 0:
		status = sandboxv1.AgentStatus_AGENT_STATUS_BUSY
	}
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Heartbeat{Heartbeat: &sandboxv1.Heartbeat{
		Status:          status,
		SentAt:          timestamppb.Now(),
		RunningCommands: uint32(n), //nolint:gosec // a count of running commands
		Metrics:         m,
	}}}
}

func (a *Agent) handle(ctx context.Context, msg *sandboxv1.ConnectResponse) {
	switch p := msg.GetPayload().(type) {
	case *sandboxv1.ConnectResponse_Command:
		a.startCommand(p.Command)
	case *sandboxv1.ConnectResponse_Stdin:
		if r := a.lookup(p.Stdin.GetCommandId()); r != nil && r.proc != nil {
			r.stdinOnce.Do(func() {
				r.stdin = newStdinQueue()
				go a.stdinLoop(r, r.stdin)
			})
			if !r.stdin.push(p.Stdin.GetData(), p.Stdin.GetEof()) {
				a.log.Warn("stdin dropped: the command does not read it", "command_id", r.id, "bytes", len(p.Stdin.GetData()))
			}
		}
	case *sandboxv1.ConnectResponse_PtyControl:
		a.ptyControl(p.PtyControl)
	case *sandboxv1.ConnectResponse_Ping:
		a.queueControl(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Pong{Pong: &sandboxv1.Pong{Nonce: p.Ping.GetNonce()}}})
	case *sandboxv1.ConnectResponse_ConfigUpdate:
		if s := p.ConfigUpdate.GetHeartbeatIntervalSeconds(); s > 0 {
			a.heartbeat.Store(int64(time.Duration(s) * time.Second))
		}
	case *sandboxv1.ConnectResponse_Shutdown:
		a.log.Info("management server asked this agent to shut down", "reason", p.Shutdown.GetReason())
		if a.cfg.OnShutdown != nil {
			go a.cfg.OnShutdown(p.Shutdown.GetReason())
		}
	case *sandboxv1.ConnectResponse_SessionQuery:
		a.out.pushNow(a.sessionReport(p.SessionQuery.GetRequestId()))
	case *sandboxv1.ConnectResponse_FileRequest:
		go a.transfer(ctx, p.FileRequest)
	case *sandboxv1.ConnectResponse_PermissionDecision:
		a.perms.deliver(p.PermissionDecision)
	}
}

func (a *Agent) ptyControl(c *sandboxv1.PtyControl) {
	r := a.lookup(c.GetCommandId())
	if r == nil {
		return
	}
	var err error
	switch act := c.GetAction().(type) {
	case *sandboxv1.PtyControl_Resize:
		err = r.proc.Resize(uint16(min(act.Resize.GetCols(), 0xffff)), uint16(min(act.Resize.GetRows(), 0xffff)))
	case *sandboxv1.PtyControl_Signal:
		err = r.proc.Signal(int(act.Signal.GetSignal()))
	case *sandboxv1.PtyControl_Kill:
		r.proc.Kill()
	}
	if err != nil {
		a.log.Debug("control failed", "command_id", r.id, "err", err)
	}
}

func (a *Agent) lookup(id string) *running {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running[id]
}

func (a *Agent) startCommand(req *sandboxv1.CommandRequest) {
	id := req.GetCommandId()
	a.mu.Lock()
	if _, dup := a.running[id]; dup || id == "" {
		a.mu.Unlock()
		return
	}
	spec := agentwire.CommandSpec(req)
	r := &running{id: id, offsets: map[ports.OutputStream]uint64{}, startedAt: time.Now(),
		sessionID: spec.SessionID, sessionName: spec.SessionName, sessionType: spec.SessionType}
	a.running[id] = r
	a.mu.Unlock()

	if spec.Command == "" && !(spec.Persist && a.tmux) {
		// A terminal without a command is the agent's shell (tmux starts it itself).
		cmd := sessionCommand(spec)
		spec.Command, spec.Args = cmd[0], cmd[1:]
	}
	if a.cfg.EgressListen != "" {
		// The command's own values win: it may mean to go direct (NO_PROXY).
		env := EgressEnv(a.cfg.EgressListen)
		for k, v := range spec.Env {
			env[k] = v
		}
		spec.Env = env
	}
	if me := a.ident.Load(); me.ID != a.cfg.AgentID {
		// Renamed (a pool member taken): the agent's own environment still
		// names the id it started with.
		env := maps.Clone(spec.Env)
		if env == nil {
			env = map[string]string{}
		}
		env["AGENT_ID"] = me.ID
		spec.Env = env
	}
	stop := func() {}
	if spec.PermissionPrompts {
		path, stopSocket, err := a.permissionSocket(id)
		if err != nil {
			a.log.Warn("no permission socket for a command that asked for one", "command_id", id, "err", err)
		} else {
			stop = stopSocket
			env := map[string]string{EnvPermissionSocket: path, EnvMCPConfig: ports.ClaudePermissionMCPConfig}
			if exe, err := os.Executable(); err == nil {
				env[EnvAgentExe] = exe
			}
			for k, v := range spec.Env {
				env[k] = v
			}
			spec.Env = env
		}
	}
	a.run(r, spec, nil)
	a.mu.Lock()
	proc := r.proc
	a.mu.Unlock()
	if proc == nil {
		stop()
		return
	}
	go func() { <-proc.Done(); stop() }()
}

// run starts r's process (or, with found, takes over a tmux session an
// earlier agent process ran) and reports its output and end.
func (a *Agent) run(r *running, spec ports.CommandSpec, found *foundSession) {
	id := r.id
	mainStream := ports.StreamStdout
	if spec.PTY || found != nil {
		mainStream = ports.StreamPTY
	}
	onOutput := func(stream ports.OutputStream, data []byte) {
		off := r.offsets[stream]
		r.offsets[stream] = off + uint64(len(data))
		if stream == mainStream {
			r.tail = append(r.tail, data...)
			if len(r.tail) > finishedTailBytes {
				r.tail = append(r.tail[:0], r.tail[len(r.tail)-finishedTailBytes:]...)
			}
		}
		a.out.push(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Output{Output: &sandboxv1.OutputChunk{
			StreamId: id, Stream: agentwire.StreamToProto(stream), Data: data, Timestamp: timestamppb.Now(), Offset: off,
		}}})
	}
	var proc ports.Process
	switch {
	case found != nil && found.logFile != "":
		proc = followTmuxLog(*found, onOutput)
	case found != nil:
		proc = attachTmuxSession(a.cfg.Runner, *found, onOutput)
	case spec.Persist && spec.PTY && spec.SessionName != "" && a.tmux && spec.SessionType == ports.SessionBackground:
		proc = startTmuxLog(spec, onOutput)
	case spec.Persist && spec.PTY && spec.SessionName != "" && a.tmux:
		proc = startTmuxSession(a.cfg.Runner, spec, onOutput)
	default:
		proc = a.cfg.Runner.Start(spec, onOutput)
	}
	// Set under the lock: Shutdown reads it from another goroutine. A
	// Shutdown that began meanwhile could not kill it, so kill it here.
	a.mu.Lock()
	r.proc = proc
	stop := a.draining.Load()
	a.mu.Unlock()
	if stop {
		proc.Kill()
	}
	if pid := proc.Pid(); pid > 0 {
		a.out.pushNow(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_CommandStarted{CommandStarted: &sandboxv1.CommandStarted{
			CommandId: id, Pid: int32(pid), StartedAt: timestamppb.Now(), //nolint:gosec // Linux pids fit in int32
		}}})
	}
	go func() {
		res := proc.Wait()
		if t, ok := proc.(interface{ isDetached() bool }); ok && t.isDetached() {
			// The session lives on in tmux for the next agent process,
			// which adopts it: no result, nothing to remember.
			a.mu.Lock()
			delete(a.running, id)
			a.mu.Unlock()
			a.idle.Broadcast()
			return
		}
		for stream, off := range r.offsets {
			a.out.push(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Output{Output: &sandboxv1.OutputChunk{
				StreamId: id, Stream: agentwire.StreamToProto(stream), Timestamp: timestamppb.Now(), Offset: off, Eof: true,
			}}})
		}
		result := agentwire.CommandResult(id, res)
		a.out.push(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_CommandResult{CommandResult: result}})
		// Output callbacks are over once Wait returned: r.tail is final.
		info := &sandboxv1.SessionInfo{
			CommandId: id, State: sandboxv1.SessionState_SESSION_STATE_EXITED, ExitCode: int32(res.ExitCode), //nolint:gosec // exit codes are 0-255 or 128+signal
			Result: result, OutputTail: r.tail, TailStream: agentwire.StreamToProto(mainStream), OutputOffset: r.offsets[mainStream],
		}
		a.mu.Lock()
		delete(a.running, id)
		a.rememberFinished(id, info, time.Now())
		a.mu.Unlock()
		a.idle.Broadcast()
	}()
}

// rememberFinished keeps a finished command for the connect reports, within
// the bounds; a.mu must be held.
func (a *Agent) rememberFinished(id string, info *sandboxv1.SessionInfo, now time.Time) {
	a.finished[id] = finished{info: info, at: now}
	if len(a.finished) <= finishedKeep {
		return
	}
	var oldestID string
	var oldest time.Time
	for fid, f := range a.finished {
		if now.Sub(f.at) > finishedFor {
			delete(a.finished, fid)
			continue
		}
		if oldestID == "" || f.at.Before(oldest) {
			oldestID, oldest = fid, f.at
		}
	}
	if len(a.finished) > finishedKeep {
		delete(a.finished, oldestID)
	}
}

func (a *Agent) sessionReport(requestID string) *sandboxv1.ConnectRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	rep := &sandboxv1.SessionReport{RequestId: requestID}
	for _, r := range a.running {
		si := &sandboxv1.SessionInfo{CommandId: r.id, State: sandboxv1.SessionState_SESSION_STATE_RUNNING,
			SessionId: r.sessionID, Name: r.sessionName, Type: agentwire.SessionTypeToProto(r.sessionType), StartedAt: timestamppb.New(r.startedAt)}
		if r.proc != nil {
			si.Pid = int32(r.proc.Pid()) //nolint:gosec // Linux pids fit in int32
		}
		rep.Sessions = append(rep.Sessions, si)
	}
	for _, f := range a.finished {
		if time.Since(f.at) <= finishedFor {
			rep.Sessions = append(rep.Sessions, f.info)
		}
	}
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_SessionReport{SessionReport: rep}}
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
		for a.connected.Load() && a.out.len() > 0 && time.Now().Before(deadline) {
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
