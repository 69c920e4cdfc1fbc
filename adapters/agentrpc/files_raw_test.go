package agentrpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// rawData asks for the bytes of write transferID on a connection of its
// own, as agent id with secret (its own when empty); after a 101 the
// connection and its reader are returned, otherwise the status.
func (h *harness) rawData(id, secret, transferID string) (int, net.Conn, *bufio.Reader) {
	h.t.Helper()
	if secret == "" {
		secret = secretPrefix + id
	}
	c, br, resp := h.rawGet(DataPath+transferID, append([]string{HeaderAgentID, id, HeaderAgentSecret, secret}, upgradeTo(DataRawProtocol)...), "")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		_ = c.Close()
		return resp.StatusCode, nil, nil
	}
	return resp.StatusCode, c, br
}

// A write's bytes on a connection of the agent's own: only its agent, with
// its secret, gets them, once; they come raw up to the server's
// half-close, and only then the eof on the Transfer stream.
func TestRawDataConnectionWrite(t *testing.T) {
	h := newHarness(t)
	a := h.connectDataPlaneAgent("agent-a")
	h.connectDataPlaneAgent("agent-b")
	data := bytes.Repeat([]byte("0123456789abcdef"), 40<<10) // 640 KiB: more than the sockets hold
	wrote := make(chan error, 1)
	go func() {
		wrote <- h.svc.WriteFile(context.Background(), "agent-a", "/tmp/f", 0o600, bytes.NewReader(data))
	}()
	req := a.fileRequest()
	if !req.GetDataPlane() {
		t.Fatalf("file request %v, want a data-plane write", req)
	}
	id := req.GetTransferId()
	s := h.openTransfer("agent-a", id)
	for _, c := range []struct {
		name, agent, secret string
		want                int
	}{
		{"a wrong secret", "agent-a", "guess", http.StatusUnauthorized},
		{"another agent", "agent-b", "", http.StatusNotFound},
	} {
		if st, _, _ := h.rawData(c.agent, c.secret, id); st != c.want {
			t.Errorf("%s: %d, want %d", c.name, st, c.want)
		}
	}
	st, conn, br := h.rawData("agent-a", "", id)
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("the owner's upgrade: %d", st)
	}
	got, err := io.ReadAll(br)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the bytes: %d of %d, %v", len(got), len(data), err)
	}
	msg, err := s.Receive()
	if err != nil || !msg.GetEof() {
		t.Fatalf("after the bytes: %v %v, want eof", msg, err)
	}
	if st, _, _ := h.rawData("agent-a", "", id); st != http.StatusNotFound {
		t.Errorf("a second use of the id: %d, want 404", st)
	}
	sendT(t, s, end(0, ""))
	if err := testkit.Receive(t, waitTimeout, wrote, "the write's end"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
}

// An agent that ends a raw write early (its helper could not write the
// file) stops it at once with its typed reason, even while the upload's
// body has nothing to read; a connection that breaks mid-way is an abort
// on the Transfer stream, never an eof, and the write an error.
func TestRawDataConnectionEndedOrBroken(t *testing.T) {
	h := newHarness(t)
	a := h.connectDataPlaneAgent("agent-a")

	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write(make([]byte, 64<<10)) }() // then nothing more
	wrote := make(chan error, 1)
	go func() { wrote <- h.svc.WriteFile(context.Background(), "agent-a", "/root/x", 0o644, pr) }()
	req := a.fileRequest()
	s := h.openTransfer("agent-a", req.GetTransferId())
	st, conn, br := h.rawData("agent-a", "", req.GetTransferId())
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d", st)
	}
	if _, err := io.ReadFull(br, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	sendT(t, s, end(sandboxv1.FileError_FILE_ERROR_PERMISSION_DENIED, "open /root/x: permission denied"))
	if err := testkit.Receive(t, waitTimeout, wrote, "the refused write's end"); !errors.Is(err, ports.ErrPermissionDenied) {
		t.Fatalf("refused upload: %v, want permission denied", err)
	}
	_ = conn.Close()

	go func() {
		wrote <- h.svc.WriteFile(context.Background(), "agent-a", "/tmp/x", 0o644, bytes.NewReader(make([]byte, 8<<20)))
	}()
	req = a.fileRequest()
	s = h.openTransfer("agent-a", req.GetTransferId())
	st, conn, br = h.rawData("agent-a", "", req.GetTransferId())
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d", st)
	}
	if _, err := io.ReadFull(br, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close() // with bytes unread: the server's copy breaks
	msg, err := s.Receive()
	if err != nil || !msg.GetAbort() {
		t.Fatalf("after a broken data connection: %v %v, want abort", msg, err)
	}
	sendT(t, s, end(sandboxv1.FileError_FILE_ERROR_FAILED, "the server gave up the upload"))
	if err := testkit.Receive(t, waitTimeout, wrote, "the broken write's end"); err == nil {
		t.Fatal("an upload whose data connection broke ended well")
	}
}
