package main

import (
	"log/slog"
	"net/http"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/injectproxy"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
)

// newInjection is the server's end of injected secrets: the registry the
// task use case keeps the values in, and the proxy the agents' requests
// reach on the agent link's inject route. An environment's name is its
// agent's id, which keys the registry. The real hosts are verified against
// the system's roots (SSL_CERT_FILE honoured); AGENTIC_TEST_RESOLVE pins
// names as it does for egress.
func newInjection(cfg Config, svc *agentrpc.Service, log *slog.Logger) (*inject.Registry, func()) {
	reg := inject.NewRegistry(cfg.ModelPrices)
	proxy := injectproxy.New(injectproxy.Config{Registry: reg, Pinned: cfg.TestResolve, Logger: log})
	svc.SetInject(func(w http.ResponseWriter, r *http.Request, agentID, secret, path string) {
		proxy.Serve(w, r, agentID, secret, path)
	})
	return reg, proxy.Close
}
