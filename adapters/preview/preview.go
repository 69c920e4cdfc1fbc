// Package preview serves preview URLs: HTTP requests, Server-Sent Events and
// WebSockets carried to a port inside an environment over its agent link
// (ports.PortDialer), in two forms on the REST listener:
//
//   - the host form `<port>-<name>.<domain>[:any port]/…` (every path of such
//     a host is the preview's: a preview host never reaches the API), whose
//     credentials are the operator token as `Authorization: Bearer …` or the
//     `agentic_preview` cookie, valid for that one host, obtained through the
//     dashboard's sign-in (`GET /preview-signin` on the main host, a one-time
//     code, `/.agentic-preview/auth` on the preview host);
//   - the path form `/preview/{name}/{port}/…` on any other host, whose
//     credentials are the bearer token or the dashboard's session cookie, and
//     whose responses are sandboxed (CSP) so that an app's page served on the
//     API's origin cannot act with the operator's cookie.
//
// A port marked public needs no credentials until its mark expires. The
// credentials this package takes are removed before a request goes in.
package preview

import (
	"crypto/sha256"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Config is what New needs.
type Config struct {
	// Dialer opens the connections into environments.
	Dialer ports.PortDialer
	// Public holds the public marks, looked up by the agent id Resolve
	// returns (an environment's name is its agent id); nil: no port is
	// public.
	Public ports.PublicPorts
	// Token is the operator token: the bearer credential and the key of
	// the preview cookie's MAC. "" refuses everything but public ports.
	Token string
	// SignIns are the dashboard's sign-in sessions: a page of the path
	// form, and /preview-signin, take the dashboard's session cookie (nil:
	// no cookie is accepted).
	SignIns *signin.Sessions
	// SessionMayReach tells whether a dashboard session signed in with the
	// token tokenID may reach the previews of agentID: false for an agent
	// out of the token's label scope, which then answers as if absent
	// (nil: every session may).
	SessionMayReach func(tokenID, agentID string) bool
	// Domain is AGENTIC_PREVIEW_DOMAIN ("" means "localhost").
	Domain string
	// KeepHost passes the browser's Host header through; otherwise it is
	// rewritten to "localhost:<port>", which dev servers that check Host
	// (Vite and friends) accept.
	KeepHost bool
	// Resolve maps a name from a URL to an agent id, matching case-
	// insensitively when foldCase (the host form: browsers lowercase host
	// names). Errors: ports.ErrEnvNotFound, or an error saying the name is
	// ambiguous (answered 404 with a hint to use the path form).
	Resolve func(name string, foldCase bool) (agentID string, err error)
	// Clock tells the time (nil: the wall clock).
	Clock ports.Clock
	// Logger logs refusals and failures (nil: none). Tokens, cookie values
	// and codes are never logged.
	Logger *slog.Logger
}

// CookieName is the preview host's credential cookie.
const CookieName = "agentic_preview"

// CookieTTL is how long a preview cookie is valid.
const CookieTTL = time.Hour

// Reserved paths: authPath on a preview host (every path under
// reservedPrefix is this package's, never the app's), signinPath and
// pathPrefix on the main host.
const (
	reservedPrefix = "/.agentic-preview/"
	authPath       = reservedPrefix + "auth"
	signinPath     = "/preview-signin"
	pathPrefix     = "/preview/"
)

// Handler serves previews in front of another handler (Wrap).
type Handler struct {
	cfg       Config
	domain    string // lower case, no dots at either end
	tokenHash [32]byte
	log       *slog.Logger
	clock     ports.Clock
	codes     *codeStore
	proxy     http.Handler
	transport *http.Transport
}

// New returns a Handler for cfg.
func New(cfg Config) *Handler {
	h := &Handler{cfg: cfg, log: cfg.Logger, clock: cfg.Clock}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.clock == nil {
		h.clock = clock.Wall{}
	}
	h.domain = normalDomain(cfg.Domain)
	h.tokenHash = sha256.Sum256([]byte(cfg.Token))
	h.codes = newCodeStore(maxCodes)
	h.proxy, h.transport = h.newProxy()
	return h
}

// Close closes the idle connections the handler keeps into environments.
func (h *Handler) Close() { h.transport.CloseIdleConnections() }

func normalDomain(d string) string {
	d = strings.Trim(strings.ToLower(strings.TrimSpace(d)), ".")
	if d == "" {
		return "localhost"
	}
	return d
}

// Domain is the preview domain the handler serves (lower case).
func (h *Handler) Domain() string { return h.domain }

// Wrap returns next with previews in front: a request whose Host is a
// preview host goes to the preview (every path); /preview/{name}/{port}/…
// and GET /preview-signin on any other host are served here; everything
// else goes to next unchanged.
func (h *Handler) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t, ok := parsePreviewHost(r.Host, h.domain); ok {
			h.serveHost(w, r, t)
			return
		}
		switch {
		case r.URL.Path == signinPath:
			h.serveSignin(w, r)
		case strings.HasPrefix(r.URL.Path, pathPrefix):
			h.servePath(w, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// previewHost is a parsed preview host.
type previewHost struct {
	port     uint16
	name     string // as the host spells it (lower case: browsers fold it)
	host     string // the whole Host header, lower case, with its port if any
	hostPort string // the port of the Host header, "" for none
}

// maxHostLen bounds a Host header this package parses.
const maxHostLen = 300

// parsePreviewHost parses `<port>-<name>.<domain>[:port]`, case-
// insensitively: port 1..65535 without leading zeros, name an environment
// name (`[A-Za-z0-9][A-Za-z0-9._-]*`, dots allowed). A trailing dot of an
// absolute name is accepted.
func parsePreviewHost(hostHeader, domain string) (previewHost, bool) {
	if hostHeader == "" || len(hostHeader) > maxHostLen {
		return previewHost{}, false
	}
	lower := strings.ToLower(hostHeader)
	name, hostPort := lower, ""
	if i := strings.LastIndexByte(lower, ':'); i >= 0 {
		name, hostPort = lower[:i], lower[i+1:]
		if !validListenPort(hostPort) {
			return previewHost{}, false
		}
	}
	name = strings.TrimSuffix(name, ".")
	label, ok := strings.CutSuffix(name, "."+domain)
	if !ok {
		return previewHost{}, false
	}
	portText, envName, ok := strings.Cut(label, "-")
	if !ok {
		return previewHost{}, false
	}
	port, ok := parsePort(portText)
	if !ok || !validName(envName) {
		return previewHost{}, false
	}
	return previewHost{port: port, name: envName, host: lower, hostPort: hostPort}, true
}

// validListenPort is the port of a Host header: digits, 1..65535.
func validListenPort(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	n, err := strconv.Atoi(s)
	return err == nil && n >= 1 && n <= 65535 && strings.TrimLeft(s, "0123456789") == ""
}

// parsePort is a preview port: 1..65535 in decimal, no sign, no leading
// zero.
func parsePort(s string) (uint16, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n < 1 || n > 65535 {
		return 0, false
	}
	return uint16(n), true
}

// maxNameLen bounds an environment name in a URL.
const maxNameLen = 253

// validName is an environment name or agent id:
// ^[A-Za-z0-9][A-Za-z0-9._-]*$.
func validName(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// scheme is the scheme the request came over.
func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// hostPortOf is the port of a Host header ("" for none).
func hostPortOf(host string) string {
	if _, p, err := net.SplitHostPort(host); err == nil {
		return p
	}
	return ""
}

// ErrAmbiguousName may be returned (wrapped) by Config.Resolve for a name
// that matches more than one environment when case is folded.
var ErrAmbiguousName = errors.New("more than one environment has that name when case is ignored")

// resolve asks Config.Resolve on every request (nothing cached: an
// environment deleted and made again is found anew).
func (h *Handler) resolve(name string, fold bool) (string, error) {
	if h.cfg.Resolve == nil {
		return "", ports.ErrEnvNotFound
	}
	return h.cfg.Resolve(name, fold)
}
