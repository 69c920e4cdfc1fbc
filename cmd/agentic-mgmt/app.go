package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/aiwg"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/core/mission"
	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/core/task"
)

// App is the running management server: its listeners and background loops.
type App struct {
	cfg          Config
	log          *slog.Logger
	agents       *agentrpc.Service
	rest         RESTHandler
	supervisor   *hostsup.Supervisor
	token        OperatorToken
	banner       io.Writer
	missions     *mission.Service
	sessions     *session.Service
	aiwg         *aiwg.Client
	ws           WSHandler
	environments *environment.Service
	tasks        *task.Service
	ready        *Readiness
	tls          *AgentTLS
	hold         *agentrpc.LinkHold
}

// RESTHandler is the REST port's handler.
type RESTHandler http.Handler

// Shutdown budget: the contract wants exit within 2 s of SIGTERM, with the
// mission.suspended events flushed to aiwg serve first.
const (
	suspendTimeout  = 500 * time.Millisecond
	flushTimeout    = 800 * time.Millisecond
	shutdownTimeout = 400 * time.Millisecond
)

// Run serves until ctx ends. Host agents keep running after it returns;
// the stores and runtimes close in newApp's cleanup.
func (a *App) Run(ctx context.Context) error {
	// Missions re-bind to their sessions before agents can report back.
	if err := a.missions.Recover(); err != nil {
		return fmt.Errorf("missions: %w", err)
	}
	agentLn, err := net.Listen("tcp", a.cfg.agentAddr())
	if err != nil {
		return fmt.Errorf("agent port: %w", err)
	}
	if a.tls != nil {
		agentLn = tls.NewListener(agentLn, a.tls.Config)
	}
	restLn, err := net.Listen("tcp", a.cfg.restAddr())
	if err != nil {
		agentLn.Close()
		return fmt.Errorf("REST port: %w", err)
	}
	wsLn, err := net.Listen("tcp", a.cfg.wsAddr())
	if err != nil {
		agentLn.Close()
		restLn.Close()
		return fmt.Errorf("client WebSocket port: %w", err)
	}
	// A host agent shares this server's network: a preview or port-forward
	// through it must not reach these listeners.
	a.agents.SetServerPorts(listenerPorts(agentLn, restLn, wsLn))
	// Without the socket, only environments without a network need it:
	// they fail to provision with the reason, the rest of the server works.
	sockLn, err := listenAgentSocket(a.cfg.AgentSocket)
	if err != nil {
		a.log.Error("agent socket not available; containers and VMs without a network cannot reach this server", "path", a.cfg.AgentSocket, "err", err)
	} else if err := os.Chmod(a.cfg.AgentSocket, 0o666); err != nil { //nolint:gosec // environments run as other users; each stream is authenticated by its own secret
		// It carries only agents' streams, each authenticated by its own
		// secret; environments run as other users.
		a.log.Warn("agent socket not opened to environments' users", "err", err)
	}

	agentMux := http.NewServeMux()
	a.agents.Mount(agentMux, true)
	// The socket is mounted into every container: agents only.
	socketMux := http.NewServeMux()
	a.agents.Mount(socketMux, false)
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // h2c: gRPC clients and agents speak HTTP/2 without TLS
	// Every server bounds idle connections and header reads; agent streams
	// are kept alive by HTTP/2 pings instead of a read timeout.
	tlsProtocols := new(http.Protocols)
	tlsProtocols.SetHTTP1(true)
	tlsProtocols.SetHTTP2(true)
	agentServer := func(h http.Handler, p *http.Protocols) *http.Server {
		return &http.Server{
			// Every agent request names its agent: a hold (an environment
			// saved with its memory) can end its connections and refuse it.
			Handler:           a.hold.Gate(h),
			ConnContext:       a.hold.ConnContext,
			ConnState:         a.hold.ConnState,
			Protocols:         p,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			HTTP2:             agentrpc.HTTP2Config(),
			ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
		}
	}
	// The socket is local: it stays cleartext whatever the TCP port does.
	agentSrv, socketSrv := agentServer(agentMux, protocols), agentServer(socketMux, protocols)
	if a.tls != nil {
		agentSrv = agentServer(agentMux, tlsProtocols)
	}
	restSrv := &http.Server{
		Handler: a.rest,
		// h2c with prior knowledge too: programs (and previews' clients)
		// may speak HTTP/2 without TLS.
		Protocols:         protocols,
		ReadHeaderTimeout: 10 * time.Second,
		// A declared body that never comes holds nothing for long; output
		// streams (SSE) write, and are not bounded by it.
		ReadTimeout: time.Minute,
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}
	wsSrv := &http.Server{
		Handler:           a.ws,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}

	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	serve := func(name string, srv *http.Server, ln net.Listener) {
		defer wg.Done()
		a.ready.setServing(name, true)
		defer a.ready.setServing(name, false)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}
	wg.Add(7)
	go serve(listenerAgentRPC, agentSrv, agentLn)
	if sockLn != nil {
		wg.Add(1)
		go serve(listenerAgentSocket, socketSrv, sockLn)
	}
	go serve(listenerREST, restSrv, restLn)
	go serve(listenerWS, wsSrv, wsLn)
	go func() { defer wg.Done(); a.agents.Run(runCtx) }()
	go func() { defer wg.Done(); a.missions.Run(runCtx) }()
	go func() { defer wg.Done(); a.sessions.Run(runCtx) }()
	go func() { defer wg.Done(); a.aiwg.Run(runCtx) }()

	recoverCtx, cancelRecover := context.WithTimeout(runCtx, 30*time.Second)
	a.environments.Recover(recoverCtx)
	cancelRecover()
	// After the environments: a task continues with its environment known.
	a.tasks.Resume()
	if a.supervisor != nil {
		if err := a.supervisor.Start(runCtx); err != nil {
			a.log.Error("host supervisor failed to start", "err", err)
		}
	}
	a.log.Info("agentic-mgmt started", "agent_rpc", agentLn.Addr().String(), "rest", restLn.Addr().String(),
		"data_dir", a.cfg.DataDir, "host_agents", a.cfg.HostAgents, "version", a.cfg.Version)
	// agenticctl finds this server by its data dir (beside operator-token).
	rest := restURL(restLn.Addr())
	if err := writeRESTURL(a.cfg.DataDir, rest); err != nil {
		a.log.Warn("the REST URL could not be left for agenticctl in the data dir", "err", err)
	}
	b := bannerInfo{Version: a.cfg.Version, REST: rest, WS: wsLn.Addr().String(), AgentRPC: a.cfg.agentServerURL(),
		DataDir: a.cfg.DataDir, SecretsDir: a.cfg.SecretsDir}
	b.Runtimes, b.Missing = a.ready.runtimes.bannerRuntimes()
	if a.cfg.PrintToken {
		b.Token = string(a.token)
	}
	writeBanner(a.banner, b)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	// Missions keep running on their agents; aiwg serve hears they are
	// suspended, and the next start resumes them.
	suspendCtx, cancelSuspend := context.WithTimeout(context.Background(), suspendTimeout)
	if err := a.missions.Suspend(suspendCtx); err != nil {
		a.log.Error("suspending missions", "err", err)
	}
	cancelSuspend()
	if a.aiwg.Configured() {
		flushCtx, cancelFlush := context.WithTimeout(context.Background(), flushTimeout)
		if err := a.aiwg.Flush(flushCtx); err != nil {
			a.log.Warn("events not all delivered to aiwg serve before exit; they stay queued for the next start", "err", err)
		}
		cancelFlush()
	}
	if a.supervisor != nil {
		a.supervisor.Stop() // the agents stay up; the next start adopts them
	}
	a.agents.CloseStreams()
	shutCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var shutWG sync.WaitGroup
	for _, srv := range []*http.Server{agentSrv, socketSrv, restSrv, wsSrv} {
		shutWG.Add(1)
		go func() {
			defer shutWG.Done()
			// Agent streams never end by themselves; close what is left at the deadline.
			if err := srv.Shutdown(shutCtx); err != nil {
				srv.Close()
			}
		}()
	}
	shutWG.Wait()
	stopRun()
	wg.Wait()
	a.log.Info("agentic-mgmt stopped")
	return runErr
}

// listenAgentSocket listens on path, replacing a socket left by an earlier
// run (nobody answers on it) but never anything else.
func listenAgentSocket(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is in use by another agentic-mgmt", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	// The socket's directory is what containers mount (so that a new
	// socket after a restart reaches running agents): it must hold nothing
	// else, and others may enter it.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // containers mount it and their agents run as other users
		return nil, err
	}
	return net.Listen("unix", path)
}

// listenerPorts are the TCP ports lns are bound to.
func listenerPorts(lns ...net.Listener) []uint16 {
	var out []uint16
	for _, ln := range lns {
		if a, ok := ln.Addr().(*net.TCPAddr); ok && a.Port > 0 && a.Port <= 65535 {
			out = append(out, uint16(a.Port))
		}
	}
	return out
}
