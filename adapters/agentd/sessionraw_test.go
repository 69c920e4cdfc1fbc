package agentd

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// sessionRaw answers a session connection's upgrade and hands it to the
// test.
func (f *fakeCP) sessionRaw(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != agentwire.SessionRawProtocol {
		http.Error(w, "upgrade", http.StatusUpgradeRequired)
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+agentwire.SessionRawProtocol+"\r\n\r\n")
	h := r.Header.Clone()
	h.Set("x-test-path", r.URL.Path)
	f.sessionRaws <- &cpRaw{header: h, conn: c, r: brw.Reader}
}

// read reads n bytes of what the agent sent on c.
func (c *cpRaw) read(t *testing.T, n int) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		b := make([]byte, n)
		k, _ := io.ReadFull(c.r, b)
		got <- string(b[:k])
	}()
	return within(t, got, "the session connection's bytes did not come")
}

// input sends an input frame to the agent.
func (c *cpRaw) input(t *testing.T, epoch string, off uint64, data string, eof bool) {
	t.Helper()
	if _, err := c.conn.Write(agentwire.AppendSessionInput(nil, agentwire.SessionInput{Epoch: epoch, Offset: off, Data: []byte(data), EOF: eof})); err != nil {
		t.Fatal(err)
	}
}

// sessionCP runs an agent against a fake server that takes session
// connections.
func sessionCP(t *testing.T) (*fakeCP, *fakeRunner, *Agent, *cpSession) {
	t.Helper()
	cp, url := startCP(t)
	cp.outputOn.Store(true)
	cp.sessionOn.Store(true)
	r, a, s := agentOn(t, cp, url, func(*Config) {})
	return cp, r, a, s
}

func ptyCommand(id string) *sandboxv1.CommandRequest {
	return &sandboxv1.CommandRequest{CommandId: id, Command: "sh", AllocatePty: true}
}

// With a server that takes it, a PTY stream's output goes on a connection
// of its own (signed in, for the link's connection, from its offset), its
// input comes back on it, and at the command's end the agent half-closes
// it and waits for the server's end frame; the output stays kept until
// acknowledged. Streams that are not a PTY's stay HTTP/2 data streams.
func TestPTYSessionOnAConnectionOfItsOwn(t *testing.T) {
	cp, r, a, s := sessionCP(t)
	if !s.reg.GetSessionRaw() {
		t.Fatal("the registration does not offer session connections")
	}
	p := startCommand(t, s, r, ptyCommand("cmd-1"))
	p.emit(ports.StreamPTY, "$ ")
	c := within(t, cp.sessionRaws, "no session connection")
	if c.header.Get("x-test-path") != agentwire.OutputPath+"cmd-1/pty" || c.header.Get(agentwire.HeaderOutputOffset) != "0" ||
		c.header.Get(agentwire.HeaderOutputConnection) != s.connID || c.header.Get(agentwire.HeaderAgentID) != testAgentID ||
		c.header.Get(agentwire.HeaderAgentSecret) != testSecret {
		t.Fatalf("session connection %v", c.header)
	}
	if got := c.read(t, 2); got != "$ " {
		t.Fatalf("output %q", got)
	}
	c.input(t, "e1", 0, "ls\r", false)
	if e := p.event(t); e != "stdin:ls\r" {
		t.Fatalf("input %q", e)
	}
	c.input(t, "e1", 1, "s\rpwd\r", false) // sent again in part: only the rest is new
	if e := p.event(t); e != "stdin:pwd\r" {
		t.Fatalf("input %q", e)
	}
	// Acknowledged on the Connect stream, as input that came there.
	if ack := s.next(t).GetStdinAck(); ack.GetCommandId() != "cmd-1" || ack.GetWritten() != 7 {
		t.Fatalf("input acknowledged %v, want 7 bytes of cmd-1", ack)
	}
	p.emit(ports.StreamPTY, "ls\r\n")
	if got := c.read(t, 4); got != "ls\r\n" {
		t.Fatalf("output %q", got)
	}
	p.exit(ports.CommandResult{ExitCode: 0})
	if rest, err := io.ReadAll(c.r); len(rest) != 0 || err != nil {
		t.Fatalf("the session connection ended with %q, %v; want a half-close", rest, err)
	}
	res := s.next(t).GetCommandResult() // resultBeforeEnd
	if endsOf(res) != "pty=6" {
		t.Fatalf("result %v", res)
	}
	if _, err := c.conn.Write([]byte{agentwire.SessionFrameEnd}); err != nil {
		t.Fatal(err)
	}
	if a.out.pending() == 0 {
		t.Fatal("output let go before the server acknowledged it")
	}
	s.send(outputAck("cmd-1", pbPTY, 6))
	eventually(t, "output let go once acknowledged", func() bool { return a.out.pending() == 0 })
	// A piped command's output still goes on HTTP/2 data streams.
	p2 := startCommand(t, s, r, &sandboxv1.CommandRequest{CommandId: "cmd-2", Command: "x"})
	p2.emit(ports.StreamStdout, "piped")
	if o := within(t, cp.outputs, "no data stream for a piped command"); o.id != "cmd-2" || o.read(t, 5) != "piped" {
		t.Fatalf("data stream %s", o.id)
	}
	noSessionConnection(t, cp, "for a piped command")
}

// A session connection cut without the server's end frame ends the link's
// connection; the next one sends the output again from the first
// unacknowledged offset, on a new session connection.
func TestSessionConnectionCutIsSentAgain(t *testing.T) {
	cp, r, a, s1 := sessionCP(t)
	p := startCommand(t, s1, r, ptyCommand("cmd-1"))
	p.emit(ports.StreamPTY, "one ")
	c1 := within(t, cp.sessionRaws, "no session connection")
	if got := c1.read(t, 4); got != "one " {
		t.Fatalf("%q", got)
	}
	s1.send(outputAck("cmd-1", pbPTY, 4))
	eventually(t, "acknowledged output let go", func() bool { return a.out.pending() == 0 })
	p.emit(ports.StreamPTY, "two ")
	if got := c1.read(t, 4); got != "two " {
		t.Fatalf("%q", got)
	}
	_ = c1.conn.Close() // cut, "two " not acknowledged
	s2 := cp.nextSession(t)
	c2 := within(t, cp.sessionRaws, "no session connection on the next connection")
	if c2.header.Get(agentwire.HeaderOutputOffset) != "4" || c2.header.Get(agentwire.HeaderOutputConnection) != s2.connID {
		t.Fatalf("the next session connection from %s on %s (want 4 on %s)", c2.header.Get(agentwire.HeaderOutputOffset),
			c2.header.Get(agentwire.HeaderOutputConnection), s2.connID)
	}
	p.emit(ports.StreamPTY, "three")
	if got := c2.read(t, 9); got != "two three" {
		t.Fatalf("sent again: %q", got)
	}
}

// Without session connections (an older server, AGENT_NO_SESSION_RAW) a
// PTY stream's output goes on an HTTP/2 data stream as before.
func TestNoSessionRawKeepsTheDataStream(t *testing.T) {
	for _, c := range []struct {
		what      string
		serverHas bool
		offers    bool
		edit      func(*Config)
	}{
		{"an older server", false, true, func(*Config) {}},
		{"AGENT_NO_SESSION_RAW", true, false, func(c *Config) { c.NoSessionRaw = true }},
	} {
		t.Run(c.what, func(t *testing.T) {
			cp, url := startCP(t)
			cp.outputOn.Store(true)
			cp.sessionOn.Store(c.serverHas)
			r, _, s := agentOn(t, cp, url, c.edit)
			if s.reg.GetSessionRaw() != c.offers {
				t.Fatalf("the registration offers session connections: %v, want %v", s.reg.GetSessionRaw(), c.offers)
			}
			p := startCommand(t, s, r, ptyCommand("cmd-1"))
			p.emit(ports.StreamPTY, "$ ")
			if o := within(t, cp.outputs, "no data stream"); o.stream != "pty" || o.read(t, 2) != "$ " {
				t.Fatalf("data stream %s", o.stream)
			}
			noSessionConnection(t, cp, "without session connections")
		})
	}
}

// A drain ends a session connection cleanly after what it was given (the
// agent half-closes it and waits for the server's end frame) before the
// agent's side of the Connect stream; the next connection sends what was
// not acknowledged (here: all of it) on a new one.
func TestDrainEndsSessionConnectionsFirst(t *testing.T) {
	cp, url := startCP(t)
	cp.outputOn.Store(true)
	cp.sessionOn.Store(true)
	r := newFakeRunner()
	cfg := testConfig(url, r)
	cfg.BackoffMin, cfg.BackoffMax = time.Hour, time.Hour
	runAgent(t, cfg)
	s1 := cp.nextSession(t)
	p := startCommand(t, s1, r, ptyCommand("cmd-1"))
	var want strings.Builder
	for i := range 200 {
		line := fmt.Sprintf("line-%d\r\n", i)
		p.emit(ports.StreamPTY, line)
		want.WriteString(line)
	}
	c1 := within(t, cp.sessionRaws, "no session connection")
	s1.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Drain{Drain: &sandboxv1.Drain{Reason: "restart"}}})
	_ = c1.conn.SetReadDeadline(time.Now().Add(waitTimeout))
	got, err := io.ReadAll(c1.r)
	if err != nil || !strings.HasPrefix(want.String(), string(got)) {
		t.Fatalf("the session connection at the drain: %d bytes, %v; want what it was given, then a half-close", len(got), err)
	}
	select {
	case <-s1.inDone:
		t.Fatal("the agent closed its side before the server's end frame")
	default:
	}
	if _, err := c1.conn.Write([]byte{agentwire.SessionFrameEnd}); err != nil {
		t.Fatal(err)
	}
	within(t, s1.inDone, "the agent did not close its side of the drained stream")
	s1.dropStream(t)
	cp.nextSession(t)
	c2 := within(t, cp.sessionRaws, "no session connection on the next connection")
	if off := c2.header.Get(agentwire.HeaderOutputOffset); off != "0" {
		t.Fatalf("the next session connection starts at %s, want 0 (nothing acknowledged)", off)
	}
	p.emit(ports.StreamPTY, "last\r\n")
	want.WriteString("last\r\n")
	if again := c2.read(t, want.Len()); again != want.String() {
		t.Fatalf("sent again: %d bytes", len(again))
	}
}

// An acknowledgement that overtakes its output's retention (the writer of a
// session connection sends the bytes before the send loop pops them, and
// the server's ack can come back first) still lets that output go.
func TestOutboxAckBeforeRetention(t *testing.T) {
	o := newOutbox(1 << 20)
	o.requeue(true)
	o.push(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Output{Output: &sandboxv1.OutputChunk{
		StreamId: "cmd-1", Stream: pbPTY, Offset: 4, Data: []byte("two ")}}})
	o.ack("cmd-1", pbPTY, 8) // before the pop
	o.pop()
	if n := o.pending(); n != 0 {
		t.Fatalf("%d pending after an ack that covered it", n)
	}
	o.push(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Output{Output: &sandboxv1.OutputChunk{
		StreamId: "cmd-1", Stream: pbPTY, Offset: 8, Data: []byte("three")}}})
	o.pop()
	if n := o.pending(); n != 1 {
		t.Fatalf("%d pending, want the output past the ack retained", n)
	}
}

// noSessionConnection fails t if the agent opened a session connection.
func noSessionConnection(t *testing.T, cp *fakeCP, when string) {
	t.Helper()
	select {
	case c := <-cp.sessionRaws:
		t.Fatalf("a session connection %s: %v", when, c.header)
	default:
	}
}
