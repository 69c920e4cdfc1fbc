// Package injectproxy is the server's end of injected secrets: a request
// a workload sent to its agent's local endpoint arrives here (the agent
// link's adapter has already said which environment it comes from); the
// rules of core/inject decide whether it may go; the real value goes into
// its header; the server opens TLS to the real host itself and streams the
// answer back, reading the model usage as it passes.
package injectproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/internal/httpstream"
)

// Defaults of Config's bounds.
const (
	// DefaultMaxRequestBytes is the largest request body taken (the
	// Anthropic API's own bound is 32 MB); more is 413.
	DefaultMaxRequestBytes = 32 << 20
	// maxUsageBody is how much of a JSON answer is kept to read its usage.
	maxUsageBody = 8 << 20
)

// Config is what the proxy needs.
type Config struct {
	Registry *inject.Registry
	// Pinned are names resolved to fixed addresses (AGENTIC_TEST_RESOLVE):
	// they may be internal addresses, as the operator said so.
	Pinned map[string]netip.Addr
	// Resolve resolves other names (nil: the system resolver); an internal
	// address in the answer refuses the name, as for egress.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// RootCAs verify the real hosts (nil: the system's roots, which honour
	// SSL_CERT_FILE and SSL_CERT_DIR).
	RootCAs         *x509.CertPool
	MaxRequestBytes int64
	Now             func() time.Time
	Logger          *slog.Logger
	// Observe, if set, is told of every request after it ends.
	Observe func(Record)
}

// Record is one request through the proxy, for logs and metrics: never a
// value, a placeholder or a body.
type Record struct {
	Env, Secret, Host, Method, Path string
	Status                          int
	Code                            string // a refusal's code, or upstream_failed
	BytesUp, BytesDown              int64
	Duration                        time.Duration
	Usage                           *inject.Response
}

// Proxy serves injected requests.
type Proxy struct {
	cfg       Config
	transport *http.Transport
}

// New returns a proxy; its transport keeps connections to the real hosts
// open between requests.
func New(cfg Config) *Proxy {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Resolve == nil {
		cfg.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	p := &Proxy{cfg: cfg}
	p.transport = &http.Transport{
		DialContext:         p.dial,
		TLSClientConfig:     &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 15 * time.Second,
	}
	return p
}

// Close drops the kept connections.
func (p *Proxy) Close() { p.transport.CloseIdleConnections() }

// dial reaches a secret's host: a pinned name's address, or a resolved
// public one (an internal answer refuses the name, as egress does).
func (p *Proxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port16, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, err
	}
	port := int(port16)
	var target netip.AddrPort
	if a, ok := p.cfg.Pinned[strings.ToLower(host)]; ok {
		target = netip.AddrPortFrom(a, uint16(port16))
	} else {
		d := egress.Decide([]egress.Rule{{Host: strings.ToLower(host), Port: port}}, host, port, func(h string) ([]netip.Addr, error) {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return p.cfg.Resolve(rctx, h)
		})
		if !d.Allowed {
			return nil, errors.New(d.Reason)
		}
		target = d.Addr
	}
	return (&net.Dialer{Timeout: 15 * time.Second}).DialContext(ctx, network, target.String())
}

// hopHeaders are the connection's own, never passed on (RFC 9110 7.6.1),
// and what would tell the real host about the inside.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Forwarded", "X-Forwarded-For",
	"X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip",
	// The agent's credentials, which carried the request to the server.
	"X-Agent-Id", "X-Agent-Secret",
}

func dropHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// Serve sends r, which env's workload sent for the secret named secret,
// to the secret's host at path (escaped, starting with /) and r's query.
func (p *Proxy) Serve(w http.ResponseWriter, r *http.Request, env, secret, path string) {
	start := p.cfg.Now()
	rec := Record{Env: env, Secret: secret, Method: r.Method, Path: inject.Redact(path)}
	defer func() {
		rec.Duration = p.cfg.Now().Sub(start)
		p.cfg.Logger.Info("injected request", "environment", rec.Env, "secret", rec.Secret, "host", rec.Host,
			"method", rec.Method, "path", rec.Path, "status", rec.Status, "code", rec.Code,
			"bytes_up", rec.BytesUp, "bytes_down", rec.BytesDown, "duration", rec.Duration)
		if p.cfg.Observe != nil {
			p.cfg.Observe(rec)
		}
	}()
	fail := func(status int, code, msg string) {
		rec.Status, rec.Code = status, code
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": code})
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, p.cfg.MaxRequestBytes+1))
	if err != nil {
		fail(http.StatusBadRequest, "bad_request", "reading the request body: "+err.Error())
		return
	}
	if int64(len(body)) > p.cfg.MaxRequestBytes {
		fail(http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("a request body through an injected secret may hold at most %d bytes", p.cfg.MaxRequestBytes))
		return
	}
	rec.BytesUp = int64(len(body))
	ok, ref := p.cfg.Registry.Authorize(env, secret, inject.Request{Path: path, RawQuery: r.URL.RawQuery, Header: r.Header, Body: body}, p.cfg.Now())
	if ref != nil {
		status := http.StatusForbidden
		if ref.Code == inject.CodeBudget || ref.Code == inject.CodeRate {
			status = http.StatusTooManyRequests
		}
		fail(status, ref.Code, ref.Reason)
		return
	}
	rec.Host = ok.Spec.Host
	target := "https://" + ok.Spec.Address() + path
	if ok.Spec.Port == 443 {
		target = "https://" + ok.Spec.Host + path
	}
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	// The host is the secret's own (set by the operator); the workload
	// chooses only the path and query, and dial checks the address.
	out, err := http.NewRequestWithContext(r.Context(), r.Method, target, bytes.NewReader(body)) //nolint:gosec // G704: see above

	if err != nil {
		fail(http.StatusBadRequest, "bad_request", "the request cannot be sent: "+err.Error())
		return
	}
	out.Header = r.Header.Clone()
	dropHop(out.Header)
	// The transport asks for gzip itself and unpacks it, so that the usage
	// of an answer can be read.
	out.Header.Del("Accept-Encoding")
	out.Header.Set(ok.Spec.Header, ok.HeaderValue)
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		p.cfg.Registry.CountRequest(env)
		fail(http.StatusBadGateway, "upstream_failed", fmt.Sprintf("%s: %v", ok.Spec.Host, scrub(err, ok.HeaderValue)))
		return
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	dropHop(resp.Header)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	usage := newUsageReader(resp)
	rec.BytesDown = httpstream.Copy(w, resp.Body, usage)
	p.cfg.Registry.AddBytes(env, rec.BytesUp, rec.BytesDown)
	if u, seen := usage.result(); seen {
		rec.Usage = &u
		p.cfg.Registry.Record(env, u)
	} else {
		p.cfg.Registry.CountRequest(env)
	}
}

// scrub keeps the value out of an error's text (it never should be in one;
// this makes sure).
func scrub(err error, value string) string {
	s := err.Error()
	if value != "" {
		s = strings.ReplaceAll(s, value, "[redacted]")
	}
	return s
}

// usageReader reads the usage of an answer as it passes: a stream's events,
// or a JSON body kept up to a bound.
type usageReader struct {
	sse  *inject.SSEMeter
	json *bytes.Buffer
	over bool
}

func newUsageReader(resp *http.Response) *usageReader {
	ct := strings.ToLower(resp.Header.Get("Content-Type"))
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		return &usageReader{sse: &inject.SSEMeter{}}
	case strings.HasPrefix(ct, "application/json"):
		return &usageReader{json: &bytes.Buffer{}}
	}
	return &usageReader{}
}

func (u *usageReader) Write(p []byte) (int, error) {
	switch {
	case u.sse != nil:
		return u.sse.Write(p)
	case u.json != nil && !u.over:
		if u.json.Len()+len(p) > maxUsageBody {
			u.over, u.json = true, nil
			return len(p), nil
		}
		u.json.Write(p)
	}
	return len(p), nil
}

func (u *usageReader) result() (inject.Response, bool) {
	switch {
	case u.sse != nil:
		return u.sse.Response()
	case u.json != nil:
		return inject.FromJSON(u.json.Bytes())
	}
	return inject.Response{}, false
}
