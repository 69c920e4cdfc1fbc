package agentd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1/sandboxv1connect"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// waitTimeout bounds every wait in these tests; nothing should come close,
// however loaded the machine: it only tells a hang from a slow run.
const waitTimeout = 15 * time.Second

const (
	testAgentID = "agent-a"
	testSecret  = "s3cret"
)

func testLogger() *slog.Logger {
	if os.Getenv("AGENT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// retryLog is a logger's handler that keeps the waits the agent chose
// before connecting again (the retry_in of its log lines), so a test sees
// the backoff itself rather than timing the attempts.
type retryLog struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (l *retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *retryLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *retryLog) WithGroup(string) slog.Handler            { return l }
func (l *retryLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "retry_in" {
			l.mu.Lock()
			l.waits = append(l.waits, a.Value.Duration())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

// retries returns the waits chosen so far.
func (l *retryLog) retries() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.waits...)
}

// eventually polls cond until it holds or waitTimeout passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, waitTimeout, what, cond)
}

// ---- fake control plane ----

// fakeCP is a management server: it accepts every registration (unless told
// to refuse) and hands each accepted stream to the test as a cpSession.
type fakeCP struct {
	sandboxv1connect.UnimplementedAgentServiceHandler

	hbSecs   uint32
	sessions chan *cpSession
	conns    atomic.Uint64

	mu       sync.Mutex
	refuse   connect.Code // non-zero: answer every attempt with this code
	notAck   bool         // answer with accepted=false
	attempts []time.Time
	headers  []http.Header

	// forwards are the Forward streams agents open, handed to the test.
	forwards chan *cpForward
	// raws are the raw forward connections (served only when rawOn).
	raws  chan *cpRaw
	rawOn atomic.Bool
	// outputs are the output data streams (outputplane_test.go), offered
	// in the ack only when outputOn.
	outputs  chan *cpOutput
	outputOn atomic.Bool
	// sessionRaws are the session connections (sessionraw_test.go),
	// offered in the ack only when sessionOn.
	sessionRaws chan *cpRaw
	sessionOn   atomic.Bool
}

// cpRaw is one raw forward connection after its upgrade.
type cpRaw struct {
	header http.Header
	conn   net.Conn
	r      *bufio.Reader
}

// forwardRaw answers a raw forward's upgrade and hands the connection to
// the test; 404 (an older server) unless rawOn.
func (f *fakeCP) forwardRaw(w http.ResponseWriter, r *http.Request) {
	if !f.rawOn.Load() {
		http.NotFound(w, r)
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: agentic-forward\r\n\r\n")
	f.raws <- &cpRaw{header: r.Header.Clone(), conn: c, r: brw.Reader}
}

// cpForward is one Forward stream; the handler returns when end is closed.
type cpForward struct {
	header http.Header
	stream *connect.BidiStream[sandboxv1.ForwardRequest, sandboxv1.ForwardResponse]
	end    chan struct{}
}

func (f *fakeCP) Forward(ctx context.Context, stream *connect.BidiStream[sandboxv1.ForwardRequest, sandboxv1.ForwardResponse]) error {
	fw := &cpForward{header: stream.RequestHeader().Clone(), stream: stream, end: make(chan struct{})}
	select {
	case f.forwards <- fw:
	case <-ctx.Done():
		return nil
	}
	select {
	case <-fw.end:
	case <-ctx.Done():
	}
	return nil
}

// cpSession is one accepted agent stream.
type cpSession struct {
	connID string
	header http.Header
	reg    *sandboxv1.Registration
	// reports are the connect-time session reports next skipped.
	reports []*sandboxv1.SessionReport
	in      chan *sandboxv1.ConnectRequest // everything after the registration
	out     chan *sandboxv1.ConnectResponse
	drop    chan struct{}
	once    sync.Once
	ended   chan struct{} // the handler returned
	inDone  chan struct{} // the agent's side ended
	// gate, when set, holds the reader back until the channel is closed.
	gate atomic.Pointer[chan struct{}]
}

// pauseReads makes the server stop reading the agent's messages (at most one
// more is read), so HTTP/2 flow control soon blocks the agent's sends.
func pauseReads(s *cpSession) {
	ch := make(chan struct{})
	s.gate.Store(&ch)
}

func resumeReads(s *cpSession) {
	if g := s.gate.Swap(nil); g != nil {
		close(*g)
	}
}

func startCP(t *testing.T) (*fakeCP, string) {
	t.Helper()
	return startCPWindow(t, 0)
}

// startCPWindow starts the fake control plane; a non-zero window bounds how
// much each stream buffers before the agent's sends block.
func startCPWindow(t *testing.T, window int) (*fakeCP, string) {
	t.Helper()
	cp := &fakeCP{hbSecs: 5, sessions: make(chan *cpSession, 16), forwards: make(chan *cpForward, 16), raws: make(chan *cpRaw, 16),
		outputs: make(chan *cpOutput, 16), sessionRaws: make(chan *cpRaw, 16)}
	mux := http.NewServeMux()
	mux.Handle(sandboxv1connect.NewAgentServiceHandler(cp))
	mux.HandleFunc("GET /agentic-sandbox/forward", cp.forwardRaw)
	mux.HandleFunc("POST /agentic-sandbox/output/{id}/{stream}", cp.output)
	mux.HandleFunc("GET /agentic-sandbox/output/{id}/{stream}", cp.sessionRaw)
	srv := httptest.NewUnstartedServer(mux)
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = p
	if window > 0 {
		srv.Config.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerStream: window, MaxReceiveBufferPerConnection: window}
	}
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return cp, srv.URL
}

func (f *fakeCP) setRefuse(code connect.Code) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = code
}

func (f *fakeCP) attemptTimes() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.attempts...)
}

func (f *fakeCP) Connect(ctx context.Context, stream *connect.BidiStream[sandboxv1.ConnectRequest, sandboxv1.ConnectResponse]) error {
	f.mu.Lock()
	f.attempts = append(f.attempts, time.Now())
	f.headers = append(f.headers, stream.RequestHeader().Clone())
	refuse, notAck := f.refuse, f.notAck
	f.mu.Unlock()
	if refuse != 0 {
		return connect.NewError(refuse, errors.New("refused by the fake control plane"))
	}
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	reg := first.GetRegistration()
	if reg == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("first message is not a registration"))
	}
	if notAck {
		return stream.Send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_RegistrationAck{RegistrationAck: &sandboxv1.RegistrationAck{
			Accepted: false, Message: "go away",
		}}})
	}
	connID := strconv.FormatUint(f.conns.Add(1), 10)
	if err := stream.Send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_RegistrationAck{RegistrationAck: &sandboxv1.RegistrationAck{
		Accepted: true, HeartbeatIntervalSeconds: f.hbSecs, Config: map[string]string{"connection_id": connID},
		OutputAcks: f.outputOn.Load(), OutputDataPlane: f.outputOn.Load(), SessionRaw: f.sessionOn.Load(),
	}}}); err != nil {
		return err
	}
	s := &cpSession{
		connID: connID,
		header: stream.RequestHeader().Clone(),
		reg:    reg,
		in:     make(chan *sandboxv1.ConnectRequest, 4096),
		out:    make(chan *sandboxv1.ConnectResponse, 64),
		drop:   make(chan struct{}),
		ended:  make(chan struct{}),
		inDone: make(chan struct{}),
	}
	defer close(s.ended)
	go func() {
		defer close(s.inDone)
		for {
			if gate := s.gate.Load(); gate != nil {
				<-*gate
			}
			m, err := stream.Receive()
			if err != nil {
				return
			}
			s.in <- m
		}
	}()
	f.sessions <- s
	for {
		select {
		case m := <-s.out:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-s.drop:
			return connect.NewError(connect.CodeUnavailable, errors.New("dropped by the fake control plane"))
		case <-s.inDone:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// nextSession waits for the next accepted stream.
func (f *fakeCP) nextSession(t *testing.T) *cpSession {
	t.Helper()
	return within(t, f.sessions, "the agent did not connect")
}

// within returns the next value from ch; none within waitTimeout fails the
// test with what.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return testkit.Receive(t, waitTimeout, ch, what)
}

func (s *cpSession) send(m *sandboxv1.ConnectResponse) { s.out <- m }

// dropStream ends the stream from the server side and waits until it is gone.
func (s *cpSession) dropStream(t *testing.T) {
	t.Helper()
	s.once.Do(func() { close(s.drop) })
	within(t, s.ended, "stream not dropped")
}

// recv returns the next message from the agent, heartbeats included.
func (s *cpSession) recv(t *testing.T) *sandboxv1.ConnectRequest {
	t.Helper()
	return within(t, s.in, "no message from the agent")
}

// nextAny returns the next message from the agent that is not a heartbeat.
func (s *cpSession) nextAny(t *testing.T) *sandboxv1.ConnectRequest {
	t.Helper()
	for {
		if m := s.recv(t); m.GetHeartbeat() == nil {
			return m
		}
	}
}

// isConnectReport tells the session report an agent sends after registering.
func (s *cpSession) isConnectReport(m *sandboxv1.ConnectRequest) bool {
	return m.GetSessionReport() != nil && m.GetSessionReport().GetRequestId() == "connect:"+s.connID
}

// next returns the next message from the agent that is neither a heartbeat
// nor the connect report (those are kept in s.reports).
func (s *cpSession) next(t *testing.T) *sandboxv1.ConnectRequest {
	t.Helper()
	for {
		m := s.recv(t)
		switch {
		case m.GetHeartbeat() != nil:
		case s.isConnectReport(m):
			s.reports = append(s.reports, m.GetSessionReport())
		default:
			return m
		}
	}
}

// pendingNonHeartbeat returns a message already received that next would
// return, or nil.
func (s *cpSession) pendingNonHeartbeat() *sandboxv1.ConnectRequest {
	for {
		select {
		case m := <-s.in:
			if s.isConnectReport(m) {
				s.reports = append(s.reports, m.GetSessionReport())
			} else if m.GetHeartbeat() == nil {
				return m
			}
		default:
			return nil
		}
	}
}

func commandMsg(req *sandboxv1.CommandRequest) *sandboxv1.ConnectResponse {
	return &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Command{Command: req}}
}

// ---- fake process runner ----

type fakeRunner struct {
	started     chan *fakeProc
	beforeStart func(ports.CommandSpec) // optional; runs inside Start
	pids        atomic.Int32
	// failStart: the next processes could not start (pid 0).
	failStart atomic.Bool
}

func newFakeRunner() *fakeRunner { return &fakeRunner{started: make(chan *fakeProc, 64)} }

func (r *fakeRunner) Start(spec ports.CommandSpec, onOutput func(ports.OutputStream, []byte)) ports.Process {
	if r.beforeStart != nil {
		r.beforeStart(spec)
	}
	p := &fakeProc{
		spec: spec, onOutput: onOutput, pid: int(1000 + r.pids.Add(1)),
		events: make(chan string, 256), done: make(chan struct{}),
	}
	if r.failStart.Load() {
		p.pid = 0
	}
	p.exitOnKill.Store(true)
	r.started <- p
	return p
}

func (r *fakeRunner) next(t *testing.T) *fakeProc {
	t.Helper()
	return within(t, r.started, "no process started")
}

// fakeProc is a process the test drives: it emits output and exits on demand
// and records what the agent does to it.
type fakeProc struct {
	spec     ports.CommandSpec
	onOutput func(ports.OutputStream, []byte)
	pid      int
	events   chan string
	// exitOnKill: Kill ends the process with SIGTERM's result (default).
	exitOnKill atomic.Bool

	once   sync.Once
	done   chan struct{}
	result ports.CommandResult
}

var killedResult = ports.CommandResult{ExitCode: 143, Signal: 15, Duration: 5 * time.Millisecond}

// emit produces output; only call it from one goroutine and before exit.
func (p *fakeProc) emit(s ports.OutputStream, data string) { p.onOutput(s, []byte(data)) }

func (p *fakeProc) exit(r ports.CommandResult) {
	p.once.Do(func() {
		p.result = r
		close(p.done)
	})
}

func (p *fakeProc) Pid() int { return p.pid }
func (p *fakeProc) WriteStdin(data []byte) error {
	p.events <- "stdin:" + string(data)
	return nil
}
func (p *fakeProc) CloseStdin() error {
	p.events <- "eof"
	return nil
}
func (p *fakeProc) Resize(cols, rows uint16) error {
	p.events <- fmt.Sprintf("resize:%dx%d", cols, rows)
	return nil
}
func (p *fakeProc) Signal(sig int) error {
	p.events <- fmt.Sprintf("signal:%d", sig)
	return nil
}
func (p *fakeProc) Kill() {
	p.events <- "kill"
	if p.exitOnKill.Load() {
		p.exit(killedResult)
	}
}
func (p *fakeProc) Done() <-chan struct{} { return p.done }
func (p *fakeProc) Wait() ports.CommandResult {
	<-p.done
	return p.result
}

func (p *fakeProc) event(t *testing.T) string {
	t.Helper()
	return within(t, p.events, "no event on the process")
}

// ---- the agent under test ----

func testConfig(url string, runner ports.ProcessRunner) Config {
	return Config{
		AgentID:    testAgentID,
		Secret:     testSecret,
		ServerURL:  url,
		Runtime:    sandboxv1.RuntimeKind_RUNTIME_KIND_CONTAINER,
		Labels:     map[string]string{"zone": "a"},
		Version:    "9.9.9",
		Runner:     runner,
		Logger:     testLogger(),
		BackoffMin: 50 * time.Millisecond,
		BackoffMax: 200 * time.Millisecond,
		// No ports reports in the message order the tests read
		// (listening_test.go turns them on).
		PortsInterval: -1,
	}
}

// runAgent builds an agent and runs it until the test ends.
func runAgent(t *testing.T, cfg Config) *Agent {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runBuilt(t, a)
	return a
}

// runBuilt runs an agent New built (and the test changed) until the test
// ends.
func runBuilt(t *testing.T, a *Agent) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := within(t, done, "Run did not return after its context ended"); err != nil {
			t.Errorf("Run returned %v", err)
		}
	})
}

// connectedAgent runs an agent with a fake runner against a fake server
// and returns them with the agent's first stream.
func connectedAgent(t *testing.T) (*fakeCP, *fakeRunner, *Agent, *cpSession) {
	t.Helper()
	cp, url := startCP(t)
	r, a, s := agentOn(t, cp, url, func(*Config) {})
	return cp, r, a, s
}

// agentOn runs an agent with a fake runner, its test configuration changed
// by edit, against cp and returns it with its first stream.
func agentOn(t *testing.T, cp *fakeCP, url string, edit func(*Config)) (*fakeRunner, *Agent, *cpSession) {
	t.Helper()
	r := newFakeRunner()
	cfg := testConfig(url, r)
	edit(&cfg)
	a := runAgent(t, cfg)
	return r, a, cp.nextSession(t)
}

// startCommand sends a command, checks the agent reports it started and
// returns the process the runner started.
func startCommand(t *testing.T, s *cpSession, r *fakeRunner, req *sandboxv1.CommandRequest) *fakeProc {
	t.Helper()
	s.send(commandMsg(req))
	p := r.next(t)
	st := s.next(t).GetCommandStarted()
	if st.GetCommandId() != req.GetCommandId() || st.GetPid() != int32(p.pid) || st.GetStartedAt() == nil {
		t.Fatalf("CommandStarted = %v, want %s with pid %d", st, req.GetCommandId(), p.pid)
	}
	return p
}

type outMsg struct {
	stream sandboxv1.OutputStream
	data   string
	off    uint64
	eof    bool
}

func outputOf(t *testing.T, m *sandboxv1.ConnectRequest, cmdID string) outMsg {
	t.Helper()
	o := m.GetOutput()
	if o == nil {
		t.Fatalf("want output of %s, got %v", cmdID, m)
	}
	if o.GetStreamId() != cmdID {
		t.Fatalf("output for %q, want %q", o.GetStreamId(), cmdID)
	}
	if o.GetTimestamp() == nil {
		t.Errorf("output chunk without timestamp: %v", o)
	}
	return outMsg{o.GetStream(), string(o.GetData()), o.GetOffset(), o.GetEof()}
}

const (
	pbStdout = sandboxv1.OutputStream_OUTPUT_STREAM_STDOUT
	pbStderr = sandboxv1.OutputStream_OUTPUT_STREAM_STDERR
	pbPTY    = sandboxv1.OutputStream_OUTPUT_STREAM_PTY
)
