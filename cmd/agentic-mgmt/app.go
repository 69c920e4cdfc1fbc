package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
)

// App is the running management server: its listeners and background loops.
type App struct {
	cfg        Config
	log        *slog.Logger
	agents     *agentrpc.Service
	rest       RESTHandler
	supervisor *hostsup.Supervisor
	token      OperatorToken
	banner     io.Writer
}

// RESTHandler is the REST port's handler.
type RESTHandler http.Handler

// shutdownTimeout keeps exit well inside the 2 s the contract allows.
const shutdownTimeout = time.Second

// Run serves until ctx ends. Host agents keep running after it returns.
func (a *App) Run(ctx context.Context) error {
	agentLn, err := net.Listen("tcp", a.cfg.agentAddr())
	if err != nil {
		return fmt.Errorf("agent port: %w", err)
	}
	restLn, err := net.Listen("tcp", a.cfg.restAddr())
	if err != nil {
		agentLn.Close()
		return fmt.Errorf("REST port: %w", err)
	}

	agentMux := http.NewServeMux()
	a.agents.Mount(agentMux)
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // h2c: gRPC clients and agents speak HTTP/2 without TLS
	agentSrv := &http.Server{
		Handler:           agentMux,
		Protocols:         protocols,
		ReadHeaderTimeout: 10 * time.Second,
		HTTP2:             &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 10 * time.Second},
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}
	restSrv := &http.Server{
		Handler:           a.rest,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}

	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	serve := func(srv *http.Server, ln net.Listener) {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}
	wg.Add(3)
	go serve(agentSrv, agentLn)
	go serve(restSrv, restLn)
	go func() { defer wg.Done(); a.agents.Run(runCtx) }()

	if a.supervisor != nil {
		if err := a.supervisor.Start(runCtx); err != nil {
			a.log.Error("host supervisor failed to start", "err", err)
		}
	}
	a.log.Info("agentic-mgmt started", "agent_rpc", agentLn.Addr().String(), "rest", restLn.Addr().String(),
		"data_dir", a.cfg.DataDir, "host_agents", a.cfg.HostAgents, "version", a.cfg.Version)
	fmt.Fprintf(a.banner, "agentic-mgmt %s\n  REST API:  http://%s/api/v1 (spec: /openapi.yaml)\n  agent RPC: %s\n  data dir:  %s\n",
		a.cfg.Version, restLn.Addr(), a.cfg.agentServerURL(), a.cfg.DataDir)
	if a.cfg.PrintToken {
		fmt.Fprintf(a.banner, "  operator token: %s\n", string(a.token))
	} else {
		fmt.Fprintf(a.banner, "  operator token: in %s/operator-token (or AGENTIC_OPERATOR_TOKEN)\n", a.cfg.DataDir)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	if a.supervisor != nil {
		a.supervisor.Stop() // the agents stay up; the next start adopts them
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var shutWG sync.WaitGroup
	for _, srv := range []*http.Server{agentSrv, restSrv} {
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
