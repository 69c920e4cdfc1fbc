package agentrpc

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// connectSessionRawAgent registers id as an agent that offers the output
// data plane, session connections and input acknowledgements, and sends
// its connect report.
func (h *harness) connectSessionRawAgent(id string) *fakeAgent {
	h.t.Helper()
	reg := registration(id)
	reg.GetRegistration().OutputDataPlane = true
	reg.GetRegistration().SessionRaw = true
	reg.GetRegistration().StdinAcks = true
	a := h.connectAgentWith(h.client, id, nil, reg)
	if !a.ack.GetSessionRaw() {
		h.t.Fatalf("the ack of %s does not take session connections", id)
	}
	a.send(connectReport(a))
	return a
}

// sessionConn is a session connection as an agent opens it.
type sessionConn struct {
	status int
	conn   net.Conn
	r      *bufio.Reader
}

// openSession asks for a session connection of cmd's stream from off, as
// p's agent (p.body is not used); upgrade false leaves the upgrade out.
func (h *harness) openSession(p outputPost, upgrade bool) sessionConn {
	h.t.Helper()
	header := []string{HeaderAgentID, p.agent, HeaderAgentSecret, p.secret,
		agentwire.HeaderOutputOffset, strconv.FormatUint(p.offset, 10), agentwire.HeaderOutputConnection, p.conn}
	if upgrade {
		header = append(header, upgradeTo(agentwire.SessionRawProtocol)...)
	}
	c, br, resp := h.rawGet(OutputPath+p.cmd+"/"+p.stream, header, "")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		_ = c.Close()
		return sessionConn{status: resp.StatusCode}
	}
	return sessionConn{status: resp.StatusCode, conn: c, r: br}
}

func (s sessionConn) write(t *testing.T, data string) {
	t.Helper()
	if _, err := io.WriteString(s.conn, data); err != nil {
		t.Fatal(err)
	}
}

// frame reads the server's next frame on s.
func (s sessionConn) frame(t *testing.T) (agentwire.SessionInput, bool) {
	t.Helper()
	type res struct {
		in  agentwire.SessionInput
		end bool
		err error
	}
	got := make(chan res, 1)
	go func() {
		in, end, err := agentwire.ReadSessionFrame(s.r)
		got <- res{in, end, err}
	}()
	r := testkit.Receive(t, waitTimeout, got, "no frame on the session connection")
	if r.err != nil {
		t.Fatalf("session frame: %v", r.err)
	}
	return r.in, r.end
}

// startPTY starts a PTY command with open input on agent id.
func (h *harness) startPTY(id string, out *outputLog) ports.Command {
	h.t.Helper()
	cmd, err := h.svc.Start(h.t.Context(), id, ports.CommandSpec{Command: "sh", PTY: true, StdinOpen: true}, ports.StartOptions{OnOutput: out.add, Detached: true})
	if err != nil {
		h.t.Fatal(err)
	}
	return cmd
}

// sessionRawSetUp connects agent-a with session connections and starts a
// PTY command on it, whose output is logged.
func sessionRawSetUp(t *testing.T) (*harness, *fakeAgent, ports.Command, *outputLog) {
	h := newHarness(t)
	a := h.connectSessionRawAgent("agent-a")
	out := &outputLog{}
	cmd := h.startPTY("agent-a", out)
	a.recv() // the command
	return h, a, cmd, out
}

// openPTY opens a session connection of cmd's PTY from off, as a does.
func (h *harness) openPTY(a *fakeAgent, cmd ports.Command, off uint64) sessionConn {
	h.t.Helper()
	s := h.openSession(a.post(cmd.ID(), "pty", off, ""), true)
	if s.status != http.StatusSwitchingProtocols {
		h.t.Fatalf("session connection from %d: %d", off, s.status)
	}
	return s
}

// A session connection is let in exactly as an output data stream:
// signed in, for the agent's own command on its live connection, and only
// as an upgrade; nothing of a refused one is handed on.
func TestSessionConnectionRefusals(t *testing.T) {
	h := newHarness(t)
	a := h.connectSessionRawAgent("agent-a")
	b := h.connectSessionRawAgent("agent-b")
	var outA, outB outputLog
	cmdA := h.startPTY("agent-a", &outA)
	cmdB := h.startPTY("agent-b", &outB)
	a.barrier()
	b.barrier()
	wrongSecret := a.post(cmdA.ID(), "pty", 0, "")
	wrongSecret.secret = "nope"
	staleConn := a.post(cmdA.ID(), "pty", 0, "")
	staleConn.conn = "999"
	for _, c := range []struct {
		what    string
		post    outputPost
		upgrade bool
		status  int
	}{
		{"a wrong secret", wrongSecret, true, http.StatusUnauthorized},
		{"another agent's command", a.post(cmdB.ID(), "pty", 0, ""), true, http.StatusNotFound},
		{"an unknown command", a.post("cmd-nope", "pty", 0, ""), true, http.StatusNotFound},
		{"another connection", staleConn, true, http.StatusConflict},
		{"no upgrade", a.post(cmdA.ID(), "pty", 0, ""), false, http.StatusUpgradeRequired},
	} {
		if s := h.openSession(c.post, c.upgrade); s.status != c.status {
			t.Errorf("%s: %d, want %d", c.what, s.status, c.status)
		}
	}
	// Someone else's command's input never goes on a refused connection.
	if err := cmdB.WriteStdin(t.Context(), []byte("secret"), false); err != nil {
		t.Fatal(err)
	}
	if in := b.nextStdin(); string(in.GetData()) != "secret" {
		t.Fatalf("agent-b's input %q", in.GetData())
	}
	if len(outA.get()) != 0 || len(outB.get()) != 0 {
		t.Fatalf("refused connections handed on output: %+v %+v", outA.get(), outB.get())
	}
}

// On a session connection the PTY's output is placed and acknowledged as
// a data stream's, the session's input comes the other way in frames
// (not on the Connect stream), and the agent's clean end is answered with
// the end frame.
func TestSessionConnectionCarriesOutputAndInput(t *testing.T) {
	h, a, cmd, out := sessionRawSetUp(t)
	s := h.openPTY(a, cmd, 0)
	s.write(t, "$ ")
	waitAck(a, cmd.ID(), sandboxv1.OutputStream_OUTPUT_STREAM_PTY, 2)
	if err := cmd.WriteStdin(t.Context(), []byte("ls\r"), false); err != nil {
		t.Fatal(err)
	}
	in, end := s.frame(t)
	if end || string(in.Data) != "ls\r" || in.Offset != 0 || in.Epoch == "" || in.EOF {
		t.Fatalf("input frame %+v end=%v", in, end)
	}
	if m := a.pending(); m.GetStdin() != nil {
		t.Fatalf("the input also went on the Connect stream: %v", m)
	}
	a.send(stdinAck(cmd.ID(), 3, false))
	s.write(t, "ls\r\n")
	waitAck(a, cmd.ID(), sandboxv1.OutputStream_OUTPUT_STREAM_PTY, 6)
	if err := s.conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, end := s.frame(t); !end {
		t.Fatal("the agent's clean end was not answered with the end frame")
	}
	if got := out.text(ports.StreamPTY); got != "$ ls\r\n" {
		t.Fatalf("output %q", got)
	}
	// Input after the end goes on the Connect stream, from where it is.
	if err := cmd.WriteStdin(t.Context(), []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	if in := a.nextStdin(); string(in.GetData()) != "x" || in.GetOffset() != 3 {
		t.Fatalf("input after the end: %v", in)
	}
}

// A session connection cut in the middle: the output it brought is kept
// (and acknowledged), the next connection from an earlier offset adds only
// the rest, and the input not acknowledged goes again, in order, on the
// Connect stream before anything newer.
func TestSessionConnectionCutThenSentAgain(t *testing.T) {
	h, a, cmd, out := sessionRawSetUp(t)
	s1 := h.openPTY(a, cmd, 0)
	s1.write(t, "hello")
	waitAck(a, cmd.ID(), sandboxv1.OutputStream_OUTPUT_STREAM_PTY, 5)
	if err := cmd.WriteStdin(t.Context(), []byte("one"), false); err != nil {
		t.Fatal(err)
	}
	if in, _ := s1.frame(t); string(in.Data) != "one" {
		t.Fatalf("input %+v", in)
	}
	_ = s1.conn.Close() // cut; "one" is not acknowledged
	s2 := h.openPTY(a, cmd, 2)
	s2.write(t, "llo world")
	waitAck(a, cmd.ID(), sandboxv1.OutputStream_OUTPUT_STREAM_PTY, 11)
	if got := out.text(ports.StreamPTY); got != "hello world" {
		t.Fatalf("output %q", got)
	}
	for _, c := range out.get() {
		if c.Lost != 0 {
			t.Fatalf("a chunk with a gap: %+v", c)
		}
	}
	// "one" may have been lost with s1: it goes again, then "two", both on
	// the stream (s2 takes input once nothing is unacknowledged).
	if err := cmd.WriteStdin(t.Context(), []byte("two"), false); err != nil {
		t.Fatal(err)
	}
	first, second := a.nextStdin(), a.nextStdin()
	if string(first.GetData()) != "one" || first.GetOffset() != 0 || string(second.GetData()) != "two" || second.GetOffset() != 3 {
		t.Fatalf("input after the cut: %v then %v", first, second)
	}
	a.send(stdinAck(cmd.ID(), 6, false))
	testkit.Eventually(t, waitTimeout, "input acknowledged", func() bool {
		cmd.(*command).stdin.mu.Lock()
		defer cmd.(*command).stdin.mu.Unlock()
		return cmd.(*command).stdin.acked == 6
	})
	if err := cmd.WriteStdin(t.Context(), []byte("three"), false); err != nil {
		t.Fatal(err)
	}
	if in, _ := s2.frame(t); string(in.Data) != "three" || in.Offset != 6 {
		t.Fatalf("input once all was acknowledged: %+v", in)
	}
}

// A session connection never outlives its agent's link connection.
func TestSessionConnectionEndsWithItsLink(t *testing.T) {
	h, a, cmd, _ := sessionRawSetUp(t)
	s := h.openPTY(a, cmd, 0)
	a.hangUp()
	got := make(chan error, 1)
	go func() { _, err := s.r.ReadByte(); got <- err }()
	if err := testkit.Receive(t, waitTimeout, got, "the session connection outlived its link"); err == nil {
		t.Fatal("a byte on a session connection whose link ended")
	}
}
