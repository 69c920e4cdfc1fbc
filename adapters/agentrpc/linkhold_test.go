package agentrpc

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// holdServer serves, behind a LinkHold, on a unix socket as the agent
// link does: /stream answers and then holds the request open, /upgrade
// hijacks the connection (a raw data connection) and holds it, anything
// else answers "ok".
func holdServer(t *testing.T) (*LinkHold, string) {
	t.Helper()
	hold := NewLinkHold()
	mux := http.NewServeMux()
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "open\n")
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("/upgrade", func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(io.Discard, c) // until either side closes
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // as the agent link: agents speak h2c
	srv := &http.Server{Handler: hold.Gate(mux), ConnContext: hold.ConnContext, ConnState: hold.ConnState, ReadHeaderTimeout: waitTimeout, Protocols: protocols}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return hold, sock
}

// rawRequest opens a connection, sends one request naming agent id (none
// if "") and returns the connection and the status line of its answer.
func rawRequest(t *testing.T, sock, path, id string) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	req := "GET " + path + " HTTP/1.1\r\nHost: link\r\n"
	if id != "" {
		req += HeaderAgentID + ": " + id + "\r\n"
	}
	if path == "/upgrade" {
		req += "Connection: Upgrade\r\nUpgrade: test\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("%s for %q: %v", path, id, err)
	}
	return c, br, strings.TrimSpace(line)
}

// closedByServer reports whether the server closed c: reading what is
// left ends with EOF (or a reset) within the wait, not a timeout.
func closedByServer(c net.Conn, br *bufio.Reader, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, br)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout()) && !errors.Is(err, os.ErrDeadlineExceeded)
}

// A held agent loses every connection it had (a stream held open, a raw
// hijacked one), its new requests are answered 503 on a connection the
// server closes, other agents keep theirs, and released it is served again.
func TestLinkHoldEndsAnAgentsConnectionsAndRefusesItUntilReleased(t *testing.T) {
	hold, sock := holdServer(t)
	stream, streamR, st := rawRequest(t, sock, "/stream", "a1")
	if st != "HTTP/1.1 200 OK" {
		t.Fatalf("stream: %s", st)
	}
	raw, rawR, st := rawRequest(t, sock, "/upgrade", "a1")
	if !strings.Contains(st, "101") {
		t.Fatalf("upgrade: %s", st)
	}
	other, otherR, _ := rawRequest(t, sock, "/stream", "b2")
	anon, anonR, _ := rawRequest(t, sock, "/stream", "")

	release, err := hold.QuiesceLink(context.Background(), "a1")
	if err != nil {
		t.Fatal(err)
	}
	if !hold.Held("a1") || hold.Held("b2") {
		t.Fatalf("held: a1 %v, b2 %v", hold.Held("a1"), hold.Held("b2"))
	}
	if !closedByServer(stream, streamR, waitTimeout) {
		t.Error("the held agent's stream connection is still open")
	}
	if !closedByServer(raw, rawR, waitTimeout) {
		t.Error("the held agent's raw connection is still open")
	}
	if closedByServer(other, otherR, 200*time.Millisecond) || closedByServer(anon, anonR, 10*time.Millisecond) {
		t.Error("a hold of a1 closed another agent's or an anonymous connection")
	}

	again, againR, st := rawRequest(t, sock, "/x", "a1")
	if st != "HTTP/1.1 503 Service Unavailable" {
		t.Errorf("a held agent's request: %s, want 503", st)
	}
	if !closedByServer(again, againR, waitTimeout) {
		t.Error("the connection of a refused request stays open")
	}
	if _, _, st := rawRequest(t, sock, "/x", "b2"); st != "HTTP/1.1 200 OK" {
		t.Errorf("another agent while a1 is held: %s", st)
	}

	// Holds nest: the agent is served once each is released.
	release2, _ := hold.QuiesceLink(context.Background(), "a1")
	release()
	release() // twice is once
	if _, _, st := rawRequest(t, sock, "/x", "a1"); st != "HTTP/1.1 503 Service Unavailable" {
		t.Errorf("with one hold left: %s, want 503", st)
	}
	release2()
	if hold.Held("a1") {
		t.Error("still held after every release")
	}
	if _, _, st := rawRequest(t, sock, "/x", "a1"); st != "HTTP/1.1 200 OK" {
		t.Errorf("after the release: %s, want 200", st)
	}
}

// Connections that closed are forgotten: those ended by their agent, and
// hijacked ones found closed once the agent opens more.
func TestLinkHoldForgetsClosedConnections(t *testing.T) {
	hold, sock := holdServer(t)
	for range pruneSize + 4 {
		c, br, _ := rawRequest(t, sock, "/upgrade", "a1")
		_ = c.Close()
		// The server side closes when its copy sees the client's close.
		_ = br
	}
	for range 3 {
		c, _, _ := rawRequest(t, sock, "/x", "a1")
		_ = c.Close()
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		_, _, _ = rawRequest(t, sock, "/x", "a1") // noting one prunes
		hold.mu.Lock()
		n, all := len(hold.conns["a1"]), len(hold.byConn)
		hold.mu.Unlock()
		if n <= pruneSize && all == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections of a1 noted (%d in all) after all but a few closed", n, all)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An agent's HTTP/2 connection (how agents hold their stream): the hold
// ends it, its new requests get 503 and no connection stays open, and a
// connection it closed itself is forgotten.
func TestLinkHoldEndsAnAgentsHTTP2Connection(t *testing.T) {
	hold, sock := holdServer(t)
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func(ctx context.Context, path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent-socket"+path, nil)
		req.Header.Set(HeaderAgentID, "h2")
		return client.Do(req)
	}
	resp, err := get(context.Background(), "/stream")
	if err != nil || resp.ProtoMajor != 2 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "open\n" {
		t.Fatalf("stream: %q %v", line, err)
	}
	release, _ := hold.QuiesceLink(context.Background(), "h2")
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); ended <- err }()
	select {
	case <-ended:
	case <-time.After(waitTimeout):
		t.Fatal("the held agent's HTTP/2 stream is still open")
	}
	resp.Body.Close()
	if r, err := get(context.Background(), "/x"); err == nil {
		r.Body.Close()
		if r.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("a held agent's HTTP/2 request: %d, want 503", r.StatusCode)
		}
	} // or the connection closed under the answer: refused either way
	release()
	r, err := get(context.Background(), "/x")
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("after the release: %v %v", r, err)
	}
	r.Body.Close()
	tr.CloseIdleConnections()
	deadline := time.Now().Add(waitTimeout)
	for {
		hold.mu.Lock()
		n := len(hold.byConn)
		hold.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still noted after the agent closed its own", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
