package agentrpc

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// rawTunnelAnswer is the server's answer to a raw tunnel's upgrade.
type rawTunnelAnswer struct {
	status  int
	refused string // HeaderTunnelRefused
	body    string
	conn    net.Conn      // after a 101: the tunnel
	r       *bufio.Reader // reads the tunnel (what came with the 101 first)
}

// rawTunnel asks the server for a tunnel to `to` as an agent does, with
// the given headers (nil values are left out); extra goes on the wire
// right behind the request, before any answer.
func (h *harness) rawTunnel(hdr map[string]string, extra string) rawTunnelAnswer {
	h.t.Helper()
	var header []string
	for k, v := range hdr {
		header = append(header, k, v)
	}
	c, br, resp := h.rawGet(TunnelRawPath, header, extra)
	a := rawTunnelAnswer{status: resp.StatusCode, refused: resp.Header.Get(HeaderTunnelRefused)}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		a.conn, a.r = c, br
		return a
	}
	b, _ := io.ReadAll(resp.Body)
	a.body = string(b)
	_ = c.Close()
	return a
}

// agentHeaders signs a raw tunnel to `to` in as id.
func agentHeaders(id, secret, to string) map[string]string {
	return map[string]string{
		HeaderAgentID: id, HeaderAgentSecret: secret, HeaderTunnelTo: to,
		"Connection": "Upgrade", "Upgrade": TunnelRawProtocol,
	}
}

type recorded struct {
	mu      sync.Mutex
	records []EgressRecord
	active  map[string]int
}

func (r *recorded) egress(policy policyOf) Egress {
	r.active = map[string]int{}
	return Egress{
		Policy: policy,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			switch host {
			case "allowed.test", "sneaky.test":
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return nil, errors.New("no such host")
		},
		Observe: func(rec EgressRecord) { r.mu.Lock(); r.records = append(r.records, rec); r.mu.Unlock() },
		Active:  func(id string) { r.mu.Lock(); r.active[id]++; r.mu.Unlock() },
	}
}

func (r *recorded) n() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.records) }

func (r *recorded) last() EgressRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.records[len(r.records)-1]
}

// The raw path answers to the same policy as the Tunnel stream: the agent
// signs in, its environment must have egress, and it reaches only what its
// rules allow; every refusal is recorded as a stream's is.
func TestRawTunnelsReachOnlyWhatTheEnvironmentAllows(t *testing.T) {
	port, _ := echoServer(t)
	closed := closedPort(t)
	to := func(host string, p int) string { return net.JoinHostPort(host, strconv.Itoa(p)) }

	// A server without egress refuses every tunnel, as denied.
	if a := newHarness(t).rawTunnel(agentHeaders("agent-a", secretPrefix+"agent-a", to("127.0.0.1", port)), ""); a.status != http.StatusForbidden || a.refused != "denied" || !strings.Contains(a.body, "no egress") {
		t.Fatalf("without egress: %+v", a)
	}
	var rec recorded
	h := newHarness(t, func(c *Config) {
		c.Egress = rec.egress(policyOf{"agent-a": {"allowed.test:" + strconv.Itoa(port), "127.0.0.1:" + strconv.Itoa(port), "127.0.0.1:" + strconv.Itoa(closed)}})
	})
	for _, c := range []struct {
		name    string
		hdr     map[string]string
		status  int
		refused string
		body    string
	}{
		{"a wrong secret", agentHeaders("agent-a", "wrong", to("127.0.0.1", port)), http.StatusUnauthorized, "", "unknown agent or wrong secret"},
		{"no secret", agentHeaders("agent-a", "", to("127.0.0.1", port)), http.StatusUnauthorized, "", "unknown agent or wrong secret"},
		{"an unknown agent", agentHeaders("agent-zz", secretPrefix+"agent-zz", to("127.0.0.1", port)), http.StatusUnauthorized, "", "unknown agent or wrong secret"},
		{"another agent's secret", agentHeaders("agent-b", secretPrefix+"agent-a", to("127.0.0.1", port)), http.StatusUnauthorized, "", "unknown agent or wrong secret"},
		{"no upgrade", map[string]string{HeaderAgentID: "agent-a", HeaderAgentSecret: secretPrefix + "agent-a", HeaderTunnelTo: to("127.0.0.1", port)}, http.StatusUpgradeRequired, "", "upgrade"},
		{"no destination", agentHeaders("agent-a", secretPrefix+"agent-a", ""), http.StatusBadRequest, "", "host and a port"},
		{"no port", agentHeaders("agent-a", secretPrefix+"agent-a", "allowed.test"), http.StatusBadRequest, "", "host and a port"},
		{"port 0", agentHeaders("agent-a", secretPrefix+"agent-a", "allowed.test:0"), http.StatusBadRequest, "", "host and a port"},
		{"port 65536", agentHeaders("agent-a", secretPrefix+"agent-a", "allowed.test:65536"), http.StatusBadRequest, "", "host and a port"},
		{"a host too long", agentHeaders("agent-a", secretPrefix+"agent-a", to(strings.Repeat("a", 256), port)), http.StatusBadRequest, "", "host and a port"},
		{"an agent whose environment is not proxy", agentHeaders("agent-b", secretPrefix+"agent-b", to("127.0.0.1", port)), http.StatusForbidden, "denied", "network mode is not proxy"},
		{"a name not listed", agentHeaders("agent-a", secretPrefix+"agent-a", to("sneaky.test", port)), http.StatusForbidden, "denied", "matches no allowed host"},
		{"a listed name on another port", agentHeaders("agent-a", secretPrefix+"agent-a", to("allowed.test", port+1)), http.StatusForbidden, "denied", "matches no allowed host"},
		{"a raw IP not listed", agentHeaders("agent-a", secretPrefix+"agent-a", to("127.0.0.2", port)), http.StatusForbidden, "denied", "no rule names"},
		{"an IPv6 loopback not listed", agentHeaders("agent-a", secretPrefix+"agent-a", to("::1", port)), http.StatusForbidden, "denied", "no rule names"},
		{"an allowed destination that is not listening", agentHeaders("agent-a", secretPrefix+"agent-a", to("127.0.0.1", closed)), http.StatusBadGateway, "failed", "refused"},
	} {
		a := h.rawTunnel(c.hdr, "")
		if a.status != c.status || a.refused != c.refused || !strings.Contains(a.body, c.body) {
			t.Errorf("%s: %d %q %q, want %d %q %q", c.name, a.status, a.refused, a.body, c.status, c.refused, c.body)
		}
	}
	// Refused by the policy or the destination: recorded (not the requests
	// that named no agent or no destination), each as its handler returns,
	// which may be just after its answer was read.
	eventually(t, "the 6 tunnels refused by the policy or the destination recorded", func() bool { return rec.n() == 6 })
	rec.mu.Lock()
	for _, r := range rec.records {
		if r.Allowed || r.BytesUp != 0 || r.BytesDown != 0 || r.Reason == "" {
			t.Errorf("a refused tunnel's record: %+v", r)
		}
	}
	if len(rec.active) != 0 {
		t.Errorf("refused tunnels heard of as traffic: %v", rec.active)
	}
	rec.mu.Unlock()

	// An allowed name: bytes both ways, the agent's end of writes, then
	// the destination's. The first bytes come right behind the request,
	// before the agent has read the answer.
	a := h.rawTunnel(agentHeaders("agent-a", secretPrefix+"agent-a", to("allowed.test", port)), "hello ")
	if a.status != http.StatusSwitchingProtocols {
		t.Fatalf("allowed: %+v", a)
	}
	if _, err := io.WriteString(a.conn, "tunnel"); err != nil {
		t.Fatal(err)
	}
	_ = a.conn.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(a.r)
	if err != nil || string(got) != "HELLO TUNNEL" {
		t.Fatalf("through the tunnel: %q %v", got, err)
	}
	_ = a.conn.Close()
	eventually(t, "the tunnel recorded", func() bool { return rec.n() == 7 })
	last := rec.last()
	if !last.Allowed || last.BytesUp != 12 || last.BytesDown != 12 || last.Host != "allowed.test" || last.Port != port || last.Reason != "allowed.test:"+strconv.Itoa(port) {
		t.Fatalf("the allowed tunnel's record: %+v", last)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if n := rec.active["agent-a"]; n < 1 || len(rec.active) != 1 {
		t.Fatalf("traffic heard of: %v", rec.active)
	}
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	return p
}

// Raw tunnels and Tunnel streams share an environment's MaxTunnels.
func TestRawTunnelsCountAgainstTheSameBound(t *testing.T) {
	port, _ := echoServer(t) // holds each connection until its client's end
	dst := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	h := newHarness(t, func(c *Config) {
		c.Egress = Egress{Policy: policyOf{"agent-a": {dst}}, MaxTunnels: 3}
	})
	var raws []rawTunnelAnswer
	for range 2 {
		a := h.rawTunnel(agentHeaders("agent-a", secretPrefix+"agent-a", dst), "")
		if a.status != http.StatusSwitchingProtocols {
			t.Fatalf("raw tunnel %d: %+v", len(raws)+1, a)
		}
		raws = append(raws, a)
	}
	if _, opened, err := h.tunnel("agent-a", secretPrefix+"agent-a", "127.0.0.1", port); err != nil || !opened.GetAllowed() {
		t.Fatalf("a stream beside them: %v %v", opened, err)
	}
	if a := h.rawTunnel(agentHeaders("agent-a", secretPrefix+"agent-a", dst), ""); a.status != http.StatusTooManyRequests || !strings.Contains(a.body, "3 tunnels open") {
		t.Fatalf("a fourth tunnel: %+v", a)
	}
	// One ends (the agent's end, then the destination's): a place again.
	_ = raws[0].conn.(*net.TCPConn).CloseWrite()
	_, _ = io.ReadAll(raws[0].r)
	eventually(t, "a place freed", func() bool {
		a := h.rawTunnel(agentHeaders("agent-a", secretPrefix+"agent-a", dst), "")
		if a.status == http.StatusSwitchingProtocols {
			_ = a.conn.Close()
			return true
		}
		return false
	})
}

// Each side's end of writes reaches the other while the other keeps
// sending: the destination speaks first and ends, the agent then sends and
// ends, and every byte is counted.
func TestARawTunnelHalfClosesBothWays(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	heard := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "banner")
		_ = c.(*net.TCPConn).CloseWrite()
		b, _ := io.ReadAll(c) // the agent's bytes after our end
		heard <- string(b)
	}()
	dst := ln.Addr().String()
	var rec recorded
	h := newHarness(t, func(c *Config) { c.Egress = rec.egress(policyOf{"agent-a": {dst}}) })
	a := h.rawTunnel(agentHeaders("agent-a", secretPrefix+"agent-a", dst), "")
	if a.status != http.StatusSwitchingProtocols {
		t.Fatalf("allowed: %+v", a)
	}
	got, err := io.ReadAll(a.r) // to the destination's end
	if err != nil || string(got) != "banner" {
		t.Fatalf("from the destination: %q %v", got, err)
	}
	if _, err := io.WriteString(a.conn, "still here"); err != nil {
		t.Fatalf("writing after the destination's end: %v", err)
	}
	_ = a.conn.(*net.TCPConn).CloseWrite()
	if s := testkit.Receive(t, waitTimeout, heard, "the destination hears the agent's bytes and end"); s != "still here" {
		t.Fatalf("the destination heard %q", s)
	}
	eventually(t, "the tunnel recorded", func() bool { return rec.n() == 1 })
	if r := rec.last(); !r.Allowed || r.BytesUp != 10 || r.BytesDown != 6 || r.Reason != dst {
		t.Fatalf("record: %+v", r)
	}
}

// A tunnel whose agent connection is cut (reset, not ended) ends at once:
// the destination's connection is closed and the record says why.
func TestACutRawTunnelEndsWithAnErrorRecord(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 1)
	ended := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 5)
		_, _ = io.ReadFull(c, b)
		got <- string(b)
		_, err = c.Read(make([]byte, 1)) // until the tunnel ends
		ended <- err
	}()
	dst := ln.Addr().String()
	var rec recorded
	h := newHarness(t, func(c *Config) { c.Egress = rec.egress(policyOf{"agent-a": {dst}}) })
	a := h.rawTunnel(agentHeaders("agent-a", secretPrefix+"agent-a", dst), "")
	if a.status != http.StatusSwitchingProtocols {
		t.Fatalf("allowed: %+v", a)
	}
	if _, err := io.WriteString(a.conn, "hello"); err != nil {
		t.Fatal(err)
	}
	if s := testkit.Receive(t, waitTimeout, got, "the first bytes at the destination"); s != "hello" {
		t.Fatalf("the destination got %q", s)
	}
	_ = a.conn.(*net.TCPConn).SetLinger(0) // close = RST
	_ = a.conn.Close()
	if err := testkit.Receive(t, waitTimeout, ended, "the destination's connection closed"); err == nil {
		t.Fatal("the destination read bytes nobody sent")
	}
	eventually(t, "the tunnel recorded", func() bool { return rec.n() == 1 })
	if r := rec.last(); !r.Allowed || r.BytesUp != 5 || !strings.HasPrefix(r.Reason, dst+"; ") || !strings.Contains(r.Reason, "reset") {
		t.Fatalf("record: %+v", r)
	}
}

// The destination cut (reset) mid-tunnel: the agent's connection ends and
// the record says why.
func TestARawTunnelWhoseDestinationIsCutEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = io.WriteString(c, "partial")
		b := make([]byte, 1)
		_, _ = c.Read(b) // the agent's go-ahead
		_ = c.(*net.TCPConn).SetLinger(0)
		_ = c.Close()
	}()
	dst := ln.Addr().String()
	var rec recorded
	h := newHarness(t, func(c *Config) { c.Egress = rec.egress(policyOf{"agent-a": {dst}}) })
	a := h.rawTunnel(agentHeaders("agent-a", secretPrefix+"agent-a", dst), "")
	if a.status != http.StatusSwitchingProtocols {
		t.Fatalf("allowed: %+v", a)
	}
	b := make([]byte, 7)
	if _, err := io.ReadFull(a.r, b); err != nil || string(b) != "partial" {
		t.Fatalf("from the destination: %q %v", b, err)
	}
	_, _ = io.WriteString(a.conn, "x")
	_ = a.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadAll(a.r); errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		t.Fatalf("the agent's connection outlived its destination: %v", err)
	}
	eventually(t, "the tunnel recorded", func() bool { return rec.n() == 1 })
	if r := rec.last(); !r.Allowed || r.BytesDown != 7 || r.BytesUp != 1 || !strings.HasPrefix(r.Reason, dst+"; ") {
		t.Fatalf("record: %+v", r)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Off loopback the agent port is TLS: a raw tunnel is the same upgrade
// inside it (no splice there, the bytes are decrypted), ends of writes
// included.
func TestARawTunnelOverTLS(t *testing.T) {
	port, _ := echoServer(t)
	dst := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var rec recorded
	h := newHarness(t, func(c *Config) { c.Egress = rec.egress(policyOf{"agent-a": {dst}}) })
	mux := http.NewServeMux()
	h.svc.Mount(mux, false)
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "example.com", NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	var req strings.Builder
	req.WriteString("GET " + TunnelRawPath + " HTTP/1.1\r\nHost: agentic-sandbox\r\n")
	for k, v := range agentHeaders("agent-a", secretPrefix+"agent-a", dst) {
		req.WriteString(k + ": " + v + "\r\n")
	}
	req.WriteString("\r\n")
	if _, err := io.WriteString(c, req.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("the upgrade over TLS: %v %v", resp, err)
	}
	if _, err := io.WriteString(c, "over tls"); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(br); err != nil || string(got) != "OVER TLS" {
		t.Fatalf("through the tunnel: %q %v", got, err)
	}
	eventually(t, "the tunnel recorded", func() bool { return rec.n() == 1 })
	if r := rec.last(); !r.Allowed || r.BytesUp != 8 || r.BytesDown != 8 || r.Reason != dst {
		t.Fatalf("record: %+v", r)
	}
}
