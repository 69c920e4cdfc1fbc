package agentrpc

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// connectOutputPlaneAgent registers id as an agent that offers the output
// data plane, and sends its connect report.
func (h *harness) connectOutputPlaneAgent(id string) *fakeAgent {
	h.t.Helper()
	reg := registration(id)
	reg.GetRegistration().OutputDataPlane = true
	a := h.connectAgentWith(h.client, id, nil, reg)
	if !a.ack.GetOutputDataPlane() {
		h.t.Fatalf("the ack of %s does not take the output data plane", id)
	}
	a.send(connectReport(a))
	return a
}

// outputPost is one POST of an output data stream.
type outputPost struct {
	agent, secret, conn, cmd, stream string
	offset                           uint64
	body                             io.Reader
}

// postOutput calls the output route and returns its status.
func (h *harness) postOutput(p outputPost) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+OutputPath+p.cmd+"/"+p.stream, p.body)
	if err != nil {
		return 0, err
	}
	req.ContentLength = -1
	req.Header.Set(HeaderAgentID, p.agent)
	req.Header.Set(HeaderAgentSecret, p.secret)
	req.Header.Set(agentwire.HeaderOutputOffset, strconv.FormatUint(p.offset, 10))
	req.Header.Set(agentwire.HeaderOutputConnection, p.conn)
	resp, err := h.hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// post is a POST of data on a's current connection, as a sends it.
func (a *fakeAgent) post(cmd, stream string, off uint64, data string) outputPost {
	return outputPost{agent: a.id, secret: secretPrefix + a.id, conn: a.ack.GetConfig()[ConfigConnectionID], cmd: cmd, stream: stream,
		offset: off, body: strings.NewReader(data)}
}

func (h *harness) postOK(p outputPost) {
	h.t.Helper()
	st, err := h.postOutput(p)
	if err != nil || st != http.StatusNoContent {
		h.t.Fatalf("POST of %s's %s at %d: %d %v", p.cmd, p.stream, p.offset, st, err)
	}
}

// A data stream is served only for the agent's own command on its live
// connection, with its secret; anything else is refused before a byte of
// it is handed on.
func TestOutputDataPlaneRefusals(t *testing.T) {
	h := newHarness(t)
	a := h.connectOutputPlaneAgent("agent-a")
	b := h.connectOutputPlaneAgent("agent-b")
	var outA, outB outputLog
	cmdA, err := h.svc.Start(t.Context(), "agent-a", ports.CommandSpec{Command: "x"}, ports.StartOptions{OnOutput: outA.add, Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	cmdB, err := h.svc.Start(t.Context(), "agent-b", ports.CommandSpec{Command: "x"}, ports.StartOptions{OnOutput: outB.add, Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	a.barrier()
	b.barrier()
	wrongSecret := a.post(cmdA.ID(), "stdout", 0, "x")
	wrongSecret.secret = "nope"
	unknownAgent := a.post(cmdA.ID(), "stdout", 0, "x")
	unknownAgent.agent = "agent-z"
	staleConn := a.post(cmdA.ID(), "stdout", 0, "x")
	staleConn.conn = "999"
	for _, c := range []struct {
		what   string
		post   outputPost
		status int
	}{
		{"a wrong secret", wrongSecret, http.StatusUnauthorized},
		{"an unknown agent", unknownAgent, http.StatusUnauthorized},
		{"another agent's command", a.post(cmdB.ID(), "stdout", 0, "stolen"), http.StatusNotFound},
		{"an unknown command", a.post("cmd-nope", "stdout", 0, "x"), http.StatusNotFound},
		{"another connection", staleConn, http.StatusConflict},
		{"an unknown stream", a.post(cmdA.ID(), "stdin", 0, "x"), http.StatusBadRequest},
	} {
		st, err := h.postOutput(c.post)
		if err != nil || st != c.status {
			t.Errorf("%s: %d %v, want %d", c.what, st, err, c.status)
		}
	}
	// An agent that did not offer the plane has no data streams.
	old := h.connectAgent("host-01")
	if old.ack.GetOutputDataPlane() {
		t.Fatal("an agent without the capability was offered the output data plane")
	}
	old.send(connectReport(old))
	cmdOld, err := h.svc.Start(t.Context(), "host-01", ports.CommandSpec{Command: "x"}, ports.StartOptions{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := h.postOutput(old.post(cmdOld.ID(), "stdout", 0, "x")); err != nil || st != http.StatusConflict {
		t.Errorf("a data stream of an agent without the capability: %d %v", st, err)
	}
	if len(outA.get()) != 0 || len(outB.get()) != 0 {
		t.Fatalf("refused streams handed on output: %+v %+v", outA.get(), outB.get())
	}
}

// The bytes are placed by offset: what the server has is dropped, the
// acknowledgements follow what it handled, and a stream cut in the middle
// is taken up again from where the agent says.
func TestOutputDataPlaneDuplicatesAndACutStream(t *testing.T) {
	h := newHarness(t)
	a := h.connectOutputPlaneAgent("agent-a")
	var out outputLog
	cmd, err := h.svc.Start(t.Context(), "agent-a", ports.CommandSpec{Command: "x"}, ports.StartOptions{OnOutput: out.add, Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	a.recv() // the command
	h.postOK(a.post(cmd.ID(), "stdout", 0, "hello"))
	waitAck(a, cmd.ID(), stdout, 5)
	h.postOK(a.post(cmd.ID(), "stdout", 2, "llo world")) // sent again from before the ack
	waitAck(a, cmd.ID(), stdout, 11)
	if got := out.text(ports.StreamStdout); got != "hello world" {
		t.Fatalf("output %q", got)
	}

	// A stream cut after some bytes: those are handled (and acknowledged),
	// and the agent's next stream from an earlier offset adds only the rest.
	cut := a.post(cmd.ID(), "stdout", 11, "")
	cut.body = io.MultiReader(strings.NewReader("!!"), failingReader{})
	if st, err := h.postOutput(cut); err == nil && st == http.StatusNoContent {
		t.Fatal("a cut stream ended cleanly")
	}
	h.postOK(a.post(cmd.ID(), "stdout", 11, "!!?"))
	waitAck(a, cmd.ID(), stdout, 14)
	if got := out.text(ports.StreamStdout); got != "hello world!!?" {
		t.Fatalf("output after the cut %q", got)
	}
	for _, c := range out.get() {
		if c.Lost != 0 {
			t.Fatalf("a chunk with a gap: %+v", c)
		}
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("the agent's link broke") }

// A result that names where its output ends finishes the command only once
// the output got there, whichever plane brought it first.
func TestOutputDataPlaneResultWaitsForTheData(t *testing.T) {
	h := newHarness(t)
	a := h.connectOutputPlaneAgent("agent-a")
	var out outputLog
	cmd, err := h.svc.Start(t.Context(), "agent-a", ports.CommandSpec{Command: "x"}, ports.StartOptions{OnOutput: out.add})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()
	res := result(cmd.ID(), ports.CommandResult{ExitCode: 3})
	res.GetCommandResult().OutputEnds = []*sandboxv1.OutputEnd{{Stream: stdout, Offset: 10}, {Stream: stderr, Offset: 2}}
	a.send(res)
	a.barrier()
	if isDone(cmd) {
		t.Fatal("the command finished before its output came")
	}
	h.postOK(a.post(cmd.ID(), "stdout", 0, "0123456789"))
	a.barrier()
	if isDone(cmd) {
		t.Fatal("the command finished before its stderr came")
	}
	h.postOK(a.post(cmd.ID(), "stderr", 0, "e!"))
	if r := waitDone(t, cmd); r.ExitCode != 3 {
		t.Fatalf("result %+v", r)
	}
	if out.text(ports.StreamStdout) != "0123456789" || out.text(ports.StreamStderr) != "e!" {
		t.Fatalf("output at the end: %+v", out.get())
	}
}

// Output that never reaches the end a result names does not hold the
// command for ever.
func TestOutputDataPlaneResultWaitIsBounded(t *testing.T) {
	was := outputEndWait
	outputEndWait = 50 * time.Millisecond
	t.Cleanup(func() { outputEndWait = was })
	h := newHarness(t)
	a := h.connectOutputPlaneAgent("agent-a")
	cmd, err := h.svc.Start(t.Context(), "agent-a", ports.CommandSpec{Command: "x"}, ports.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()
	res := result(cmd.ID(), ports.CommandResult{ExitCode: 1})
	res.GetCommandResult().OutputEnds = []*sandboxv1.OutputEnd{{Stream: stdout, Offset: 10}}
	a.send(res)
	if r := waitDone(t, cmd); r.ExitCode != 1 {
		t.Fatalf("result %+v", r)
	}
}

// A data stream of a command the server learns of only from the connect
// report (a restarted server adopting what the agent kept) waits for that
// report instead of being refused.
func TestOutputDataPlaneWaitsForTheReport(t *testing.T) {
	h := newHarness(t)
	var out outputLog
	h.svc.Attach("agent-a", "kept-1", ports.StartOptions{OnOutput: out.add, Resume: map[ports.OutputStream]uint64{ports.StreamPTY: 3}})
	reg := registration("agent-a")
	reg.GetRegistration().OutputDataPlane = true
	a := h.connectAgentWith(h.client, "agent-a", nil, reg)
	got := make(chan int, 1)
	go func() {
		st, _ := h.postOutput(a.post("kept-1", "pty", 0, "abcdef"))
		got <- st
	}()
	eventually(t, "the data stream at the server", func() bool {
		h.svc.mu.Lock()
		c := h.svc.conns["agent-a"]
		h.svc.mu.Unlock()
		c.dataStreams.mu.Lock()
		defer c.dataStreams.mu.Unlock()
		return c.dataStreams.n == 1
	})
	a.barrier()
	select {
	case st := <-got:
		t.Fatalf("a data stream answered %d before the report", st)
	default:
	}
	a.send(connectReport(a, "kept-1"))
	if st := testkit.Receive(t, waitTimeout, got, "no answer to the data stream after the report"); st != http.StatusNoContent {
		t.Fatalf("after the report: %d", st)
	}
	if c := out.get(); len(c) != 1 || string(c[0].Data) != "def" || c[0].Offset != 3 {
		t.Fatalf("output %+v, want what the server lacked", c)
	}
}
