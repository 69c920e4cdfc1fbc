package main

import (
	"log/slog"
	"net/http"
	"path/filepath"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/wsterm"
	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/core/wakeful"
	"github.com/agentic-sandbox/agentic-sandbox/internal/credential"
	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// WSHandler is the client WebSocket port's handler.
type WSHandler http.Handler

func provideSessionLog(dir DataDir) (*filestore.SessionLog, func(), error) {
	l, err := filestore.NewSessionLog(filepath.Join(string(dir), "sessions"), filestore.SessionLogOptions{})
	if err != nil {
		return nil, nil, err
	}
	return l, func() { _ = l.Close() }, nil
}

func provideSessions(cfg Config, svc *agentrpc.Service, logs *filestore.SessionLog, clock ports.Clock, ids ports.IDGenerator, log *slog.Logger, ch ports.ChangeNotifier, w Wakeful) *session.Service {
	return session.New(session.Config{Link: w.Sessions, Agents: svc, Log: logs, Clock: clock, IDs: ids, Logger: log, Retention: cfg.SessionRetention, Changes: ch})
}

// provideTokenWatch closes what a named token opened (client WebSockets,
// REST event streams, its dashboard sessions' too) when it is revoked.
func provideTokenWatch() *credential.Watchers { return credential.NewWatchers() }

func provideWS(cfg Config, op OperatorHTTP, ss *wakeful.Sessions, svc *agentrpc.Service, logs *filestore.SessionLog, ids ports.IDGenerator, log *slog.Logger, signIns *signin.Sessions,
	tokens *filestore.Tokens, watch *credential.Watchers, uc UseCases) WSHandler {
	return wsterm.New(wsterm.Config{Sessions: ss, Agents: svc, Log: logs, IDs: ids, Token: op.Token, Version: op.Version, Logger: log, StallTimeout: cfg.ViewerStallTimeout, Origins: op.Origins, SignIns: signIns,
		Tokens: tokens, Watch: watch, Audit: uc.Audit,
		EnvironmentLabels: func(name string) (map[string]string, bool) {
			e, ok := uc.Environments.Get(name)
			return e.Labels, ok
		}}).Handler()
}
