package libvirt

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// relayRig is a relay between a fake QEMU (listening on the channel socket
// as QEMU does) and a fake agent socket of the server.
type relayRig struct {
	r               *relay
	qemu, server    net.Listener
	channel, socket string
}

func newRelayRig(t *testing.T) *relayRig {
	t.Helper()
	dir := t.TempDir()
	g := &relayRig{channel: filepath.Join(dir, "ch.sock"), socket: filepath.Join(dir, "agent.sock")}
	var err error
	if g.qemu, err = net.Listen("unix", g.channel); err != nil {
		t.Fatal(err)
	}
	if g.server, err = net.Listen("unix", g.socket); err != nil {
		t.Fatal(err)
	}
	g.r = newRelay("a1", g.channel, g.socket, slog.New(slog.NewTextHandler(io.Discard, nil)))
	g.r.pause, g.r.backoffMax = 20*time.Millisecond, 100*time.Millisecond
	t.Cleanup(func() {
		g.qemu.Close()
		g.server.Close()
	})
	return g
}

func accept(t *testing.T, ln net.Listener, what string) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	r := testkit.Receive(t, 5*time.Second, ch, "no connection to "+what)
	if r.err != nil {
		t.Fatalf("accept %s: %v", what, r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c
}

func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

func waitEOF(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("%s: want EOF, got %v", what, err)
	}
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, what, f)
}

// checkNoLeak fails when goroutines started after base outlive the test.
func checkNoLeak(t *testing.T, base int) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); runtime.NumGoroutine() > base; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
	}
}

func TestRelayCarriesAConnectionAndStartsOver(t *testing.T) {
	base := runtime.NumGoroutine()
	g := newRelayRig(t)
	g.r.start()

	// The guest's agent opens a connection: its bytes reach the server,
	// the server's reach the guest.
	guest := accept(t, g.qemu, "the channel")
	msg := append(append([]byte{}, h2Preface...), "hello"...)
	if _, err := guest.Write(msg); err != nil {
		t.Fatal(err)
	}
	srv := accept(t, g.server, "the agent socket")
	if got := readN(t, srv, len(msg)); !bytes.Equal(got, msg) {
		t.Fatalf("server got %q", got)
	}
	if _, err := srv.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, guest, 5); string(got) != "world" {
		t.Fatalf("guest got %q", got)
	}
	eventually(t, "connected", g.r.Connected)

	// The server ends the connection: the relay drops the channel too (the
	// guest's reads see the host side go) and reconnects for the next one.
	srv.Close()
	waitEOF(t, guest, "the guest after the server closed")
	eventually(t, "disconnected", func() bool { return !g.r.Connected() })
	guest2 := accept(t, g.qemu, "the channel again")
	if _, err := guest2.Write(h2Preface); err != nil {
		t.Fatal(err)
	}
	srv2 := accept(t, g.server, "the agent socket again")
	readN(t, srv2, len(h2Preface))

	// stop ends everything it started.
	g.r.stop()
	waitEOF(t, guest2, "the guest after stop")
	waitEOF(t, srv2, "the server after stop")
	checkNoLeak(t, base)
}

func TestRelayDropsTheTailOfADeadConnection(t *testing.T) {
	g := newRelayRig(t)
	g.r.start()
	defer g.r.stop()
	guest := accept(t, g.qemu, "the channel")
	// Bytes that do not start a connection (an agent died mid-stream, its
	// successor's bytes follow): the relay must not hand them to the server.
	if _, err := guest.Write([]byte("\x00\x00\x04\x08 stale frame")); err != nil {
		t.Fatal(err)
	}
	waitEOF(t, guest, "the guest after stale bytes")
	guest2 := accept(t, g.qemu, "the channel again")
	if _, err := guest2.Write(h2Preface); err != nil {
		t.Fatal(err)
	}
	srv := accept(t, g.server, "the agent socket")
	if got := readN(t, srv, len(h2Preface)); !bytes.Equal(got, h2Preface) {
		t.Fatalf("server got %q, want only the new connection's preface", got)
	}
}

func TestRelayWaitsForTheServer(t *testing.T) {
	g := newRelayRig(t)
	g.server.Close() // the server is down (restarting)
	g.r.start()
	defer g.r.stop()
	guest := accept(t, g.qemu, "the channel")
	if _, err := guest.Write(h2Preface); err != nil {
		t.Fatal(err)
	}
	waitEOF(t, guest, "the guest while the server is down")
	if g.r.Connected() {
		t.Error("connected without a server")
	}
	server, err := net.Listen("unix", g.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	guest2 := accept(t, g.qemu, "the channel again")
	if _, err := guest2.Write(h2Preface); err != nil {
		t.Fatal(err)
	}
	srv := accept(t, server, "the agent socket, back")
	readN(t, srv, len(h2Preface))
}

func TestRelayWithoutQEMU(t *testing.T) {
	base := runtime.NumGoroutine()
	dir := t.TempDir()
	// A domain that does not run (yet): nothing listens on the channel.
	r := newRelay("a1", filepath.Join(dir, "none.sock"), filepath.Join(dir, "agent.sock"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.start()
	time.Sleep(100 * time.Millisecond)
	done := make(chan struct{})
	go func() { r.stop(); close(done) }()
	testkit.Receive(t, 5*time.Second, done, "stop hangs while the relay backs off")
	checkNoLeak(t, base)
}

// A guest that asks who it is gets the identity offered for it, once, in
// pieces or whole, and its HTTP/2 connection then goes through; asked
// again, the relay gives nothing and drops the channel.
func TestRelayAnswersTheIdentityHelloOnce(t *testing.T) {
	g := newRelayRig(t)
	answer := []byte(`{"agent_id":"a1","secret":"s","unix_nano":1}` + "\n")
	g.r.offerIdentity(func() ([]byte, error) { return answer, nil })
	g.r.start()
	defer g.r.stop()

	guest := accept(t, g.qemu, "the channel")
	hello := []byte(agentwire.LinkIdentityHello)
	// Split: a byte stream may deliver the hello in two reads.
	if _, err := guest.Write(hello[:5]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := guest.Write(hello[5:]); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, guest, len(answer)); !bytes.Equal(got, answer) {
		t.Fatalf("guest got %q", got)
	}
	if _, err := guest.Write(h2Preface); err != nil {
		t.Fatal(err)
	}
	srv := accept(t, g.server, "the agent socket")
	if got := readN(t, srv, len(h2Preface)); !bytes.Equal(got, h2Preface) {
		t.Fatalf("server got %q, want the preface after the hello", got)
	}
	srv.Close()
	waitEOF(t, guest, "the guest after the server closed")

	// A second hello (a hostile guest fishing for more): nothing.
	guest2 := accept(t, g.qemu, "the channel again")
	if _, err := guest2.Write(append(hello, h2Preface...)); err != nil {
		t.Fatal(err)
	}
	_ = guest2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if rest, err := io.ReadAll(guest2); err != nil || len(rest) != 0 {
		t.Fatalf("a second hello got %q, %v; want the channel dropped", rest, err)
	}
}
