package agentrpc

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

type transferClient = *connect.BidiStreamForClient[sandboxv1.TransferRequest, sandboxv1.TransferResponse]

// openTransfer opens the stream of transferID as agent id and names it.
func (h *harness) openTransfer(id, transferID string) transferClient {
	h.t.Helper()
	// Bounded: a stream the server wrongly keeps fails the test, not hangs it.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	h.t.Cleanup(cancel)
	s := h.client.Transfer(ctx)
	s.RequestHeader().Set(HeaderAgentID, id)
	s.RequestHeader().Set(HeaderAgentSecret, secretPrefix+id)
	if err := s.Send(&sandboxv1.TransferRequest{Payload: &sandboxv1.TransferRequest_Open{Open: &sandboxv1.TransferOpen{TransferId: transferID}}}); err != nil {
		h.t.Fatalf("opening transfer %s: %v", transferID, err)
	}
	return s
}

func (fa *fakeAgent) fileRequest() *sandboxv1.FileRequest {
	fa.t.Helper()
	for {
		m := fa.recv()
		if fr := m.GetFileRequest(); fr != nil {
			return fr
		}
	}
}

func sendT(t *testing.T, s transferClient, m *sandboxv1.TransferRequest) {
	t.Helper()
	if err := s.Send(m); err != nil {
		t.Fatalf("transfer send: %v", err)
	}
}

func ready(size int64) *sandboxv1.TransferRequest {
	return &sandboxv1.TransferRequest{Payload: &sandboxv1.TransferRequest_Ready{Ready: &sandboxv1.TransferReady{Size: size}}}
}

func data(b string) *sandboxv1.TransferRequest {
	return &sandboxv1.TransferRequest{Payload: &sandboxv1.TransferRequest_Data{Data: []byte(b)}}
}

func end(code sandboxv1.FileError, msg string) *sandboxv1.TransferRequest {
	return &sandboxv1.TransferRequest{Payload: &sandboxv1.TransferRequest_End{End: &sandboxv1.TransferEnd{Error: code, Message: msg}}}
}

type readResult struct {
	r   ports.FileReader
	err error
}

// An agent cannot take over another agent's transfer by naming its id: the
// stream is refused, and the owner still serves it.
func TestAnotherAgentCannotClaimATransfer(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	h.connectAgent("agent-b")
	got := make(chan readResult, 1)
	go func() {
		r, err := h.svc.ReadFile(context.Background(), "agent-a", "/etc/hostname")
		got <- readResult{r, err}
	}()
	req := a.fileRequest()
	if req.GetOp() != sandboxv1.FileOp_FILE_OP_READ || req.GetPath() != "/etc/hostname" {
		t.Fatalf("file request %v", req)
	}
	thief := h.openTransfer("agent-b", req.GetTransferId())
	if _, err := thief.Receive(); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("agent-b claiming agent-a's transfer: %v, want not_found", err)
	}
	owner := h.openTransfer("agent-a", req.GetTransferId())
	sendT(t, owner, ready(3))
	sendT(t, owner, data("abc"))
	sendT(t, owner, end(0, ""))
	res := <-got
	if res.err != nil {
		t.Fatal(res.err)
	}
	b, err := io.ReadAll(res.r)
	res.r.Close()
	if err != nil || string(b) != "abc" || res.r.Size() != 3 {
		t.Fatalf("read %q, %v (size %d)", b, err, res.r.Size())
	}
}

// A read the agent cuts short is an error, never a clean end of file; a file
// that grows past its announced size is too.
func TestACutReadIsAnError(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	for _, tc := range []struct {
		name string
		feed func(s transferClient)
	}{
		{"stream ends", func(s transferClient) { sendT(t, s, data("abc")); _ = s.CloseRequest() }},
		{"agent reports failure", func(s transferClient) {
			sendT(t, s, data("abc"))
			sendT(t, s, end(sandboxv1.FileError_FILE_ERROR_FAILED, "disk read error"))
		}},
		{"too many bytes", func(s transferClient) { sendT(t, s, data("0123456789abc")); sendT(t, s, end(0, "")) }},
		{"too few bytes", func(s transferClient) { sendT(t, s, data("abc")); sendT(t, s, end(0, "")) }},
	} {
		got := make(chan readResult, 1)
		go func() {
			r, err := h.svc.ReadFile(context.Background(), "agent-a", "f")
			got <- readResult{r, err}
		}()
		s := h.openTransfer("agent-a", a.fileRequest().GetTransferId())
		sendT(t, s, ready(10))
		res := <-got
		if res.err != nil {
			t.Fatalf("%s: %v", tc.name, res.err)
		}
		tc.feed(s)
		_, err := io.ReadAll(res.r)
		res.r.Close()
		if err == nil {
			t.Errorf("%s: the read ended cleanly", tc.name)
		}
	}
}

// An agent that refuses an upload stops it at once, with its reason,
// however much the caller still has to send.
func TestARefusedUploadStopsAtOnce(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	got := make(chan error, 1)
	go func() {
		got <- h.svc.WriteFile(context.Background(), "agent-a", "/etc/passwd", 0o644, endless{})
	}()
	req := a.fileRequest()
	if req.GetOp() != sandboxv1.FileOp_FILE_OP_WRITE || req.GetMode() != 0o644 || req.GetMaxBytes() != DefaultMaxFileBytes {
		t.Fatalf("file request %v", req)
	}
	s := h.openTransfer("agent-a", req.GetTransferId())
	sendT(t, s, end(sandboxv1.FileError_FILE_ERROR_PERMISSION_DENIED, "open /etc/.passwd.upload: permission denied"))
	select {
	case err := <-got:
		if !errors.Is(err, ports.ErrPermissionDenied) || !strings.Contains(err.Error(), "/etc/.passwd.upload") {
			t.Fatalf("WriteFile: %v, want the agent's permission denied", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the upload went on after the agent refused it")
	}
}

type endless struct{}

func (endless) Read(p []byte) (int, error) { return len(p), nil }

// An upload over the maximum is given up: the agent is told to abort.
func TestAnUploadOverTheMaximumIsAborted(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxFileBytes = 1 << 20 })
	a := h.connectAgent("agent-a")
	got := make(chan error, 1)
	go func() { got <- h.svc.WriteFile(context.Background(), "agent-a", "big", 0o644, endless{}) }()
	s := h.openTransfer("agent-a", a.fileRequest().GetTransferId())
	var n int
	for {
		m, err := s.Receive()
		if err != nil {
			t.Fatalf("the agent never heard of the abort (%d bytes): %v", n, err)
		}
		if m.GetAbort() {
			break
		}
		n += len(m.GetData())
	}
	if n > 1<<20 {
		t.Errorf("%d bytes sent, over the maximum", n)
	}
	sendT(t, s, end(sandboxv1.FileError_FILE_ERROR_FAILED, "aborted"))
	if err := <-got; !errors.Is(err, ports.ErrFileTooLarge) {
		t.Fatalf("WriteFile: %v, want ErrFileTooLarge", err)
	}
}

// Each agent has a bounded number of transfers in flight.
func TestTransfersPerAgentAreBounded(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, maxTransfersPerAgent)
	for range maxTransfersPerAgent {
		go func() {
			_, err := h.svc.ListFiles(ctx, "agent-a", ".")
			errs <- err
		}()
		a.fileRequest()
	}
	if _, err := h.svc.ListFiles(context.Background(), "agent-a", "."); !errors.Is(err, ports.ErrTooManyTransfers) {
		t.Fatalf("one transfer more: %v, want ErrTooManyTransfers", err)
	}
	cancel()
	for range maxTransfersPerAgent {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("a waiting transfer ended with %v", err)
		}
	}
	// Their places are free again.
	go func() { _, _ = h.svc.ListFiles(context.Background(), "agent-a", ".") }()
	if a.fileRequest() == nil {
		t.Fatal("no request after the others ended")
	}
}

type recordedAsks struct {
	ports.NoLinkReports
	mu   sync.Mutex
	asks []ports.PermissionRequest
}

func (r *recordedAsks) PermissionAsked(req ports.PermissionRequest) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asks = append(r.asks, req)
	return true
}

// A permission request reaches the task only for a command of the agent
// that sends it: naming another agent's command, or none, is dropped.
func TestAnAgentAsksPermissionOnlyForItsOwnCommands(t *testing.T) {
	rec := &recordedAsks{}
	h := newHarness(t, func(c *Config) { c.Reports = rec })
	a := h.connectAgent("agent-a")
	b := h.connectAgent("agent-b")
	cmd, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "claude"}, ports.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.recv() // the command
	ask := func(commandID string) *sandboxv1.ConnectRequest {
		return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_PermissionRequest{PermissionRequest: &sandboxv1.PermissionRequest{
			CommandId: commandID, RequestId: commandID + "-1", ToolName: "Bash", InputJson: `{"command":"true"}`,
		}}}
	}
	b.send(ask(cmd.ID()))
	b.send(ask("made-up"))
	a.send(ask(cmd.ID()))
	a.barrier()
	b.barrier()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.asks) != 1 || rec.asks[0].AgentID != "agent-a" || rec.asks[0].CommandID != cmd.ID() {
		t.Fatalf("asks heard: %+v; want only agent-a's for its own command", rec.asks)
	}
}
