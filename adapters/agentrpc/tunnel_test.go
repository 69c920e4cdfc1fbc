package agentrpc

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
)

// policyOf gives agent-a the rules and everyone else no egress.
type policyOf map[string][]string

func (p policyOf) EgressRules(agentID string) ([]egress.Rule, bool) {
	list, ok := p[agentID]
	if !ok {
		return nil, false
	}
	rules, err := egress.ParseRules(list)
	if err != nil {
		panic(err)
	}
	return rules, true
}

// echoServer answers each connection with what it reads, upper-cased,
// until the client closes its side.
func echoServer(t *testing.T) (port int, conns *sync.WaitGroup) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns = &sync.WaitGroup{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				b, _ := io.ReadAll(c)
				_, _ = c.Write([]byte(strings.ToUpper(string(b))))
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, conns
}

type tunnelClient struct {
	t      *testing.T
	stream interface {
		Send(*sandboxv1.TunnelRequest) error
		Receive() (*sandboxv1.TunnelResponse, error)
		CloseRequest() error
	}
	cancel context.CancelFunc
}

func (h *harness) tunnel(id, secret, host string, port int) (*tunnelClient, *sandboxv1.TunnelOpened, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	s := h.client.Tunnel(ctx)
	s.RequestHeader().Set(HeaderAgentID, id)
	s.RequestHeader().Set(HeaderAgentSecret, secret)
	tc := &tunnelClient{t: h.t, stream: s, cancel: cancel}
	h.t.Cleanup(cancel)
	if err := s.Send(&sandboxv1.TunnelRequest{Payload: &sandboxv1.TunnelRequest_Open{Open: &sandboxv1.TunnelOpen{Host: host, Port: uint32(port)}}}); err != nil { //nolint:gosec // test ports
		if _, rerr := s.Receive(); rerr != nil {
			return nil, nil, rerr // the server's answer, not the closed pipe
		}
		return nil, nil, err
	}
	first, err := s.Receive()
	if err != nil {
		return nil, nil, err
	}
	return tc, first.GetOpened(), nil
}

func TestTunnelsReachOnlyWhatTheEnvironmentAllows(t *testing.T) {
	port, _ := echoServer(t)
	var mu sync.Mutex
	var records []EgressRecord
	active := map[string]int{} // traffic heard of, by agent
	// A server without egress refuses every tunnel.
	if _, opened, err := newHarness(t).tunnel("agent-a", secretPrefix+"agent-a", "127.0.0.1", port); err != nil || !opened.GetDenied() || !strings.Contains(opened.GetReason(), "no egress") {
		t.Fatalf("without egress: %v %v", opened, err)
	}
	h := newHarness(t, func(c *Config) {
		c.Egress = Egress{
			Policy: policyOf{"agent-a": {"allowed.test:" + strconv.Itoa(port), "127.0.0.1:" + strconv.Itoa(port)}},
			Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
				switch host {
				case "allowed.test", "sneaky.test":
					return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
				}
				return nil, errors.New("no such host")
			},
			Observe: func(r EgressRecord) { mu.Lock(); records = append(records, r); mu.Unlock() },
			Active:  func(id string) { mu.Lock(); active[id]++; mu.Unlock() },
		}
	})
	// Wrong credentials: not even a refusal to read.
	if _, _, err := h.tunnel("agent-a", "wrong", "127.0.0.1", port); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("wrong secret: %v", err)
	}
	for _, c := range []struct {
		name, agent, host string
		port              int
		reason            string
	}{
		{"an agent whose environment is not proxy", "agent-b", "127.0.0.1", port, "network mode is not proxy"},
		{"a name not listed", "agent-a", "sneaky.test", port, "matches no allowed host"},
		{"a listed name on another port", "agent-a", "allowed.test", port + 1, "matches no allowed host"},
		{"a raw IP not listed", "agent-a", "127.0.0.2", port, "no rule names"},
	} {
		_, opened, err := h.tunnel(c.agent, secretPrefix+c.agent, c.host, c.port)
		if err != nil || opened.GetAllowed() || !opened.GetDenied() || !strings.Contains(opened.GetReason(), c.reason) {
			t.Errorf("%s: %v %v (want denied: %q)", c.name, opened, err, c.reason)
		}
	}
	// An allowed name: bytes both ways, then the destination's end.
	tc, opened, err := h.tunnel("agent-a", secretPrefix+"agent-a", "allowed.test", port)
	if err != nil || !opened.GetAllowed() {
		t.Fatalf("allowed: %v %v", opened, err)
	}
	_ = tc.stream.Send(&sandboxv1.TunnelRequest{Payload: &sandboxv1.TunnelRequest_Data{Data: []byte("hello ")}})
	_ = tc.stream.Send(&sandboxv1.TunnelRequest{Payload: &sandboxv1.TunnelRequest_Data{Data: []byte("tunnel")}})
	_ = tc.stream.Send(&sandboxv1.TunnelRequest{Payload: &sandboxv1.TunnelRequest_CloseWrite{CloseWrite: true}})
	var got []byte
	for {
		m, err := tc.stream.Receive()
		if err != nil {
			t.Fatalf("before eof: %v", err)
		}
		if m.GetEof() {
			break
		}
		got = append(got, m.GetData()...)
	}
	if string(got) != "HELLO TUNNEL" {
		t.Fatalf("through the tunnel: %q", got)
	}
	_ = tc.stream.CloseRequest()
	eventually(t, "every tunnel recorded", func() bool { mu.Lock(); defer mu.Unlock(); return len(records) == 5 })
	// Each tunnel is recorded as its stream ends, so a refused one may be
	// recorded after the allowed one (CI saw it): find it by its host.
	mu.Lock()
	var allowed []EgressRecord
	for _, r := range records {
		if r.Host == "allowed.test" && r.Port == port {
			allowed = append(allowed, r)
		}
	}
	mu.Unlock()
	if len(allowed) != 1 || !allowed[0].Allowed || allowed[0].BytesUp != 12 || allowed[0].BytesDown != 12 {
		t.Fatalf("the allowed tunnel's records: %+v", allowed)
	}
	// Its traffic was heard of, once per message or read (two messages
	// up, at least one read down); the refused tunnels moved nothing.
	mu.Lock()
	defer mu.Unlock()
	if n := active["agent-a"]; n < 3 || n > 14 || len(active) != 1 {
		t.Fatalf("traffic heard of: %v", active)
	}
}

// An environment holds at most MaxTunnels open; one that ends frees a place.
func TestTunnelsPerEnvironmentAreBounded(t *testing.T) {
	port, _ := echoServer(t) // holds each connection until its client's end
	allow := []string{"127.0.0.1:" + strconv.Itoa(port)}
	h := newHarness(t, func(c *Config) {
		c.Egress = Egress{Policy: policyOf{"agent-a": allow, "agent-b": allow}, MaxTunnels: 3}
	})
	var open []*tunnelClient
	for range 3 {
		tc, opened, err := h.tunnel("agent-a", secretPrefix+"agent-a", "127.0.0.1", port)
		if err != nil || !opened.GetAllowed() {
			t.Fatalf("tunnel %d: %v %v", len(open)+1, opened, err)
		}
		open = append(open, tc)
	}
	if _, _, err := h.tunnel("agent-a", secretPrefix+"agent-a", "127.0.0.1", port); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a fourth tunnel: %v, want resource_exhausted", err)
	}
	// Another environment has its own places.
	if _, opened, err := h.tunnel("agent-b", secretPrefix+"agent-b", "127.0.0.1", port); err != nil || !opened.GetAllowed() {
		t.Fatalf("another agent's tunnel: %v %v", opened, err)
	}
	// The client's end → the destination's → the tunnel's: a place again.
	_ = open[0].stream.Send(&sandboxv1.TunnelRequest{Payload: &sandboxv1.TunnelRequest_CloseWrite{CloseWrite: true}})
	for {
		m, err := open[0].stream.Receive()
		if err != nil || m.GetEof() {
			break
		}
	}
	_ = open[0].stream.CloseRequest()
	eventually(t, "a place freed", func() bool {
		tc, opened, err := h.tunnel("agent-a", secretPrefix+"agent-a", "127.0.0.1", port)
		if err == nil && opened.GetAllowed() {
			tc.cancel()
			return true
		}
		return false
	})
}
