package agentrpc

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

type dialResult struct {
	conn ports.Conn
	err  error
}

// dialAsync starts a DialPort and returns where its result arrives.
func (h *harness) dialAsync(agentID string, port uint16) <-chan dialResult {
	ch := make(chan dialResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := h.svc.DialPort(ctx, agentID, port)
		ch <- dialResult{c, err}
	}()
	return ch
}

// nextDial is the PortDial the server sent fa.
func nextDial(t *testing.T, fa *fakeAgent) *sandboxv1.PortDial {
	t.Helper()
	for {
		if d := fa.recv().GetPortDial(); d != nil {
			return d
		}
	}
}

type forwardClient = *connect.BidiStreamForClient[sandboxv1.ForwardRequest, sandboxv1.ForwardResponse]

// openForward is the agent's side: the stream for a dial, opened with how
// the dial went.
func (h *harness) openForward(t *testing.T, agentID, forwardID string, opened *sandboxv1.ForwardOpened) forwardClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := h.client.Forward(ctx)
	s.RequestHeader().Set(HeaderAgentID, agentID)
	s.RequestHeader().Set(HeaderAgentSecret, secretPrefix+agentID)
	opened.ForwardId = forwardID
	if err := s.Send(&sandboxv1.ForwardRequest{Payload: &sandboxv1.ForwardRequest_Opened{Opened: opened}}); err != nil {
		t.Fatalf("open forward: %v", err)
	}
	return s
}

func TestDialPortCarriesBytesBothWaysAndEndsInside(t *testing.T) {
	h := newHarness(t)
	fa := h.connectAgent("agent-a")
	res := h.dialAsync("agent-a", 5173)
	d := nextDial(t, fa)
	if d.GetPort() != 5173 || d.GetForwardId() == "" {
		t.Fatalf("dial: %v", d)
	}
	fs := h.openForward(t, "agent-a", d.GetForwardId(), &sandboxv1.ForwardOpened{})
	r := testkit.Receive(t, waitTimeout, res, "DialPort returned")
	if r.err != nil {
		t.Fatal(r.err)
	}
	c := r.conn
	defer c.Close()

	// client → inside
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	m, err := fs.Receive()
	if err != nil || string(m.GetData()) != "GET / HTTP/1.1\r\n\r\n" {
		t.Fatalf("inside got %v %v", m, err)
	}
	// inside → client, then the inside's end of writes is the client's EOF.
	_ = fs.Send(&sandboxv1.ForwardRequest{Payload: &sandboxv1.ForwardRequest_Data{Data: []byte("HTTP/1.1 200 OK\r\n")}})
	_ = fs.Send(&sandboxv1.ForwardRequest{Payload: &sandboxv1.ForwardRequest_CloseWrite{CloseWrite: true}})
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "HTTP/1.1 200 OK\r\n" {
		t.Fatalf("client read %q %v", got, err)
	}
	// The client's half-close reaches the inside, and its close ends the
	// stream there.
	if err := c.(ports.HalfCloser).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if m, err := fs.Receive(); err != nil || !m.GetCloseWrite() {
		t.Fatalf("want close_write, got %v %v", m, err)
	}
	_ = c.Close()
	if _, err := fs.Receive(); err == nil {
		t.Fatal("the stream outlived the connection")
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

func TestDialPortSaysWhyNot(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Forwards = Forwards{MaxPerAgent: 1, ServerPorts: []uint16{8122}} })
	fa := h.connectAgent("agent-a")
	h.connectAgent("agent-b")

	// Nothing listens inside.
	res := h.dialAsync("agent-a", 9)
	d := nextDial(t, fa)
	h.openForward(t, "agent-a", d.GetForwardId(), &sandboxv1.ForwardOpened{Error: "dial tcp 127.0.0.1:9: connection refused", NotListening: true})
	if r := testkit.Receive(t, waitTimeout, res, "DialPort returned"); !errors.Is(r.err, ports.ErrPortNotListening) {
		t.Fatalf("not listening: %v", r.err)
	}

	// Another agent cannot answer a dial that was not its own.
	res = h.dialAsync("agent-a", 80)
	d = nextDial(t, fa)
	stolen := h.openForward(t, "agent-b", d.GetForwardId(), &sandboxv1.ForwardOpened{})
	if _, err := stolen.Receive(); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a foreign agent's open: %v", err)
	}
	fs := h.openForward(t, "agent-a", d.GetForwardId(), &sandboxv1.ForwardOpened{})
	r := testkit.Receive(t, waitTimeout, res, "DialPort returned")
	if r.err != nil {
		t.Fatal(r.err)
	}
	// The same dial cannot be answered twice.
	if _, err := h.openForward(t, "agent-a", d.GetForwardId(), &sandboxv1.ForwardOpened{}).Receive(); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a second open: %v", err)
	}

	// One connection is the bound here; the slot comes back on close.
	if _, err := h.svc.DialPort(context.Background(), "agent-a", 81); !errors.Is(err, ports.ErrTooManyForwards) {
		t.Fatalf("over the bound: %v", err)
	}
	_ = r.conn.Close()
	_, _ = fs.Receive()
	res = h.dialAsync("agent-a", 81)
	nextDial(t, fa) // asked: the slot was given back
	_ = res

	// No such agent, and a port that is never asked.
	if _, err := h.svc.DialPort(context.Background(), "nobody", 80); !errors.Is(err, ports.ErrAgentNotFound) {
		t.Fatalf("unknown agent: %v", err)
	}
	if _, err := h.svc.DialPort(context.Background(), "agent-b", 0); !errors.Is(err, ports.ErrPortRefused) {
		t.Fatalf("port 0: %v", err)
	}
}

func TestDialPortRefusesTheServersOwnPortsToAHostAgent(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Forwards = Forwards{ServerPorts: []uint16{8122}} })
	fa := h.open("host-01", secretPrefix+"host-01")
	reg := registration("host-01")
	reg.GetRegistration().Runtime = sandboxv1.RuntimeKind_RUNTIME_KIND_HOST
	fa.send(reg)
	if _, err := fa.stream.Receive(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.DialPort(context.Background(), "host-01", 8122); !errors.Is(err, ports.ErrPortRefused) {
		t.Fatalf("the server's own port from a host agent: %v", err)
	}
	// A container's 8122 is its own.
	fb := h.connectAgent("agent-a")
	res := h.dialAsync("agent-a", 8122)
	if d := nextDial(t, fb); d.GetPort() != 8122 {
		t.Fatalf("dial: %v", d)
	}
	_ = res
}

func TestAnIdleForwardedConnectionIsClosed(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Forwards = Forwards{Idle: 100 * time.Millisecond} })
	fa := h.connectAgent("agent-a")
	res := h.dialAsync("agent-a", 5173)
	d := nextDial(t, fa)
	fs := h.openForward(t, "agent-a", d.GetForwardId(), &sandboxv1.ForwardOpened{})
	r := testkit.Receive(t, waitTimeout, res, "DialPort returned")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if _, err := r.conn.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("an idle read: %v", err)
	}
	// The agent learns it: its stream ends.
	if _, err := fs.Receive(); err == nil {
		t.Fatal("the stream outlived the idle connection")
	}
}

// rawOpen is the agent's side of a raw forward: a connection of its own,
// upgraded; it returns the connection and the server's answer.
func (h *harness) rawOpen(t *testing.T, agentID, secret, forwardID string, upgrade bool) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	header := []string{HeaderAgentID, agentID, HeaderAgentSecret, secret, HeaderForwardID, forwardID}
	if upgrade {
		header = append(header, upgradeTo(ForwardRawProtocol)...)
	}
	return h.rawGet(ForwardRawPath, header, "")
}

// An agent that can open a connection of its own answers a dial with it:
// raw bytes after an upgrade, for the dial's own agent only.
func TestDialPortOnARawConnection(t *testing.T) {
	h := newHarness(t)
	fa := h.connectAgent("agent-a")
	h.connectAgent("agent-b")
	res := h.dialAsync("agent-a", 5173)
	d := nextDial(t, fa)

	for _, c := range []struct {
		name, agent, secret, id string
		upgrade                 bool
		status                  int
	}{
		{"wrong secret", "agent-a", "wrong", d.GetForwardId(), true, http.StatusUnauthorized},
		{"another agent's dial", "agent-b", secretPrefix + "agent-b", d.GetForwardId(), true, http.StatusNotFound},
		{"no such dial", "agent-a", secretPrefix + "agent-a", "nope", true, http.StatusNotFound},
		{"no upgrade", "agent-a", secretPrefix + "agent-a", d.GetForwardId(), false, http.StatusUpgradeRequired},
	} {
		if _, _, resp := h.rawOpen(t, c.agent, c.secret, c.id, c.upgrade); resp.StatusCode != c.status {
			t.Errorf("%s: %s, want %d", c.name, resp.Status, c.status)
		}
	}
	raw, br, resp := h.rawOpen(t, "agent-a", secretPrefix+"agent-a", d.GetForwardId(), true)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	r := testkit.Receive(t, waitTimeout, res, "DialPort returned")
	if r.err != nil {
		t.Fatal(r.err)
	}
	c := r.conn
	defer c.Close()
	// Both ways, and each side's half-close reaches the other.
	if _, err := io.WriteString(c, "to the port"); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(br); err != nil || string(got) != "to the port" {
		t.Fatalf("the agent read %q %v", got, err)
	}
	_, _ = io.WriteString(raw, "from the port")
	_ = raw.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(c); err != nil || string(got) != "from the port" {
		t.Fatalf("the client read %q %v", got, err)
	}
	// The same dial is not answered twice.
	if _, _, resp := h.rawOpen(t, "agent-a", secretPrefix+"agent-a", d.GetForwardId(), true); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a second answer: %s", resp.Status)
	}
}

// A raw connection left idle is closed, and its slot given back.
func TestAnIdleRawForwardIsClosed(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Forwards = Forwards{Idle: 100 * time.Millisecond, MaxPerAgent: 1} })
	fa := h.connectAgent("agent-a")
	res := h.dialAsync("agent-a", 5173)
	d := nextDial(t, fa)
	raw, _, resp := h.rawOpen(t, "agent-a", secretPrefix+"agent-a", d.GetForwardId(), true)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	if r := testkit.Receive(t, waitTimeout, res, "DialPort returned"); r.err != nil {
		t.Fatal(r.err)
	}
	if _, err := raw.Read(make([]byte, 1)); err == nil {
		t.Fatal("the idle connection was not closed")
	}
	res = h.dialAsync("agent-a", 5173)
	select {
	case r := <-res:
		t.Fatalf("the second dial: %v", r.err)
	case m := <-fa.msgs:
		if m.GetPortDial() == nil {
			t.Fatalf("got %v", m)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no second dial")
	}
}
