package agentrpc

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// rawSplicer is what adapters/rest asks of a download it may splice.
type rawSplicer interface {
	Spliceable() bool
	SpliceTo(dst net.Conn, idle time.Duration) (int64, error)
}

// tcpPair is a connected pair of TCP connections on 127.0.0.1.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	s, c := connPair(t, "tcp", "127.0.0.1:0")
	return s.(*net.TCPConn), c.(*net.TCPConn)
}

// connPair is a connected pair of stream sockets listening at addr: the
// accepted end first, both closed at the test's end.
func connPair(t *testing.T, network, addr string) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
	return s, c
}

// startRawRead starts a read of agent-a's /f, which the fake agent takes
// on a raw connection as a new agent does: the upgrade before the ready.
// It returns the reader, the agent's raw connection and Transfer stream.
func startRawRead(t *testing.T, h *harness, a *fakeAgent, size int64) (ports.FileReader, net.Conn, transferClient) {
	t.Helper()
	return startRaw(t, h, a, size, h.svc.ReadFile)
}

// startRaw is startRawRead of read's: ReadFile's or ReadArchive's.
func startRaw(t *testing.T, h *harness, a *fakeAgent, size int64, read func(context.Context, string, string) (ports.FileReader, error)) (ports.FileReader, net.Conn, transferClient) {
	t.Helper()
	got := make(chan readResult, 1)
	go func() {
		r, err := read(context.Background(), "agent-a", "/f")
		got <- readResult{r, err}
	}()
	req := a.fileRequest()
	if !req.GetDataPlane() {
		t.Fatalf("file request %v, want a data-plane read", req)
	}
	s := h.openTransfer("agent-a", req.GetTransferId())
	st, conn, _ := h.rawData("agent-a", "", req.GetTransferId())
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("the read's upgrade: %d", st)
	}
	sendT(t, s, ready(size))
	res := testkit.Receive(t, waitTimeout, got, "the read's reader")
	if res.err != nil {
		t.Fatal(res.err)
	}
	t.Cleanup(func() { _ = res.r.Close() })
	return res.r, conn, s
}

// A read's bytes on a connection of the agent's own: only its agent gets
// the route, once; opened before the ready, the connection is the
// reader's, which splices the bytes into a socket and holds the last one
// back until the connection has ended there and the agent's end is clean.
func TestRawDataConnectionRead(t *testing.T) {
	h := newHarness(t)
	a := h.connectDataPlaneAgent("agent-a")
	h.connectDataPlaneAgent("agent-b")
	data := bytes.Repeat([]byte("0123456789abcdef"), 200<<10) // 3.2 MiB: more than the sockets hold

	got := make(chan readResult, 1)
	go func() {
		r, err := h.svc.ReadFile(context.Background(), "agent-a", "/f")
		got <- readResult{r, err}
	}()
	req := a.fileRequest()
	s := h.openTransfer("agent-a", req.GetTransferId())
	for _, c := range []struct {
		name, agent, secret string
		want                int
	}{
		{"a wrong secret", "agent-a", "guess", http.StatusUnauthorized},
		{"another agent", "agent-b", "", http.StatusNotFound},
	} {
		if st, _, _ := h.rawData(c.agent, c.secret, req.GetTransferId()); st != c.want {
			t.Errorf("%s: %d, want %d", c.name, st, c.want)
		}
	}
	st, conn, _ := h.rawData("agent-a", "", req.GetTransferId())
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("the owner's upgrade: %d", st)
	}
	if st, _, _ := h.rawData("agent-a", "", req.GetTransferId()); st != http.StatusNotFound {
		t.Errorf("a second use of the id: %d, want 404", st)
	}
	sendT(t, s, ready(int64(len(data))))
	res := testkit.Receive(t, waitTimeout, got, "the read's reader")
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.r.Close()
	sp, ok := res.r.(rawSplicer)
	if !ok || !sp.Spliceable() {
		t.Fatalf("a read on a raw connection: %T, not spliceable", res.r)
	}
	dst, client := tcpPair(t)
	spliced := make(chan error, 1)
	go func() {
		n, err := sp.SpliceTo(dst, time.Minute)
		if err == nil && n != int64(len(data)) {
			err = io.ErrShortWrite
		}
		spliced <- err
		_ = dst.Close()
	}()
	go func() {
		_, _ = conn.Write(data)
		_ = conn.Close()
	}()
	// All but the last byte come; the last waits for the agent's end.
	if _, err := io.ReadFull(client, make([]byte, len(data)-1)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-spliced:
		t.Fatalf("the splice ended before the agent did: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	sendT(t, s, end(0, ""))
	if err := testkit.Receive(t, waitTimeout, spliced, "the splice's end"); err != nil {
		t.Fatal(err)
	}
	last, err := io.ReadAll(client)
	if err != nil || !bytes.Equal(last, data[len(data)-1:]) {
		t.Fatalf("after the end: %q %v, want the last byte", last, err)
	}
}

// A raw read the agent ends with an error after all of its bytes (the
// file changed meanwhile), or whose connection ends short, or that is
// read over its size, leaves the socket short of the size: never the
// whole, and an error.
func TestASplicedReadThatFailsStopsShort(t *testing.T) {
	h := newHarness(t)
	a := h.connectDataPlaneAgent("agent-a")
	const size = 2 << 20
	for _, c := range []struct {
		name string
		sent int
		end  *sandboxv1.TransferRequest
	}{
		{"the agent's error after the bytes", size, end(sandboxv1.FileError_FILE_ERROR_FAILED, "the file changed while it was read")},
		{"the connection short", size / 2, end(0, "")},
		{"more than the size", size + 10, end(0, "")},
	} {
		r, conn, s := startRawRead(t, h, a, size)
		dst, client := tcpPair(t)
		spliced := make(chan error, 1)
		go func() {
			_, err := r.(rawSplicer).SpliceTo(dst, time.Minute)
			spliced <- err
			_ = dst.Close()
		}()
		go func() {
			_, _ = conn.Write(make([]byte, c.sent))
			_ = conn.Close()
			_ = s.Send(c.end)
		}()
		b, _ := io.ReadAll(client)
		if err := testkit.Receive(t, waitTimeout, spliced, "the splice's end"); err == nil {
			t.Errorf("%s: the splice ended well", c.name)
		}
		if len(b) >= size {
			t.Errorf("%s: %d bytes reached the socket, want fewer than %d", c.name, len(b), size)
		}
		_ = r.Close()
	}
}

// Read, not spliced, takes a raw connection's bytes as a data stream's:
// all of them, then the agent's end.
func TestARawReadReadsAsADataStream(t *testing.T) {
	h := newHarness(t)
	a := h.connectDataPlaneAgent("agent-a")
	r, conn, s := startRawRead(t, h, a, 5)
	go func() {
		_, _ = io.WriteString(conn, "hello")
		_ = conn.Close()
		_ = s.Send(end(0, ""))
	}()
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "hello" {
		t.Fatalf("%q %v", b, err)
	}
}

// An agent's error stops a splice at once, also while it waits on a
// client that reads nothing: the idle bound is not waited out.
func TestAnAgentErrorStopsASpliceWaitingOnTheClient(t *testing.T) {
	h := newHarness(t)
	a := h.connectDataPlaneAgent("agent-a")
	const size = 32 << 20 // more than the sockets hold
	r, conn, s := startRawRead(t, h, a, size)
	dst, client := tcpPair(t)
	_ = dst.SetWriteBuffer(16 << 10)
	_ = client.SetReadBuffer(16 << 10)
	spliced := make(chan error, 1)
	go func() {
		_, err := r.(rawSplicer).SpliceTo(dst, time.Hour)
		spliced <- err
		_ = dst.Close()
	}()
	wrote := make(chan struct{})
	go func() {
		_, _ = conn.Write(make([]byte, 4<<20))
		close(wrote)
	}()
	testkit.Receive(t, waitTimeout, wrote, "the agent's first bytes taken")
	sendT(t, s, end(sandboxv1.FileError_FILE_ERROR_FAILED, "the file changed while it was read"))
	if err := testkit.Receive(t, waitTimeout, spliced, "the splice's end"); err == nil {
		t.Fatal("the splice ended well")
	}
	_ = conn.Close()
}

// An archive on a raw connection (its size not known): all of its bytes,
// then the agent's end, which alone makes it whole: an error there, or a
// connection cut short of the agent's clean end, is an error after the
// bytes, never an end of file.
func TestARawArchiveEndsAsTheAgentSays(t *testing.T) {
	h := newHarness(t)
	a := h.connectDataPlaneAgent("agent-a")
	data := bytes.Repeat([]byte("tar "), 300<<10)
	for _, c := range []struct {
		name  string
		end   *sandboxv1.TransferRequest
		clean bool
	}{
		{"a clean end", end(0, ""), true},
		{"an error at the end", end(sandboxv1.FileError_FILE_ERROR_FAILED, "write too long"), false},
	} {
		r, conn, s := startRaw(t, h, a, -1, h.svc.ReadArchive)
		if sp, ok := r.(rawSplicer); ok && sp.Spliceable() {
			t.Errorf("%s: an archive of no known size is spliceable", c.name)
		}
		go func() {
			_, _ = conn.Write(data)
			_ = conn.Close()
			_ = s.Send(c.end)
		}()
		b, err := io.ReadAll(r)
		if c.clean && (err != nil || !bytes.Equal(b, data)) {
			t.Errorf("%s: %d bytes, %v; want %d and the end", c.name, len(b), err, len(data))
		}
		if !c.clean && err == nil {
			t.Errorf("%s: %d bytes and a clean end", c.name, len(b))
		}
		_ = r.Close()
	}
}

// A client gone mid-splice stops it at once with an error; the agent's
// connection is closed (its send fails, so the helper ends), and once the
// reader is closed nothing of the read is left: no goroutine, no place
// among the agent's transfers.
func TestAClientGoneMidSpliceLeavesNothing(t *testing.T) {
	h := newHarness(t)
	a := h.connectDataPlaneAgent("agent-a")
	const size = 64 << 20
	before := runtime.NumGoroutine()
	r, conn, s := startRawRead(t, h, a, size)
	dst, client := tcpPair(t)
	spliced := make(chan error, 1)
	go func() {
		_, err := r.(rawSplicer).SpliceTo(dst, time.Minute)
		spliced <- err
		_ = dst.Close()
	}()
	sent := make(chan error, 1)
	go func() {
		_, err := conn.Write(make([]byte, size)) // more than the sockets hold
		sent <- err
		// As the agent does once its helper's send failed.
		_ = s.Send(end(sandboxv1.FileError_FILE_ERROR_FAILED, "broken pipe"))
	}()
	if _, err := io.ReadFull(client, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	_ = client.SetLinger(0) // gone: a reset, as a killed client's
	_ = client.Close()
	if err := testkit.Receive(t, waitTimeout, spliced, "the splice's end"); err == nil {
		t.Fatal("a splice to a client gone ended well")
	}
	if err := testkit.Receive(t, waitTimeout, sent, "the agent's send"); err == nil {
		t.Error("the agent's send went on: its connection was not closed")
	}
	_ = r.Close()
	_ = conn.Close()
	_ = dst.Close()
	eventually(t, "the read's goroutines gone", func() bool { return runtime.NumGoroutine() <= before+2 })
	// All of the agent's transfer places are free again: as many reads
	// as it may have at once.
	var readers []ports.FileReader
	for range maxTransfersPerAgent {
		r, conn, s := startRawRead(t, h, a, 1)
		go func() {
			_, _ = conn.Write([]byte("x"))
			_ = conn.Close()
			_ = s.Send(end(0, ""))
		}()
		readers = append(readers, r)
	}
	for i, r := range readers {
		if b, err := io.ReadAll(r); err != nil || string(b) != "x" {
			t.Errorf("read %d after the client gone: %q %v", i, b, err)
		}
		_ = r.Close()
	}
}

// A splice's idle bound is how long its bytes stand still, not how long
// it takes: an agent that sends its file in pieces, or a client that
// reads it in pieces, each well within the bound but all of them well
// past it, gets every byte; one that stops is cut, short of the size.
func TestASplicedReadIsCutOnlyWhenItStandsStill(t *testing.T) {
	h := newHarness(t)
	a := h.connectDataPlaneAgent("agent-a")
	const idle = time.Second
	splice := func(r ports.FileReader, dst net.Conn) chan error {
		spliced := make(chan error, 1)
		go func() {
			_, err := r.(rawSplicer).SpliceTo(dst, idle)
			spliced <- err
			_ = dst.Close()
		}()
		return spliced
	}

	t.Run("an agent sending slowly", func(t *testing.T) {
		const pieces, piece = 10, 1000
		r, conn, s := startRawRead(t, h, a, pieces*piece)
		dst, client := tcpPair(t)
		spliced := splice(r, dst)
		go func() {
			for range pieces {
				time.Sleep(idle / 5)
				if _, err := conn.Write(make([]byte, piece)); err != nil {
					return
				}
			}
			_ = conn.Close()
			_ = s.Send(end(0, ""))
		}()
		b, _ := io.ReadAll(client)
		if err := testkit.Receive(t, waitTimeout, spliced, "the splice's end"); err != nil {
			t.Fatalf("cut while the bytes moved: %v", err)
		}
		if len(b) != pieces*piece {
			t.Fatalf("%d bytes, want %d", len(b), pieces*piece)
		}
	})

	t.Run("a client reading slowly", func(t *testing.T) {
		const size, piece = 3 << 19, 64 << 10
		r, conn, s := startRawRead(t, h, a, size)
		dst, client := tcpPair(t)
		// Small buffers between the splice and the client, so that the
		// client's pace is the splice's.
		_ = dst.SetWriteBuffer(16 << 10)
		_ = client.SetReadBuffer(16 << 10)
		spliced := splice(r, dst)
		go func() {
			_, _ = conn.Write(make([]byte, size))
			_ = conn.Close()
			_ = s.Send(end(0, ""))
		}()
		var got int
		buf := make([]byte, piece)
		for {
			time.Sleep(idle / 10)
			n, err := io.ReadFull(client, buf)
			got += n
			if err != nil {
				break
			}
		}
		if err := testkit.Receive(t, waitTimeout, spliced, "the splice's end"); err != nil {
			t.Fatalf("cut while the bytes moved: %v", err)
		}
		if got != size {
			t.Fatalf("%d bytes, want %d", got, size)
		}
	})

	t.Run("an agent that stops", func(t *testing.T) {
		const size = 1 << 20
		r, conn, s := startRawRead(t, h, a, size)
		dst, client := tcpPair(t)
		spliced := splice(r, dst)
		if _, err := conn.Write(make([]byte, size/2)); err != nil {
			t.Fatal(err)
		}
		// As the agent does once its helper's send failed.
		go func() {
			_, _ = io.Copy(io.Discard, conn)
			_ = s.Send(end(sandboxv1.FileError_FILE_ERROR_FAILED, "broken pipe"))
		}()
		b, _ := io.ReadAll(client)
		if err := testkit.Receive(t, waitTimeout, spliced, "the splice's end"); err == nil {
			t.Error("a stalled agent's splice ended well")
		}
		if len(b) >= size {
			t.Errorf("%d bytes reached the client, want fewer than %d", len(b), size)
		}
	})

	t.Run("a client that stops", func(t *testing.T) {
		const size = 8 << 20 // more than the sockets hold
		r, conn, s := startRawRead(t, h, a, size)
		dst, client := tcpPair(t)
		spliced := splice(r, dst)
		go func() {
			if _, err := conn.Write(make([]byte, size)); err != nil {
				_ = s.Send(end(sandboxv1.FileError_FILE_ERROR_FAILED, "broken pipe"))
				return
			}
			_ = conn.Close()
			_ = s.Send(end(0, ""))
		}()
		if _, err := io.ReadFull(client, make([]byte, 1<<10)); err != nil {
			t.Fatal(err)
		}
		if err := testkit.Receive(t, waitTimeout, spliced, "the splice's end"); err == nil {
			t.Error("a splice to a stalled client ended well")
		}
	})
}
