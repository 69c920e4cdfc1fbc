package agentd

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/httpstream"
)

// Injected secrets: the workload's variable holds a placeholder, and its
// client is pointed (by a base-URL variable) at a plain-HTTP endpoint the
// agent serves on loopback. The agent carries each request, signed in as
// itself, to the server (agentrpc's InjectPath), which checks it, puts the
// real value in and sends it to the real host. The agent never holds the
// value.

// maxInjectInFlight bounds the requests the endpoint carries at once; more
// wait for none and get 503 (the server bounds the rate too).
const maxInjectInFlight = 64

// injectEndpoint is the loopback endpoint, started when a command first
// needs it and kept for the agent's life.
type injectEndpoint struct {
	once sync.Once
	addr string
	err  error
	slot chan struct{}
}

// injectURLs returns, for each variable → secret name of endpoints, the URL
// the variable holds: the agent's endpoint with the secret's name as the
// first part of its path.
func (a *Agent) injectURLs(endpoints map[string]string) (map[string]string, error) {
	if len(endpoints) == 0 {
		return nil, nil
	}
	addr, err := a.injectAddr()
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(endpoints))
	for variable, secret := range endpoints {
		out[variable] = "http://" + addr + "/" + url.PathEscape(secret)
	}
	return out, nil
}

// injectAddr starts the endpoint once and returns its address.
func (a *Agent) injectAddr() (string, error) {
	e := &a.inject
	e.once.Do(func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			e.err = fmt.Errorf("the endpoint for injected secrets: %w", err)
			return
		}
		e.addr = ln.Addr().String()
		e.slot = make(chan struct{}, maxInjectInFlight)
		srv := &http.Server{Handler: http.HandlerFunc(a.serveInject), ReadHeaderTimeout: 30 * time.Second}
		go func() { _ = srv.Serve(ln) }()
	})
	return e.addr, e.err
}

// serveInject carries one request of the workload to the server and its
// answer back as it comes.
func (a *Agent) serveInject(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, code, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": code})
	}
	select {
	case a.inject.slot <- struct{}{}:
		defer func() { <-a.inject.slot }()
	default:
		fail(http.StatusServiceUnavailable, "too_many_requests", fmt.Sprintf("the agent carries at most %d requests at once", maxInjectInFlight))
		return
	}
	secret, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	if secret == "" {
		fail(http.StatusNotFound, "not_found", "the path must start with an injected secret's name")
		return
	}
	target := a.serverBase + agentwire.InjectPath + secret + "/" + rest
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	// Only ever the management server: its base and the inject route; the
	// workload chooses the path below it.
	out, err := http.NewRequestWithContext(r.Context(), r.Method, target, r.Body) //nolint:gosec // G704: see above
	if err != nil {
		fail(http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	out.ContentLength = r.ContentLength
	out.Header = r.Header.Clone()
	for _, h := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
		out.Header.Del(h)
	}
	// The workload's own x-agent-* headers are replaced, never passed on.
	a.signIn(out.Header)
	resp, err := a.serverHTTP.Do(out) //nolint:gosec // G704: the management server, as above
	if err != nil {
		fail(http.StatusBadGateway, "server_unreachable", "the management server: "+err.Error())
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	httpstream.Copy(w, resp.Body, nil)
}
