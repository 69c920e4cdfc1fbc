package agentrpc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// connectDataPlaneAgent registers id as an agent that offers the file data
// plane.
func (h *harness) connectDataPlaneAgent(id string) *fakeAgent {
	h.t.Helper()
	reg := registration(id)
	reg.GetRegistration().FileDataPlane = true
	return h.connectAgentWith(h.client, id, nil, reg)
}

// dataDo calls the data route of transferID as agent id (secret: its own
// unless given) and returns the status and body.
func (h *harness) dataDo(ctx context.Context, method, id, secret, transferID string, body io.Reader) (int, []byte, error) {
	if secret == "" {
		secret = secretPrefix + id
	}
	req, err := http.NewRequestWithContext(ctx, method, h.url+DataPath+transferID, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set(HeaderAgentID, id)
	req.Header.Set(HeaderAgentSecret, secret)
	resp, err := h.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (h *harness) dataStatus(method, id, secret, transferID string) int {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("stolen")
	}
	st, _, err := h.dataDo(ctx, method, id, secret, transferID, body)
	if err != nil {
		h.t.Fatalf("%s %s as %s: %v", method, transferID, id, err)
	}
	return st
}

// An agent that offers the data plane is asked for it on reads and writes
// (not on listings or deletes), and the bytes go as raw bodies: a read's
// POSTed, a write's fetched, the Transfer stream keeping the control.
func TestDataPlaneReadAndWrite(t *testing.T) {
	h := newHarness(t)
	a := h.connectDataPlaneAgent("agent-a")

	got := make(chan readResult, 1)
	go func() {
		r, err := h.svc.ReadFile(context.Background(), "agent-a", "/etc/hostname")
		got <- readResult{r, err}
	}()
	req := a.fileRequest()
	if !req.GetDataPlane() || req.GetOp() != sandboxv1.FileOp_FILE_OP_READ {
		t.Fatalf("file request %v, want a data-plane read", req)
	}
	s := h.openTransfer("agent-a", req.GetTransferId())
	sendT(t, s, ready(11))
	res := testkit.Receive(t, waitTimeout, got, "the read's start")
	if res.err != nil {
		t.Fatal(res.err)
	}
	posted := make(chan int, 1)
	go func() {
		st, _, err := h.dataDo(context.Background(), http.MethodPost, "agent-a", "", req.GetTransferId(), strings.NewReader("hello world"))
		if err != nil {
			st = -1
		}
		posted <- st
	}()
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(res.r)
		read <- b
	}()
	if st := testkit.Receive(t, waitTimeout, posted, "the POST's answer"); st != http.StatusNoContent {
		t.Fatalf("POST of the bytes: %d, want 204", st)
	}
	sendT(t, s, end(0, ""))
	if b := testkit.Receive(t, waitTimeout, read, "the read's bytes"); string(b) != "hello world" {
		t.Fatalf("read %q", b)
	}
	res.r.Close()

	wrote := make(chan error, 1)
	go func() {
		wrote <- h.svc.WriteFile(context.Background(), "agent-a", "/tmp/f", 0o600, strings.NewReader("uploaded bytes"))
	}()
	req = a.fileRequest()
	if !req.GetDataPlane() || req.GetOp() != sandboxv1.FileOp_FILE_OP_WRITE {
		t.Fatalf("file request %v, want a data-plane write", req)
	}
	s = h.openTransfer("agent-a", req.GetTransferId())
	st, b, err := h.dataDo(context.Background(), http.MethodGet, "agent-a", "", req.GetTransferId(), nil)
	if err != nil || st != http.StatusOK || string(b) != "uploaded bytes" {
		t.Fatalf("GET of the bytes: %d %q %v", st, b, err)
	}
	msg, err := s.Receive()
	if err != nil || !msg.GetEof() {
		t.Fatalf("after the bytes: %v %v, want eof", msg, err)
	}
	sendT(t, s, end(0, ""))
	if err := testkit.Receive(t, waitTimeout, wrote, "the write's end"); err != nil {
		t.Fatal(err)
	}

	go func() {
		_, err := h.svc.ListFiles(context.Background(), "agent-a", "/")
		wrote <- err
	}()
	if req := a.fileRequest(); req.GetDataPlane() {
		t.Fatalf("a listing asked for the data plane: %v", req)
	}
}

// The data route serves a transfer only to the agent it was asked of, with
// its secret, in its direction, once, and only while it lasts.
func TestDataRouteRefusals(t *testing.T) {
	h := newHarness(t)
	a := h.connectDataPlaneAgent("agent-a")
	h.connectDataPlaneAgent("agent-b")

	got := make(chan readResult, 1)
	go func() {
		r, err := h.svc.ReadFile(context.Background(), "agent-a", "f")
		got <- readResult{r, err}
	}()
	req := a.fileRequest()
	id := req.GetTransferId()
	s := h.openTransfer("agent-a", id)
	sendT(t, s, ready(3))
	res := testkit.Receive(t, waitTimeout, got, "the read's start")
	if res.err != nil {
		t.Fatal(res.err)
	}
	for _, c := range []struct {
		name, method, agent, secret, id string
		want                            int
	}{
		{"another agent", http.MethodPost, "agent-b", "", id, http.StatusNotFound},
		{"a wrong secret", http.MethodPost, "agent-a", "guess", id, http.StatusUnauthorized},
		{"an unknown id", http.MethodPost, "agent-a", "", id + "x", http.StatusNotFound},
		{"the id without its random part", http.MethodPost, "agent-a", "", strings.SplitN(id, ".", 2)[0], http.StatusNotFound},
		{"the wrong direction", http.MethodGet, "agent-a", "", id, http.StatusNotFound},
		{"another method", http.MethodPut, "agent-a", "", id, http.StatusMethodNotAllowed},
	} {
		if st := h.dataStatus(c.method, c.agent, c.secret, c.id); st != c.want {
			t.Errorf("%s: %d, want %d", c.name, st, c.want)
		}
	}
	// The owner is still served, once.
	posted := make(chan int, 1)
	go func() {
		st, _, err := h.dataDo(context.Background(), http.MethodPost, "agent-a", "", id, strings.NewReader("abc"))
		if err != nil {
			st = -1
		}
		posted <- st
	}()
	b := make([]byte, 3)
	if _, err := io.ReadFull(res.r, b); err != nil || string(b) != "abc" {
		t.Fatalf("read %q %v", b, err)
	}
	if st := h.dataStatus(http.MethodPost, "agent-a", "", id); st != http.StatusNotFound {
		t.Errorf("a second use of the id: %d, want 404", st)
	}
	sendT(t, s, end(0, ""))
	if rest, err := io.ReadAll(res.r); err != nil || len(rest) != 0 {
		t.Fatalf("the read's end: %q %v", rest, err)
	}
	if st := testkit.Receive(t, waitTimeout, posted, "the POST's answer"); st != http.StatusNoContent {
		t.Fatalf("the owner's POST: %d", st)
	}
	res.r.Close()
	if st := h.dataStatus(http.MethodPost, "agent-a", "", id); st != http.StatusNotFound {
		t.Errorf("the id of an ended transfer: %d, want 404", st)
	}
}

// A data stream the agent cuts is an error, never an end of file, with the
// agent's reason when it gives one; so are too many or too few bytes.
func TestDataPlaneCutReadIsAnError(t *testing.T) {
	h := newHarness(t)
	a := h.connectDataPlaneAgent("agent-a")
	for _, tc := range []struct {
		name  string
		body  string
		cut   bool
		end   *sandboxv1.TransferRequest
		check func(error) bool
	}{
		{"stream reset", "abc", true, nil, func(err error) bool { return errors.Is(err, ports.ErrAgentGone) }},
		{"agent reports failure", "abc", true, end(sandboxv1.FileError_FILE_ERROR_FAILED, "disk read error"),
			func(err error) bool { return strings.Contains(err.Error(), "disk read error") }},
		{"reset but a clean end", "abc", true, end(0, ""), func(err error) bool { return errors.Is(err, ports.ErrAgentGone) }},
		{"too many bytes", "0123456789abc", false, end(0, ""), func(err error) bool { return errors.Is(err, ports.ErrAgentGone) }},
		{"too few bytes", "abc", false, end(0, ""), func(err error) bool { return errors.Is(err, ports.ErrAgentGone) }},
	} {
		got := make(chan readResult, 1)
		go func() {
			r, err := h.svc.ReadFile(context.Background(), "agent-a", "f")
			got <- readResult{r, err}
		}()
		req := a.fileRequest()
		s := h.openTransfer("agent-a", req.GetTransferId())
		sendT(t, s, ready(10))
		res := testkit.Receive(t, waitTimeout, got, "the read's start")
		if res.err != nil {
			t.Fatalf("%s: %v", tc.name, res.err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		go func() {
			_, _, _ = h.dataDo(ctx, http.MethodPost, "agent-a", "", req.GetTransferId(), pr)
		}()
		go func() {
			_, _ = pw.Write([]byte(tc.body))
			if tc.cut {
				_ = pw.CloseWithError(errors.New("cut"))
				cancel()
			} else {
				_ = pw.Close()
			}
			if tc.end != nil {
				_ = s.Send(tc.end)
			} else {
				_ = s.CloseRequest()
			}
		}()
		b, err := io.ReadAll(res.r)
		res.r.Close()
		cancel()
		if err == nil || !tc.check(err) {
			t.Errorf("%s: read %q, %v", tc.name, b, err)
		}
	}
}

// An agent that refuses a data-plane upload (no permission) stops it at
// once, with its typed reason, without fetching a byte; an upload the
// server gives up is reset on the data stream and aborted on the control
// stream, so the agent keeps nothing.
func TestDataPlaneRefusedAndAbortedUploads(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxFileBytes = 8 })
	a := h.connectDataPlaneAgent("agent-a")

	wrote := make(chan error, 1)
	go func() {
		wrote <- h.svc.WriteFile(context.Background(), "agent-a", "/root/x", 0o644, strings.NewReader("abc"))
	}()
	req := a.fileRequest()
	s := h.openTransfer("agent-a", req.GetTransferId())
	sendT(t, s, end(sandboxv1.FileError_FILE_ERROR_PERMISSION_DENIED, "open /root/x: permission denied"))
	if err := testkit.Receive(t, waitTimeout, wrote, "the refused write's end"); !errors.Is(err, ports.ErrPermissionDenied) {
		t.Fatalf("refused upload: %v, want permission denied", err)
	}

	go func() {
		wrote <- h.svc.WriteFile(context.Background(), "agent-a", "/tmp/big", 0o644, bytes.NewReader(make([]byte, 1<<20)))
	}()
	req = a.fileRequest()
	s = h.openTransfer("agent-a", req.GetTransferId())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.url+DataPath+req.GetTransferId(), nil)
	hreq.Header.Set(HeaderAgentID, "agent-a")
	hreq.Header.Set(HeaderAgentSecret, secretPrefix+"agent-a")
	resp, err := h.hc.Do(hreq)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET of the bytes: %v %v", resp, err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("the data stream of an upload over the maximum ended cleanly")
	}
	resp.Body.Close()
	msg, err := s.Receive()
	if err != nil || !msg.GetAbort() {
		t.Fatalf("after an upload over the maximum: %v %v, want abort", msg, err)
	}
	sendT(t, s, end(sandboxv1.FileError_FILE_ERROR_FAILED, "the server gave up the upload"))
	if err := testkit.Receive(t, waitTimeout, wrote, "the aborted write's end"); !errors.Is(err, ports.ErrFileTooLarge) {
		t.Fatalf("upload over the maximum: %v, want too large", err)
	}
}

// An agent that does not offer the data plane (one from before it) is never
// asked for it: its bytes go in Transfer messages as before, and the data
// route refuses its transfer.
func TestNoDataPlaneForAnAgentThatDoesNotOfferIt(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	got := make(chan readResult, 1)
	go func() {
		r, err := h.svc.ReadFile(context.Background(), "agent-a", "f")
		got <- readResult{r, err}
	}()
	req := a.fileRequest()
	if req.GetDataPlane() {
		t.Fatalf("an agent without file_data_plane asked for it: %v", req)
	}
	if st := h.dataStatus(http.MethodPost, "agent-a", "", req.GetTransferId()); st != http.StatusNotFound {
		t.Errorf("the data route for a transfer without it: %d, want 404", st)
	}
	s := h.openTransfer("agent-a", req.GetTransferId())
	sendT(t, s, ready(3))
	sendT(t, s, data("abc"))
	sendT(t, s, end(0, ""))
	res := testkit.Receive(t, waitTimeout, got, "the read's start")
	if res.err != nil {
		t.Fatal(res.err)
	}
	b, err := io.ReadAll(res.r)
	res.r.Close()
	if err != nil || string(b) != "abc" {
		t.Fatalf("read %q %v", b, err)
	}
}
