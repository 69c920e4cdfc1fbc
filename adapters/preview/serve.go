package preview

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// sandboxCSP is set on every response of the path form: its pages run in an
// opaque origin, so a page of the app, served on the API's origin, reaches
// neither the API with the operator's cookie nor the dashboard's storage.
const sandboxCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// target is where one request goes.
type target struct {
	agentID  string
	name     string // as the URL names it, for messages
	port     uint16
	pathForm bool
	prefix   string // path form: "/preview/{name}/{port}" as sent
	rest     string // path form: the escaped path after prefix ("/…")
	hostname string // host form: the preview host's name (lower case, no port)
}

type targetKey struct{}

// serveHost serves a request to a preview host: every path is the app's,
// but for /.agentic-preview/ (this package's).
func (h *Handler) serveHost(w http.ResponseWriter, r *http.Request, t previewHost) {
	if strings.HasPrefix(r.URL.Path, reservedPrefix) {
		if r.URL.Path == authPath {
			h.serveAuth(w, r, t)
			return
		}
		h.writeProblem(w, r, problem{status: http.StatusNotFound, code: "not_found", title: "Not found", msg: reservedPrefix + " is reserved by agentic-sandbox on preview hosts"})
		return
	}
	authed := h.bearerOK(r) || h.previewCookieOK(r, t.host)
	// Resolved before the credentials decide, for a public port; its
	// outcome is told only to a caller with credentials (or to anyone for a
	// public port), so names cannot be probed without them.
	agentID, err := h.resolve(t.name, true)
	if !authed && err == nil && (h.public(agentID, t.port) || isPreflight(r)) {
		authed = true
	}
	if !authed {
		h.challengeHost(w, r, t)
		return
	}
	if err != nil {
		h.writeResolveError(w, r, t.name, err, true)
		return
	}
	h.forward(w, r, &target{agentID: agentID, name: t.name, port: t.port, hostname: hostOnly(t.host)})
}

// servePath serves /preview/{name}/{port}/… on a host that is not a
// preview host.
func (h *Handler) servePath(w http.ResponseWriter, r *http.Request) {
	parts := strings.SplitN(strings.TrimPrefix(r.URL.EscapedPath(), pathPrefix), "/", 3)
	var name, portText string
	var err1, err2 error
	if len(parts) >= 2 {
		name, err1 = url.PathUnescape(parts[0])
		portText, err2 = url.PathUnescape(parts[1])
	}
	port, portOK := parsePort(portText)
	if len(parts) < 2 || err1 != nil || err2 != nil || !portOK || !validName(name) {
		h.writeProblem(w, r, problem{status: http.StatusNotFound, code: "not_found", title: "Not a preview URL",
			msg: "A preview path is /preview/{environment}/{port}/… with a port 1..65535."})
		return
	}
	prefix := pathPrefix + parts[0] + "/" + parts[1]
	if len(parts) == 2 {
		loc := prefix + "/"
		if r.URL.RawQuery != "" {
			loc += "?" + r.URL.RawQuery
		}
		w.Header().Set("Location", loc)
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			w.WriteHeader(http.StatusMovedPermanently)
		} else {
			w.WriteHeader(http.StatusPermanentRedirect)
		}
		return
	}
	w.Header().Set("Content-Security-Policy", sandboxCSP)
	bearerOK := h.bearerOK(r)
	tokenID, sessionOK := h.sessionOK(r)
	authed := bearerOK || sessionOK
	agentID, err := h.resolve(name, false)
	public := err == nil && h.public(agentID, port)
	if authed && !bearerOK && err == nil && !public && !h.mayReach(tokenID, agentID) {
		// Out of the session token's label scope: as if absent.
		err = fmt.Errorf("%w: %q", ports.ErrEnvNotFound, name)
	}
	if !authed && public {
		authed = true
	}
	if !authed {
		h.challengePath(w, r, name, port)
		return
	}
	if err != nil {
		h.writeResolveError(w, r, name, err, false)
		return
	}
	h.forward(w, r, &target{agentID: agentID, name: name, port: port, pathForm: true, prefix: prefix, rest: "/" + parts[2]})
}

// public reports whether agentID's port is public now.
func (h *Handler) public(agentID string, port uint16) bool {
	if h.cfg.Public == nil {
		return false
	}
	_, ok := h.cfg.Public.PublicUntil(agentID, port, h.clock.Now())
	return ok
}

// isPreflight is a CORS preflight, which browsers send without credentials
// ever; the request it asks about needs them.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != ""
}

// isPageLoad is a browser loading a page: the one kind of request sent to
// sign in rather than refused.
func isPageLoad(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Header.Get("Upgrade") == "" &&
		strings.Contains(r.Header.Get("Accept"), "text/html")
}

// challengeHost answers a request to a preview host without credentials.
func (h *Handler) challengeHost(w http.ResponseWriter, r *http.Request, t previewHost) {
	if isPageLoad(r) {
		next := r.URL.RequestURI()
		if !validNext(next) {
			next = "/"
		}
		main := h.domain
		if t.hostPort != "" {
			main = net.JoinHostPort(main, t.hostPort)
		}
		noStore(w)
		redirect(w, scheme(r)+"://"+main+signinPath+"?"+url.Values{"host": {t.host}, "next": {next}}.Encode())
		return
	}
	h.unauthorized(w, "this preview needs the operator token (Authorization: Bearer …) or its preview cookie (open the preview in a browser signed in to the dashboard)")
}

// challengePath answers a path-form request without credentials: 401,
// with a page for a browser saying where to sign in (the dashboard's
// sign-in returns only to the host form's sign-in, so none is automatic).
func (h *Handler) challengePath(w http.ResponseWriter, r *http.Request, name string, port uint16) {
	msg := "this preview needs the operator token (Authorization: Bearer …) or the dashboard's sign-in"
	if !isPageLoad(r) {
		h.unauthorized(w, msg+"; in a browser, use the preview host "+strconv.Itoa(int(port))+"-"+strings.ToLower(name)+"."+h.domain+" instead")
		return
	}
	hostForm := strconv.Itoa(int(port)) + "-" + strings.ToLower(name) + "." + h.domain
	if p := hostPortOf(r.Host); p != "" {
		hostForm = net.JoinHostPort(hostForm, p)
	}
	hostForm = scheme(r) + "://" + hostForm
	w.Header().Set("WWW-Authenticate", `Bearer realm="agentic-sandbox preview"`)
	h.writeProblem(w, r, problem{status: http.StatusUnauthorized, code: "unauthorized", title: "Sign-in needed",
		msg:  "This preview needs the dashboard's sign-in: sign in at / on this server, then reload this page.",
		hint: "In a browser the preview host " + hostForm + "/ works better: it signs you in by itself, and the app's own requests are signed in too."})
}

// unauthorized is the answer to a request without credentials that is not
// a page load (a program, XHR, an upgrade, a form post): 401 JSON.
func (h *Handler) unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="agentic-sandbox preview"`)
	noStore(w)
	writeJSON(w, http.StatusUnauthorized, "unauthorized", msg)
}

func (h *Handler) writeResolveError(w http.ResponseWriter, r *http.Request, name string, err error, fold bool) {
	p := problem{status: http.StatusNotFound, code: "environment_not_found", title: "No such environment",
		msg: fmt.Sprintf("There is no environment or agent named %q.", name)}
	switch {
	case errors.Is(err, ports.ErrEnvNotFound):
		if fold {
			p.hint = "Names in a preview host are matched ignoring case."
		}
	default:
		p.msg = fmt.Sprintf("The name %q does not name one environment: %v.", name, err)
		p.hint = "Use the path form /preview/{environment}/{port}/, which matches the name exactly."
	}
	h.writeProblem(w, r, p)
}

func (h *Handler) forward(w http.ResponseWriter, r *http.Request, t *target) {
	// The listener's read timeout bounds API requests; a preview's body
	// (an upload to the app) may take longer, and the connection into the
	// environment has its own idle bound.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	h.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, t)))
}

func targetOf(ctx context.Context) *target {
	t, _ := ctx.Value(targetKey{}).(*target)
	return t
}

// Outbound URLs name the target as `<hex agent id>.agentic-preview:<port>`,
// so the transport keeps its idle connections per agent and port.
const dialSuffix = ".agentic-preview"

func dialHost(agentID string, port uint16) string {
	return net.JoinHostPort(hex.EncodeToString([]byte(agentID))+dialSuffix, strconv.Itoa(int(port)))
}

func parseDialHost(addr string) (string, uint16, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	id, err := hex.DecodeString(strings.TrimSuffix(host, dialSuffix))
	port, ok := parsePort(portText)
	if err != nil || !ok || !strings.HasSuffix(host, dialSuffix) {
		return "", 0, fmt.Errorf("preview: not a preview target: %q", addr)
	}
	return string(id), port, nil
}

// Transport bounds: idle connections into an environment count against its
// forwards, so few are kept and not for long.
const (
	maxIdlePerTarget   = 4
	idleTimeout        = 30 * time.Second
	maxResponseHeaders = 1 << 20
	dialTimeout        = 30 * time.Second
)

func (h *Handler) newProxy() (http.Handler, *http.Transport) {
	tr := &http.Transport{
		Proxy: nil, // never HTTP_PROXY: the target is inside the environment
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			agentID, port, err := parseDialHost(addr)
			if err != nil {
				return nil, err
			}
			if h.cfg.Dialer == nil {
				return nil, ports.ErrAgentNotConnected
			}
			ctx, cancel := context.WithTimeout(ctx, dialTimeout)
			defer cancel()
			c, err := h.cfg.Dialer.DialPort(ctx, agentID, port)
			if err != nil {
				return nil, err
			}
			return asNetConn(c), nil
		},
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    maxIdlePerTarget,
		IdleConnTimeout:        idleTimeout,
		MaxResponseHeaderBytes: maxResponseHeaders,
		DisableCompression:     true, // bodies pass as the app encodes them
		ExpectContinueTimeout:  time.Second,
		ReadBufferSize:         32 << 10,
		WriteBufferSize:        32 << 10,
	}
	rp := &httputil.ReverseProxy{
		Rewrite:        h.rewrite,
		Transport:      tr,
		FlushInterval:  -1, // every read from the app is written on at once
		ErrorHandler:   h.proxyError,
		ModifyResponse: h.modifyResponse,
		BufferPool:     &bufferPool{},
		ErrorLog:       slog.NewLogLogger(h.log.Handler(), slog.LevelDebug),
	}
	return rp, tr
}

func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	t := targetOf(pr.In.Context())
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = dialHost(t.agentID, t.port)
	pr.Out.Header.Del("Forwarded")
	pr.Out.Header.Del("X-Forwarded-Prefix")
	if t.pathForm {
		p, err := url.PathUnescape(t.rest)
		if err != nil { // servePath split an already escaped path; cannot fail
			p = t.rest
		}
		pr.Out.URL.Path, pr.Out.URL.RawPath = p, t.rest
		pr.Out.Header.Set("X-Forwarded-Prefix", t.prefix)
	}
	pr.SetXForwarded()
	if h.cfg.KeepHost {
		pr.Out.Host = pr.In.Host
	} else {
		pr.Out.Host = "localhost:" + strconv.Itoa(int(t.port))
	}
	h.stripCredentials(pr.Out.Header)
}

// modifyResponse keeps an app's cookies on its own preview host: a
// Set-Cookie with a Domain other than the host (which would reach the
// dashboard or other previews), or named like this server's cookies, is
// dropped; in the path form, where the app shares the API's origin, every
// Set-Cookie is.
func (h *Handler) modifyResponse(resp *http.Response) error {
	t := targetOf(resp.Request.Context())
	lines := resp.Header.Values("Set-Cookie")
	if len(lines) == 0 {
		return nil
	}
	if t.pathForm {
		resp.Header.Del("Set-Cookie")
		return nil
	}
	var kept []string
	for _, line := range lines {
		c, err := http.ParseSetCookie(line)
		if err != nil || c.Name == CookieName || c.Name == signin.CookieName {
			continue
		}
		if c.Domain != "" && !strings.EqualFold(strings.TrimPrefix(c.Domain, "."), t.hostname) {
			continue
		}
		kept = append(kept, line)
	}
	setOrDelete(resp.Header, "Set-Cookie", kept)
	return nil
}

func hostOnly(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		return strings.TrimSuffix(host[:i], ".")
	}
	return strings.TrimSuffix(host, ".")
}

// proxyError answers a request the proxy could not carry.
func (h *Handler) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	t := targetOf(r.Context())
	if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
		return // the client went away; nobody reads an answer
	}
	where := fmt.Sprintf("port %d in %s", t.port, t.name)
	p := problem{status: http.StatusBadGateway, code: "bad_gateway", title: "The app did not answer",
		msg:  fmt.Sprintf("The connection to %s failed: %v.", where, err),
		hint: "Check the server's log inside the environment."}
	switch {
	case errors.Is(err, ports.ErrPortNotListening):
		p = problem{status: http.StatusBadGateway, code: "port_not_listening", title: "Nothing listens on port " + strconv.Itoa(int(t.port)),
			msg:  fmt.Sprintf("Nothing listens on port %d in %s.", t.port, t.name),
			hint: "Start your server there, listening on 127.0.0.1 or 0.0.0.0 (or ::), then reload."}
	case errors.Is(err, ports.ErrAgentNotConnected):
		p = problem{status: http.StatusServiceUnavailable, code: "agent_not_connected", title: "The environment is not connected",
			msg:  fmt.Sprintf("The agent of %s is not connected, so port %d cannot be reached.", t.name, t.port),
			hint: "Wait for the environment to be ready (or wake it), then reload."}
	case errors.Is(err, ports.ErrTooManyForwards):
		p = problem{status: http.StatusServiceUnavailable, code: "too_many_forwards", title: "Too many connections",
			msg:  fmt.Sprintf("%s holds as many forwarded connections as it may.", t.name),
			hint: "Close other previews or port-forwards of this environment, or retry shortly."}
	case errors.Is(err, ports.ErrPortRefused):
		p = problem{status: http.StatusForbidden, code: "port_refused", title: "Port refused",
			msg: fmt.Sprintf("Port %d of %s may not be reached through the agent.", t.port, t.name)}
	case errors.Is(err, context.DeadlineExceeded):
		p.status, p.code, p.title = http.StatusGatewayTimeout, "gateway_timeout", "The connection timed out"
		p.msg = fmt.Sprintf("Connecting to %s timed out.", where)
	}
	h.log.Info("preview: request not carried", "agent", t.agentID, "port", t.port, "status", p.status, "err", err)
	h.writeProblem(w, r, p)
}

// bufferPool recycles the proxy's copy buffers.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	// Large: a body moves in fewer reads and writes (a syscall each);
	// measured in docs/benchmarks.md (Previews).
	return make([]byte, 256<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// asNetConn gives a connection into an environment the net.Conn the HTTP
// transport wants (the agent link's already is one).
func asNetConn(c ports.Conn) net.Conn {
	if nc, ok := c.(net.Conn); ok {
		return nc
	}
	return linkConn{c}
}

type linkConn struct{ ports.Conn }

func (linkConn) LocalAddr() net.Addr  { return linkAddr{} }
func (linkConn) RemoteAddr() net.Addr { return linkAddr{} }

type linkAddr struct{}

func (linkAddr) Network() string { return "agent-link" }
func (linkAddr) String() string  { return "agent-link" }
