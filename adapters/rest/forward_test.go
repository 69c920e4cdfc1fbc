package rest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// forwardEnv is a REST server with environments "dev" (agent dev, whose
// port 5173 reaches a real TCP echo server) and "booting" (no agent yet).
type forwardEnv struct {
	*env
	envs     *fakeEnvironments
	forwards *resttest.Forwards
	echo     *resttest.EchoServer
}

func newForwardEnv(t *testing.T, edit ...func(*Deps)) *forwardEnv {
	t.Helper()
	echo, err := resttest.NewEchoServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = echo.Close() })
	envs := newFakeEnvironments()
	if _, err := envs.Create(context.Background(), environment.Request{Name: "dev", Runtime: "docker"}); err != nil {
		t.Fatal(err)
	}
	envs.mu.Lock()
	envs.envs["booting"] = environment.Environment{Name: "booting", Runtime: "docker", State: environment.StateProvisioning}
	envs.mu.Unlock()
	fw := resttest.NewForwards()
	fw.Route("dev", 5173, echo.Addr())
	e := newEnv(t, append([]func(*Deps){func(d *Deps) { d.Environments = envs; d.Forwards = fw }}, edit...)...)
	return &forwardEnv{env: e, envs: envs, forwards: fw, echo: echo}
}

// upgrade sends the forward request for path on a new TCP connection,
// with extra (bytes sent right behind the request, in the same write),
// and returns the connection and a reader of what follows the 101.
func (e *forwardEnv) upgrade(path string, extra []byte) (*net.TCPConn, *bufio.Reader) {
	e.t.Helper()
	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(60 * time.Second)) // a hang fails, never blocks the run
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: agentic-port-forward\r\n\r\n",
		path, e.srv.Listener.Addr(), testToken)
	if _, err := c.Write(append([]byte(req), extra...)); err != nil {
		e.t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	checkReq, err := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	checkContract(e.t, checkReq, resp.StatusCode, resp.Header, nil)
	if resp.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(resp.Header.Get("Upgrade"), "agentic-port-forward") ||
		!strings.EqualFold(resp.Header.Get("Connection"), "upgrade") {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("upgrade: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	return c.(*net.TCPConn), br
}

// forwardCall sends the forward request through the spec-checking client
// with the given headers.
func (e *forwardEnv) forwardCall(path, auth string, headers map[string]string) response {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	checkContract(e.t, req, resp.StatusCode, resp.Header, b)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

var upgradeHeaders = map[string]string{"Connection": "Upgrade", "Upgrade": "agentic-port-forward"}

// TestPortForwardCarriesBytesBothWays: after the 101 the connection is the
// port's TCP stream: what is sent (even in the same packet as the request)
// comes back from the echo server whole, and the client's half-close
// reaches the server inside, whose own half-close comes back as EOF.
func TestPortForwardCarriesBytesBothWays(t *testing.T) {
	e := newForwardEnv(t)
	first := []byte("sent with the request\n")
	c, br := e.upgrade("/api/v1/environments/dev/ports/5173/forward", first)
	payload := make([]byte, 4<<20)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	// Write while reading: 4 MiB does not fit in the socket buffers, so a
	// forward that does not carry both ways at once stalls here.
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(payload)
		if err == nil {
			err = c.CloseWrite() // the echo server ends its side only after this arrives
		}
		wrote <- err
	}()
	got, err := io.ReadAll(br) // until the echo server's half-close comes back
	if err != nil {
		t.Fatalf("reading the echo: %v (after %d bytes)", err, len(got))
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte(nil), first...), payload...)
	if !bytes.Equal(got, want) {
		t.Fatalf("echoed %d bytes, want the %d sent, in order", len(got), len(want))
	}
	if d := e.forwards.Dials(); !slices.Equal(d, []string{"dev:5173"}) {
		t.Fatalf("dials %v, want one of the environment's agent's port", d)
	}
}

// TestPortForwardKeepsTheOtherWayOpenAfterAHalfClose: when the server
// inside ends its side first, the client reads EOF and may still send.
func TestPortForwardKeepsTheOtherWayOpenAfterAHalfClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	heard := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			heard <- err.Error()
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("hello, then nothing more\n"))
		_ = c.(*net.TCPConn).CloseWrite()
		b, err := io.ReadAll(c)
		if err != nil {
			heard <- err.Error()
			return
		}
		heard <- string(b)
	}()
	e := newForwardEnv(t)
	e.forwards.Route("dev", 6000, ln.Addr().String())
	c, br := e.upgrade("/api/v1/environments/dev/ports/6000/forward", nil)
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "hello, then nothing more\n" {
		t.Fatalf("read %q, %v; want the greeting then EOF", got, err)
	}
	if _, err := c.Write([]byte("still heard")); err != nil {
		t.Fatalf("writing after the other side ended: %v", err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if h := <-heard; h != "still heard" {
		t.Fatalf("the server inside heard %q, want %q", h, "still heard")
	}
}

// TestPortForwardRefusalsAreJSON: every refusal comes before the upgrade,
// as the JSON error the contract declares, and a refusal that needs no
// dial makes none.
func TestPortForwardRefusalsAreJSON(t *testing.T) {
	e := newForwardEnv(t)
	e.forwards.Fail(1, fmt.Errorf("dialing: %w", ports.ErrPortNotListening))
	e.forwards.Fail(2, ports.ErrTooManyForwards)
	e.forwards.Fail(3, ports.ErrPortRefused)
	e.forwards.Fail(4, errors.New("the agent said something odd"))
	e.forwards.Fail(5, ports.ErrAgentNotConnected)
	defer func() { e.t = t }()
	for _, c := range []struct {
		name    string
		path    string
		auth    string
		headers map[string]string
		status  int
		code    string
		dials   bool
	}{
		{"no token", "/api/v1/environments/dev/ports/5173/forward", "", upgradeHeaders, http.StatusUnauthorized, "unauthorized", false},
		{"wrong token", "/api/v1/environments/dev/ports/5173/forward", "Bearer nope", upgradeHeaders, http.StatusUnauthorized, "unauthorized", false},
		{"no such environment", "/api/v1/environments/nope/ports/5173/forward", "", upgradeHeaders, http.StatusNotFound, "environment_not_found", false},
		{"port 0", "/api/v1/environments/dev/ports/0/forward", "", upgradeHeaders, http.StatusBadRequest, "invalid_request", false},
		{"port 65536", "/api/v1/environments/dev/ports/65536/forward", "", upgradeHeaders, http.StatusBadRequest, "invalid_request", false},
		{"not a port", "/api/v1/environments/dev/ports/http/forward", "", upgradeHeaders, http.StatusBadRequest, "invalid_request", false},
		{"no upgrade", "/api/v1/environments/dev/ports/5173/forward", "", nil, http.StatusUpgradeRequired, "upgrade_required", false},
		{"another protocol", "/api/v1/environments/dev/ports/5173/forward", "", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}, http.StatusUpgradeRequired, "upgrade_required", false},
		{"upgrade without connection", "/api/v1/environments/dev/ports/5173/forward", "", map[string]string{"Upgrade": "agentic-port-forward"}, http.StatusUpgradeRequired, "upgrade_required", false},
		{"no agent yet", "/api/v1/environments/booting/ports/5173/forward", "", upgradeHeaders, http.StatusConflict, "agent_not_connected", false},
		{"agent not connected", "/api/v1/environments/dev/ports/5/forward", "", upgradeHeaders, http.StatusConflict, "agent_not_connected", true},
		{"not listening", "/api/v1/environments/dev/ports/1/forward", "", upgradeHeaders, http.StatusBadGateway, "port_not_listening", true},
		{"not routed", "/api/v1/environments/dev/ports/8080/forward", "", upgradeHeaders, http.StatusBadGateway, "port_not_listening", true},
		{"too many", "/api/v1/environments/dev/ports/2/forward", "", upgradeHeaders, http.StatusServiceUnavailable, "too_many_forwards", true},
		{"refused", "/api/v1/environments/dev/ports/3/forward", "", upgradeHeaders, http.StatusForbidden, "port_refused", true},
		{"agent error", "/api/v1/environments/dev/ports/4/forward", "", upgradeHeaders, http.StatusBadGateway, "agent_error", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			auth := c.auth
			if auth == "" && c.status != http.StatusUnauthorized {
				auth = "Bearer " + testToken
			}
			before := len(e.forwards.Dials())
			r := e.forwardCall(c.path, auth, c.headers)
			expect(t, r, c.status, c.code)
			if dialed := len(e.forwards.Dials()) > before; dialed != c.dials {
				t.Fatalf("dialed: %v, want %v", dialed, c.dials)
			}
			switch c.status {
			case http.StatusUpgradeRequired:
				if r.header.Get("Upgrade") != "agentic-port-forward" {
					t.Fatalf("426 without 'Upgrade: agentic-port-forward': %v", r.header)
				}
			case http.StatusServiceUnavailable:
				if r.header.Get("Retry-After") == "" {
					t.Fatalf("503 without Retry-After: %v", r.header)
				}
			}
		})
	}
}

// TestPortForwardWithoutADialer: a server wired with no dialer reaches no
// port, and says so as a refusal, not a failure.
func TestPortForwardWithoutADialer(t *testing.T) {
	e := newForwardEnv(t, func(d *Deps) { d.Forwards = nil })
	expect(t, e.forwardCall("/api/v1/environments/dev/ports/5173/forward", "Bearer "+testToken, upgradeHeaders), http.StatusConflict, "agent_not_connected")
}

// TestPortForwardsAtOnce: connections are independent; each carries its
// own bytes.
func TestPortForwardsAtOnce(t *testing.T) {
	e := newForwardEnv(t)
	const n = 8
	type conn struct {
		c  *net.TCPConn
		br *bufio.Reader
	}
	conns := make([]conn, n)
	for i := range conns {
		c, br := e.upgrade("/api/v1/environments/dev/ports/5173/forward", nil)
		conns[i] = conn{c, br}
	}
	for i, cn := range conns {
		if _, err := fmt.Fprintf(cn.c, "connection %d", i); err != nil {
			t.Fatal(err)
		}
	}
	for i, cn := range conns {
		if err := cn.c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(cn.br)
		if want := fmt.Sprintf("connection %d", i); err != nil || string(got) != want {
			t.Fatalf("connection %d read %q, %v; want %q", i, got, err, want)
		}
	}
}
