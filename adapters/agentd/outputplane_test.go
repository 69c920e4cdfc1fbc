package agentd

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// cpOutput is one output data stream an agent opened at the fake server;
// its handler answers with the status sent on end (-1: a reset) once the
// test is done with the body.
type cpOutput struct {
	header     http.Header
	id, stream string
	body       io.Reader
	end        chan int
}

func (f *fakeCP) output(w http.ResponseWriter, r *http.Request) {
	o := &cpOutput{header: r.Header.Clone(), id: r.PathValue("id"), stream: r.PathValue("stream"), body: r.Body, end: make(chan int, 1)}
	select {
	case f.outputs <- o:
	case <-r.Context().Done():
		return
	}
	var st int
	select {
	case st = <-o.end:
	case <-r.Context().Done():
		return
	}
	if st < 0 {
		panic(http.ErrAbortHandler)
	}
	w.WriteHeader(st)
}

func (o *cpOutput) offset() string { return o.header.Get(agentwire.HeaderOutputOffset) }

// read reads n bytes of the stream's body.
func (o *cpOutput) read(t *testing.T, n int) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		b := make([]byte, n)
		k, _ := io.ReadFull(o.body, b)
		got <- string(b[:k])
	}()
	return within(t, got, "the data stream's bytes did not come")
}

// rest reads the body to its end; the error is nil for a clean end.
func (o *cpOutput) rest(t *testing.T) (string, error) {
	t.Helper()
	type res struct {
		b   []byte
		err error
	}
	got := make(chan res, 1)
	go func() {
		b, err := io.ReadAll(o.body)
		got <- res{b, err}
	}()
	r := within(t, got, "the data stream did not end")
	return string(r.b), r.err
}

func outputAck(id string, s sandboxv1.OutputStream, off uint64) *sandboxv1.ConnectResponse {
	return &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_OutputAck{OutputAck: &sandboxv1.OutputAck{CommandId: id, Stream: s, Offset: off}}}
}

// endsOf is where res says its streams end. A test that checks it takes
// the result before it answers the data streams' clean ends (marked
// resultBeforeEnd): a stream the server already ended is let go, and a
// result sent after that does not name it (the server has its bytes), so
// answering first raced the send loop and lost under load (9 of 300 runs).
func endsOf(res *sandboxv1.CommandResult) string {
	var s []string
	for _, e := range res.GetOutputEnds() {
		s = append(s, fmt.Sprintf("%s=%d", agentwire.OutputStreamName(e.GetStream()), e.GetOffset()))
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

func noMoreOutputs(t *testing.T, cp *fakeCP) {
	t.Helper()
	select {
	case o := <-cp.outputs:
		t.Fatalf("an unexpected data stream: %s %s from %s", o.id, o.stream, o.offset())
	default:
	}
}

// With a server that takes it, each command stream's output is the raw
// body of a data stream (signed in, for the connection, from its offset),
// the Connect stream keeping the start and the result, which names where
// the streams end; the output is kept until acknowledged.
func TestOutputOnTheDataPlane(t *testing.T) {
	cp, url := startCP(t)
	cp.outputOn.Store(true)
	r, a, s := agentOn(t, cp, url, func(*Config) {})
	if !s.reg.GetOutputDataPlane() {
		t.Fatal("the registration does not offer the output data plane")
	}
	p := startCommand(t, s, r, &sandboxv1.CommandRequest{CommandId: "cmd-1", Command: "x"})
	p.emit(ports.StreamStdout, "hello ")
	o := within(t, cp.outputs, "no data stream for stdout")
	if o.id != "cmd-1" || o.stream != "stdout" || o.offset() != "0" || o.header.Get(agentwire.HeaderOutputConnection) != s.connID ||
		o.header.Get(agentwire.HeaderAgentID) != testAgentID || o.header.Get(agentwire.HeaderAgentSecret) != testSecret {
		t.Fatalf("data stream %s %s %v", o.id, o.stream, o.header)
	}
	if got := o.read(t, 6); got != "hello " {
		t.Fatalf("stdout %q", got)
	}
	p.emit(ports.StreamStderr, "oops")
	e := within(t, cp.outputs, "no data stream for stderr")
	if e.stream != "stderr" || e.offset() != "0" {
		t.Fatalf("second data stream %s from %s", e.stream, e.offset())
	}
	if got := e.read(t, 4); got != "oops" {
		t.Fatalf("stderr %q", got)
	}
	p.emit(ports.StreamStdout, "world")
	if got := o.read(t, 5); got != "world" {
		t.Fatalf("stdout %q", got)
	}
	p.exit(ports.CommandResult{ExitCode: 2})
	for _, d := range []*cpOutput{o, e} {
		if rest, err := d.rest(t); rest != "" || err != nil {
			t.Fatalf("the %s stream ended with %q, %v; want a clean end", d.stream, rest, err)
		}
	}
	// No OutputChunk on the Connect stream: the next message is the result.
	// Taken before the streams' ends are answered (resultBeforeEnd).
	res := s.next(t).GetCommandResult()
	if res.GetExitCode() != 2 || endsOf(res) != "stderr=4 stdout=11" {
		t.Fatalf("result %v", res)
	}
	for _, d := range []*cpOutput{o, e} {
		d.end <- http.StatusNoContent
	}
	if a.out.pending() == 0 {
		t.Fatal("output let go before the server acknowledged it")
	}
	s.send(outputAck("cmd-1", pbStdout, 11))
	s.send(outputAck("cmd-1", pbStderr, 4))
	eventually(t, "output let go once acknowledged", func() bool { return a.out.pending() == 0 })
	noMoreOutputs(t, cp)
}

// A data stream cut in the middle ends the connection; the next one sends
// the stream again from its first unacknowledged offset.
func TestOutputDataPlaneCutStreamIsSentAgain(t *testing.T) {
	cp, url := startCP(t)
	cp.outputOn.Store(true)
	r, a, s1 := agentOn(t, cp, url, func(*Config) {})
	p := startCommand(t, s1, r, &sandboxv1.CommandRequest{CommandId: "cmd-1", Command: "x"})
	p.emit(ports.StreamStdout, "one ")
	o1 := within(t, cp.outputs, "no data stream")
	if got := o1.read(t, 4); got != "one " {
		t.Fatalf("%q", got)
	}
	s1.send(outputAck("cmd-1", pbStdout, 4))
	eventually(t, "acknowledged output let go", func() bool { return a.out.pending() == 0 })
	p.emit(ports.StreamStdout, "two ")
	if got := o1.read(t, 4); got != "two " {
		t.Fatalf("%q", got)
	}
	o1.end <- -1 // reset, unacknowledged
	s2 := cp.nextSession(t)
	o2 := within(t, cp.outputs, "no data stream on the next connection")
	if o2.offset() != "4" || o2.header.Get(agentwire.HeaderOutputConnection) != s2.connID {
		t.Fatalf("the next data stream from %s on connection %s (want 4 on %s)", o2.offset(), o2.header.Get(agentwire.HeaderOutputConnection), s2.connID)
	}
	p.emit(ports.StreamStdout, "three")
	if got := o2.read(t, 9); got != "two three" {
		t.Fatalf("sent again: %q", got)
	}
	p.exit(ports.CommandResult{})
	if rest, err := o2.rest(t); rest != "" || err != nil {
		t.Fatalf("end %q %v", rest, err)
	}
	if res := s2.next(t).GetCommandResult(); endsOf(res) != "stdout=13" { // resultBeforeEnd
		t.Fatalf("result %v", res)
	}
	o2.end <- http.StatusNoContent
	noMoreOutputs(t, cp)
}

// A data stream the server refuses as a command it does not have lets
// that stream's output go (as the server acknowledged such chunks), on
// the same connection.
func TestOutputDataPlaneRefusedCommandLetsGo(t *testing.T) {
	cp, url := startCP(t)
	cp.outputOn.Store(true)
	r, a, s := agentOn(t, cp, url, func(*Config) {})
	p := startCommand(t, s, r, &sandboxv1.CommandRequest{CommandId: "cmd-1", Command: "x"})
	p.emit(ports.StreamStdout, "lost")
	o := within(t, cp.outputs, "no data stream")
	o.end <- http.StatusNotFound
	eventually(t, "refused output let go", func() bool { return a.out.pending() == 0 })
	p.emit(ports.StreamStdout, "more")
	p.exit(ports.CommandResult{})
	res := s.next(t).GetCommandResult()
	if res.GetCommandId() != "cmd-1" || len(res.GetOutputEnds()) != 0 {
		t.Fatalf("result %v", res)
	}
	noMoreOutputs(t, cp)
	if n := cp.conns.Load(); n != 1 {
		t.Fatalf("%d connections: a refused data stream is no broken link", n)
	}
}

// Without the capability (AGENT_NO_OUTPUT_DATA_PLANE=1) an agent registers
// as one from before it and sends OutputChunk messages, whatever the server
// offers.
func TestNoOutputDataPlaneSendsChunks(t *testing.T) {
	cp, url := startCP(t)
	cp.outputOn.Store(true)
	r, _, s := agentOn(t, cp, url, func(c *Config) { c.NoOutputDataPlane = true })
	if s.reg.GetOutputDataPlane() {
		t.Fatal("registered with the output data plane")
	}
	p := startCommand(t, s, r, &sandboxv1.CommandRequest{CommandId: "cmd-1", Command: "x"})
	p.emit(ports.StreamStdout, "abc")
	if got := outputOf(t, s.next(t), "cmd-1"); got != (outMsg{pbStdout, "abc", 0, false}) {
		t.Fatalf("%+v", got)
	}
	p.exit(ports.CommandResult{})
	if got := outputOf(t, s.next(t), "cmd-1"); got != (outMsg{pbStdout, "", 3, true}) {
		t.Fatalf("%+v", got)
	}
	if res := s.next(t).GetCommandResult(); len(res.GetOutputEnds()) != 0 {
		t.Fatalf("result %v", res)
	}
	noMoreOutputs(t, cp)
}

// A drain ends the data streams cleanly after what they were given, before
// the agent's side of the Connect stream; the next connection sends what
// was not acknowledged, and the output arrives whole.
func TestDrainEndsDataStreamsFirst(t *testing.T) {
	cp, url := startCP(t)
	cp.outputOn.Store(true)
	r := newFakeRunner()
	cfg := testConfig(url, r)
	cfg.BackoffMin, cfg.BackoffMax = time.Hour, time.Hour
	runAgent(t, cfg)
	s1 := cp.nextSession(t)
	p := startCommand(t, s1, r, &sandboxv1.CommandRequest{CommandId: "cmd-1", Command: "x"})
	var want strings.Builder
	for i := range 200 {
		line := fmt.Sprintf("line-%d\n", i)
		p.emit(ports.StreamStdout, line)
		want.WriteString(line)
	}
	o1 := within(t, cp.outputs, "no data stream")
	got := o1.read(t, 10)
	s1.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Drain{Drain: &sandboxv1.Drain{Reason: "restart"}}})
	rest, err := o1.rest(t)
	if err != nil {
		t.Fatalf("the data stream did not end cleanly at the drain: %v", err)
	}
	got += rest
	select {
	case <-s1.inDone:
		t.Fatal("the agent closed its side before its data streams ended")
	default:
	}
	o1.end <- http.StatusNoContent
	within(t, s1.inDone, "the agent did not close its side of the drained stream")
	s1.dropStream(t)
	s2 := cp.nextSession(t)
	p.emit(ports.StreamStdout, "last\n")
	want.WriteString("last\n")
	o2 := within(t, cp.outputs, "no data stream on the next connection")
	// Nothing was acknowledged: the next connection sends it all again.
	from, err := strconv.Atoi(o2.offset())
	if err != nil || from != 0 {
		t.Fatalf("the next data stream starts at %q", o2.offset())
	}
	p.exit(ports.CommandResult{})
	again, err := o2.rest(t)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(again, got) || again != want.String() {
		t.Fatalf("got %d then %d bytes, want %d", len(got), len(again), want.Len())
	}
	if res := s2.next(t).GetCommandResult(); endsOf(res) != "stdout="+strconv.Itoa(want.Len()) { // resultBeforeEnd
		t.Fatalf("result %v", res)
	}
	o2.end <- http.StatusNoContent
}
