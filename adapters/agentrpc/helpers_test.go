package agentrpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1/sandboxv1connect"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// waitTimeout bounds every wait in these tests; nothing should come close,
// however loaded the machine: it only tells a hang from a slow run.
const waitTimeout = 15 * time.Second

const (
	operatorToken = "operator-token"
	secretPrefix  = "secret-of-"
)

// seqIDs is a ports.IDGenerator giving cmd-1, cmd-2, ...
type seqIDs struct{ n atomic.Int64 }

func (g *seqIDs) NewID() string { return fmt.Sprintf("cmd-%d", g.n.Add(1)) }

// harness is a Service mounted on a real h2c server on 127.0.0.1.
type harness struct {
	t      *testing.T
	svc    *Service
	cfg    Config
	clock  *portsfake.Clock
	creds  *portsfake.Credentials
	url    string
	hc     *http.Client
	client sandboxv1connect.AgentServiceClient
}

func testLogger() *slog.Logger {
	if os.Getenv("AGENTRPC_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}

func newHarness(t *testing.T, tweak ...func(*Config)) *harness {
	t.Helper()
	clock := portsfake.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	creds := portsfake.NewCredentials()
	for _, id := range []string{"agent-a", "agent-b", "host-01"} {
		_ = creds.Put(id, secretPrefix+id)
	}
	cfg := Config{
		Credentials:       creds,
		Clock:             clock,
		IDs:               &seqIDs{},
		Logger:            testLogger(),
		HeartbeatInterval: 7 * time.Second,
		DisconnectGrace:   time.Minute,
		CommandRetention:  time.Minute,
		OperatorToken:     operatorToken,
	}
	for _, f := range tweak {
		f(&cfg)
	}
	svc := New(cfg)
	mux := http.NewServeMux()
	svc.Mount(mux, true)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: p, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	hc := h2cClient()
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		_ = srv.Close()
	})
	url := "http://" + ln.Addr().String()
	return &harness{
		t: t, svc: svc, cfg: cfg, clock: clock, creds: creds, url: url, hc: hc,
		client: sandboxv1connect.NewAgentServiceClient(hc, url, connect.WithGRPC()),
	}
}

// fakeAgent is the client end of one agent stream.
type fakeAgent struct {
	t      *testing.T
	h      *harness
	id     string
	stream *connect.BidiStreamForClient[sandboxv1.ConnectRequest, sandboxv1.ConnectResponse]
	cancel context.CancelFunc
	ack    *sandboxv1.RegistrationAck

	msgs chan *sandboxv1.ConnectResponse
	// acks are the output acknowledgements, apart from msgs.
	acks chan *sandboxv1.OutputAck
	done chan struct{}
	err  error // valid once done is closed
}

// open starts a stream with the given credentials and sends nothing.
func (h *harness) open(id, secret string) *fakeAgent {
	return h.openVia(h.client, id, secret)
}

func (h *harness) openVia(client sandboxv1connect.AgentServiceClient, id, secret string) *fakeAgent {
	ctx, cancelCtx := context.WithCancel(context.Background())
	stream := client.Connect(ctx)
	stream.RequestHeader().Set(HeaderAgentID, id)
	if secret != "" {
		stream.RequestHeader().Set(HeaderAgentSecret, secret)
	}
	// The HTTP/2 transport only notices a cancelled context while it is
	// writing the request body, so closing the request side is what makes
	// the cancellation reach the server as a reset stream.
	cancel := func() {
		cancelCtx()
		_ = stream.CloseRequest()
	}
	h.t.Cleanup(cancel)
	return &fakeAgent{t: h.t, h: h, id: id, stream: stream, cancel: cancel}
}

// attempt opens a stream, sends first (if not nil) and returns the error of
// the server's first answer, or nil when it was a registration ack.
func (h *harness) attempt(id, secret string, first *sandboxv1.ConnectRequest) error {
	fa := h.open(id, secret)
	defer fa.cancel()
	if first != nil {
		_ = fa.stream.Send(first) // a refused stream may fail here; Receive has the reason
	}
	_ = fa.stream.CloseRequest()
	msg, err := fa.stream.Receive()
	if err != nil {
		return err
	}
	if msg.GetRegistrationAck() == nil {
		return fmt.Errorf("first answer is not a registration ack: %v", msg)
	}
	return nil
}

// connectAgent registers id with its real secret and starts reading.
func (h *harness) connectAgent(id string) *fakeAgent {
	h.t.Helper()
	return h.connectAgentVia(h.client, id, nil)
}

// connectAgentVia is connectAgent over another client; the agent reads
// nothing after the ack until gate is closed (nil: reads at once).
func (h *harness) connectAgentVia(client sandboxv1connect.AgentServiceClient, id string, gate <-chan struct{}) *fakeAgent {
	h.t.Helper()
	return h.connectAgentWith(client, id, gate, registration(id))
}

// connectAgentWith is connectAgentVia with a registration of its own.
func (h *harness) connectAgentWith(client sandboxv1connect.AgentServiceClient, id string, gate <-chan struct{}, reg *sandboxv1.ConnectRequest) *fakeAgent {
	h.t.Helper()
	fa := h.openVia(client, id, secretPrefix+id)
	if err := fa.stream.Send(reg); err != nil {
		h.t.Fatalf("send registration of %s: %v", id, err)
	}
	msg, err := fa.stream.Receive()
	if err != nil {
		h.t.Fatalf("registration of %s refused: %v", id, err)
	}
	fa.ack = msg.GetRegistrationAck()
	if fa.ack == nil {
		h.t.Fatalf("first answer to %s is not an ack: %v", id, msg)
	}
	fa.msgs = make(chan *sandboxv1.ConnectResponse, 1024)
	fa.acks = make(chan *sandboxv1.OutputAck, 1024)
	fa.done = make(chan struct{})
	go func() {
		defer close(fa.done)
		if gate != nil {
			<-gate
		}
		for {
			m, err := fa.stream.Receive()
			if err != nil {
				fa.err = err
				return
			}
			if ack := m.GetOutputAck(); ack != nil {
				select {
				case fa.acks <- ack:
				default: // a test that does not read them
				}
				continue
			}
			fa.msgs <- m
		}
	}()
	return fa
}

func (fa *fakeAgent) send(msg *sandboxv1.ConnectRequest) {
	fa.t.Helper()
	if err := fa.stream.Send(msg); err != nil {
		fa.t.Fatalf("agent %s send: %v", fa.id, err)
	}
}

// recv returns the next message the server sent to this agent.
func (fa *fakeAgent) recv() *sandboxv1.ConnectResponse {
	fa.t.Helper()
	return testkit.Receive(fa.t, waitTimeout, fa.msgs, "agent "+fa.id+": no message from the server")
}

// pending returns a message already queued, or nil if there is none.
func (fa *fakeAgent) pending() *sandboxv1.ConnectResponse {
	select {
	case m := <-fa.msgs:
		return m
	default:
		return nil
	}
}

// waitClosed waits until the server ended this stream and returns its error.
func (fa *fakeAgent) waitClosed() error {
	fa.t.Helper()
	testkit.Receive(fa.t, waitTimeout, fa.done, "agent "+fa.id+": stream still open")
	return fa.err
}

// hangUp drops the agent's end of the stream.
func (fa *fakeAgent) hangUp() {
	fa.t.Helper()
	fa.cancel()
	fa.waitClosed()
}

// barrier returns once the server has handled everything this agent sent
// before: it sends a heartbeat at a fresh clock instant and waits for the
// registry to show it. Only for the agent's current connection, and only
// with no heartbeat of the caller's in flight: one handled after the
// clock moved would pass for the barrier's, which would land later.
func (fa *fakeAgent) barrier() {
	fa.t.Helper()
	at := fa.h.clock.Advance(time.Millisecond)
	fa.send(heartbeat(sandboxv1.AgentStatus_AGENT_STATUS_READY, nil))
	eventually(fa.t, "heartbeat of "+fa.id+" recorded", func() bool {
		info, ok := fa.h.svc.Agent(fa.id)
		return ok && !info.LastHeartbeat.Before(at)
	})
}

// eventually polls cond until it holds or waitTimeout passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, waitTimeout, what, cond)
}

func waitDone(t *testing.T, cmd ports.Command) ports.CommandResult {
	t.Helper()
	testkit.Receive(t, waitTimeout, cmd.Done(), "command "+cmd.ID()+" not done")
	return cmd.Result()
}

func isDone(cmd ports.Command) bool {
	select {
	case <-cmd.Done():
		return true
	default:
		return false
	}
}

func agentInfoOf(t *testing.T, svc *Service, id string) ports.AgentInfo {
	t.Helper()
	info, ok := svc.Agent(id)
	if !ok {
		t.Fatalf("agent %s not listed", id)
	}
	return info
}

// outputLog records OnOutput calls.
type outputLog struct {
	mu     sync.Mutex
	chunks []ports.OutputChunk
}

func (o *outputLog) add(c ports.OutputChunk) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c.Data = bytes.Clone(c.Data)
	o.chunks = append(o.chunks, c)
}

func (o *outputLog) get() []ports.OutputChunk {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]ports.OutputChunk(nil), o.chunks...)
}

func (o *outputLog) text(s ports.OutputStream) string {
	var b bytes.Buffer
	for _, c := range o.get() {
		if c.Stream == s {
			b.Write(c.Data)
		}
	}
	return b.String()
}

// Message builders.

func registration(id string) *sandboxv1.ConnectRequest {
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Registration{Registration: &sandboxv1.Registration{
		AgentId:      id,
		Hostname:     "host-of-" + id,
		IpAddress:    "10.0.0.5",
		Runtime:      sandboxv1.RuntimeKind_RUNTIME_KIND_CONTAINER,
		AgentVersion: "1.2.3",
		Labels:       map[string]string{"zone": "a"},
		Capabilities: []string{"tmux", "git"},
		SystemInfo: &sandboxv1.SystemInfo{
			Os: "linux", Kernel: "6.1.0", Arch: "amd64", CpuCores: 4, MemoryBytes: 8 << 30, DiskBytes: 100 << 30,
		},
	}}}
}

func heartbeat(status sandboxv1.AgentStatus, m *sandboxv1.Metrics) *sandboxv1.ConnectRequest {
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Heartbeat{Heartbeat: &sandboxv1.Heartbeat{
		Status: status, Metrics: m,
	}}}
}

func output(cmdID string, s sandboxv1.OutputStream, off uint64, data string) *sandboxv1.ConnectRequest {
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Output{Output: &sandboxv1.OutputChunk{
		StreamId: cmdID, Stream: s, Data: []byte(data), Offset: off,
	}}}
}

func eofChunk(cmdID string, s sandboxv1.OutputStream, off uint64) *sandboxv1.ConnectRequest {
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Output{Output: &sandboxv1.OutputChunk{
		StreamId: cmdID, Stream: s, Offset: off, Eof: true,
	}}}
}

func result(cmdID string, r ports.CommandResult) *sandboxv1.ConnectRequest {
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_CommandResult{CommandResult: agentwire.CommandResult(cmdID, r)}}
}

// connectReport is the session report an agent sends right after it
// registered, listing the commands it still runs.
func connectReport(fa *fakeAgent, running ...string) *sandboxv1.ConnectRequest {
	rep := &sandboxv1.SessionReport{RequestId: "connect:" + fa.ack.GetConfig()[ConfigConnectionID]}
	for _, id := range running {
		rep.Sessions = append(rep.Sessions, &sandboxv1.SessionInfo{CommandId: id, State: sandboxv1.SessionState_SESSION_STATE_RUNNING})
	}
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_SessionReport{SessionReport: rep}}
}

func commandStarted(cmdID string, pid int32) *sandboxv1.ConnectRequest {
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_CommandStarted{CommandStarted: &sandboxv1.CommandStarted{
		CommandId: cmdID, Pid: pid,
	}}}
}

const (
	stdout = sandboxv1.OutputStream_OUTPUT_STREAM_STDOUT
	stderr = sandboxv1.OutputStream_OUTPUT_STREAM_STDERR
)

var errStore = errors.New("disk on fire")

// rawGet opens a connection of its own to the server, as an agent does for
// a raw connection, sends a GET of path with header (name, value, ... in
// that order) and extra right behind it, and reads the answer within
// waitTimeout. The connection closes with the test.
func (h *harness) rawGet(path string, header []string, extra string) (net.Conn, *bufio.Reader, *http.Response) {
	h.t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	var req strings.Builder
	req.WriteString("GET " + path + " HTTP/1.1\r\nHost: agentic-sandbox\r\n")
	for i := 0; i+1 < len(header); i += 2 {
		req.WriteString(header[i] + ": " + header[i+1] + "\r\n")
	}
	req.WriteString("\r\n" + extra)
	if _, err := io.WriteString(c, req.String()); err != nil {
		h.t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		h.t.Fatalf("the answer to GET %s: %v", path, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, br, resp
}

// upgradeTo are the headers of an HTTP/1.1 upgrade to protocol.
func upgradeTo(protocol string) []string {
	return []string{"Connection", "Upgrade", "Upgrade", protocol}
}
