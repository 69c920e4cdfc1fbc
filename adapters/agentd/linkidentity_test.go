package agentd

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
)

// rawPTY is a pseudo-terminal in raw mode: its slave path stands in for a
// virtio-serial port (a character device the agent opens), its master for
// the host side of the link.
func rawPTY(t *testing.T) (master *os.File, slavePath string) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slavePath = "/dev/pts/" + strconv.Itoa(n)
	// Keep one slave descriptor open: the terminal's raw settings last
	// while it is.
	s, err := os.OpenFile(slavePath, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := term.MakeRaw(int(s.Fd())); err != nil {
		t.Fatal(err)
	}
	return m, slavePath
}

// An agent started without an identity asks its link, refuses a bad
// answer, takes a good one (keeping it in the identity file, setting the
// clock and hostname), and registers under it over the same link.
func TestIdentityFromTheLink(t *testing.T) {
	cp, url := startCP(t)
	master, port := rawPTY(t)
	cfg := testConfig("serial://"+port, newFakeRunner())
	cfg.AgentID, cfg.Secret = "", ""
	cfg.IdentityFromLink = true
	cfg.IdentityFile = filepath.Join(t.TempDir(), "identity")
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var clock int64
	var hostname string
	a.guest = guestSystem{
		setClock:    func(ns int64) error { mu.Lock(); clock = ns; mu.Unlock(); return nil },
		setHostname: func(n string) error { mu.Lock(); hostname = n; mu.Unlock(); return nil },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); master.Close(); <-done })

	readHello := func() {
		t.Helper()
		buf := make([]byte, len(agentwire.LinkIdentityHello))
		if _, err := io.ReadFull(master, buf); err != nil || string(buf) != agentwire.LinkIdentityHello {
			t.Fatalf("hello: %q, %v", buf, err)
		}
	}
	readHello()
	// A hostile or confused host side: no usable identity. The agent
	// must not take it, and asks again.
	if _, err := master.WriteString(`{"agent_id":"../x","secret":"s"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	readHello()
	if id := a.ident.Load(); id.Secret != "" {
		t.Fatalf("took a bad answer: %+v", id)
	}
	now := time.Now().UnixNano()
	line, err := agentwire.EncodeLinkIdentity(agentwire.LinkIdentity{AgentID: "clone-7", Secret: "clone-secret", UnixNano: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := master.Write(line); err != nil {
		t.Fatal(err)
	}
	// Then the agent speaks HTTP/2 on the same link: carry it to the fake
	// control plane, as the host's relay does.
	srv, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go func() { _, _ = io.Copy(srv, master) }()
	go func() { _, _ = io.Copy(master, srv) }()
	s := cp.nextSession(t)
	if s.header.Get("x-agent-id") != "clone-7" || s.header.Get("x-agent-secret") != "clone-secret" || s.reg.GetAgentId() != "clone-7" {
		t.Fatalf("registered as %q/%q (registration %q)", s.header.Get("x-agent-id"), s.header.Get("x-agent-secret"), s.reg.GetAgentId())
	}
	id, secret, ok, err := ReadIdentityFile(cfg.IdentityFile)
	if err != nil || !ok || id != "clone-7" || secret != "clone-secret" {
		t.Fatalf("identity file: %q %q %v %v", id, secret, ok, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if clock != now || hostname != "clone-7" {
		t.Fatalf("clock %d (want %d), hostname %q", clock, now, hostname)
	}
}

func TestIdentityFromTheLinkNeedsASerialLink(t *testing.T) {
	cfg := testConfig("http://127.0.0.1:1", newFakeRunner())
	cfg.AgentID, cfg.Secret, cfg.IdentityFromLink = "", "", true
	if _, err := New(cfg); err == nil {
		t.Fatal("an identity from a TCP link accepted")
	}
}
