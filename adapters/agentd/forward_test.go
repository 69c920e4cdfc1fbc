package agentd

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
)

// upperOnce answers one connection with what it read, upper-cased, once
// the client ended its writes; it reports when its connection ended.
func upperOnce(t *testing.T) (port uint32, ended <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ch <- err
			return
		}
		defer c.Close()
		b, err := io.ReadAll(c)
		if err != nil {
			ch <- err
			return
		}
		_, _ = c.Write([]byte(strings.ToUpper(string(b))))
		_ = c.(*net.TCPConn).CloseWrite()
		_, err = c.Read(make([]byte, 1)) // until the other side closes
		ch <- err
	}()
	return uint32(ln.Addr().(*net.TCPAddr).Port), ch //nolint:gosec // a TCP port
}

func dialMsg(id string, port uint32, address string) *sandboxv1.ConnectResponse {
	return &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_PortDial{PortDial: &sandboxv1.PortDial{ForwardId: id, Port: port, Address: address}}}
}

func TestAgentForwardsAConnectionToAPortInside(t *testing.T) {
	cp, url := startCP(t)
	runAgent(t, testConfig(url, newFakeRunner()))
	s := cp.nextSession(t)
	port, ended := upperOnce(t)

	s.send(dialMsg("fw-1", port, "0.0.0.0")) // listening everywhere: dialed on loopback
	fw := within(t, cp.forwards, "the agent's forward stream")
	end := sync.OnceFunc(func() { close(fw.end) })
	defer end()
	if fw.header.Get("X-Agent-Id") == "" || fw.header.Get("X-Agent-Secret") == "" {
		t.Fatalf("the forward stream is not signed in: %v", fw.header)
	}
	first, err := fw.stream.Receive()
	if err != nil || first.GetOpened().GetForwardId() != "fw-1" || first.GetOpened().GetError() != "" {
		t.Fatalf("opened: %v %v", first, err)
	}
	for _, m := range []*sandboxv1.ForwardResponse{
		{Payload: &sandboxv1.ForwardResponse_Data{Data: []byte("hello ")}},
		{Payload: &sandboxv1.ForwardResponse_Data{Data: []byte("inside")}},
		{Payload: &sandboxv1.ForwardResponse_CloseWrite{CloseWrite: true}},
	} {
		if err := fw.stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	var got strings.Builder
	for {
		m, err := fw.stream.Receive()
		if err != nil {
			t.Fatalf("after %q: %v", got.String(), err)
		}
		if m.GetCloseWrite() {
			break
		}
		got.Write(m.GetData())
	}
	if got.String() != "HELLO INSIDE" {
		t.Fatalf("got %q", got.String())
	}
	// The server ending the stream ends the connection inside.
	end()
	if err := within(t, ended, "the connection inside ended"); err != io.EOF {
		t.Fatalf("inside: %v", err)
	}
}

func TestAgentSaysWhyAPortCannotBeReached(t *testing.T) {
	cp, url := startCP(t)
	runAgent(t, testConfig(url, newFakeRunner()))
	s := cp.nextSession(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := uint32(ln.Addr().(*net.TCPAddr).Port) //nolint:gosec // a TCP port
	ln.Close()
	for _, c := range []struct {
		name, address string
		port          uint32
		notListening  bool
		says          string
	}{
		{"nothing listens", "", closed, true, "refused"},
		{"an address outside", "192.0.2.1", closed, false, "not this environment's"},
		{"not an address", "example.com", closed, false, "not an IP address"},
		{"port out of range", "", 70000, false, "1-65535"},
	} {
		s.send(dialMsg("fw-"+c.name, c.port, c.address))
		fw := within(t, cp.forwards, c.name+": the forward stream")
		m, err := fw.stream.Receive()
		close(fw.end)
		op := m.GetOpened()
		if err != nil || op.GetForwardId() != "fw-"+c.name || op.GetNotListening() != c.notListening || !strings.Contains(op.GetError(), c.says) {
			t.Errorf("%s: %v %v", c.name, op, err)
		}
	}
}

// Where the server takes a connection of the agent's own, a forwarded
// connection goes on it as raw bytes after an upgrade, signed in and
// naming its dial; half-closes pass both ways.
func TestAgentForwardsOnAConnectionOfItsOwn(t *testing.T) {
	cp, url := startCP(t)
	cp.rawOn.Store(true)
	runAgent(t, testConfig(url, newFakeRunner()))
	s := cp.nextSession(t)
	port, ended := upperOnce(t)

	s.send(dialMsg("fw-raw", port, "127.0.0.1"))
	raw := within(t, cp.raws, "the agent's raw connection")
	defer raw.conn.Close()
	if raw.header.Get("X-Agent-Id") == "" || raw.header.Get("X-Agent-Secret") == "" || raw.header.Get("X-Forward-Id") != "fw-raw" {
		t.Fatalf("the raw connection is not signed in for its dial: %v", raw.header)
	}
	if _, err := io.WriteString(raw.conn, "hello raw"); err != nil {
		t.Fatal(err)
	}
	_ = raw.conn.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(raw.r)
	if err != nil || string(got) != "HELLO RAW" {
		t.Fatalf("got %q %v", got, err)
	}
	_ = raw.conn.Close()
	if err := within(t, ended, "the connection inside ended"); err != io.EOF {
		t.Fatalf("inside: %v", err)
	}
	select {
	case fw := <-cp.forwards:
		close(fw.end)
		t.Fatal("the connection also went on the link")
	default:
	}
}
