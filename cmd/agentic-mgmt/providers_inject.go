package main

import (
	"log/slog"
	"net/http"
	"os"
	"path/filepath"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/injectproxy"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
)

// provideInjection is the server's end of injected secrets: the registry
// the task and environment use cases keep the values in, and the proxy the
// agents' requests reach on the agent link's inject route. An
// environment's name is its agent's id, which keys the registry. The real
// hosts are verified against the system's roots (SSL_CERT_FILE honoured);
// AGENTIC_TEST_RESOLVE pins names as it does for egress.
func provideInjection(cfg Config, svc *agentrpc.Service, log *slog.Logger) (*inject.Registry, func()) {
	reg := inject.NewRegistry(cfg.ModelPrices)
	proxy := injectproxy.New(injectproxy.Config{Registry: reg, Pinned: cfg.TestResolve, Logger: log})
	svc.SetInject(func(w http.ResponseWriter, r *http.Request, agentID, secret, path string) {
		proxy.Serve(w, r, agentID, secret, path)
	})
	return reg, proxy.Close
}

// secretSource reads task and environment secrets alike: the server's
// variables, and files under <data dir>/task-secrets.
func secretSource(dir DataDir) filestore.TaskSecrets {
	return filestore.TaskSecrets{Dir: filepath.Join(string(dir), "task-secrets"), Getenv: os.LookupEnv}
}
