package agentd

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1/sandboxv1connect"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
)

// tunnelCP plays the server for the agent's egress tunnels: it hands each
// raw tunnel's upgrade and each Tunnel stream to the test, which answers
// as the server and then plays the destination.
type tunnelCP struct {
	sandboxv1connect.UnimplementedAgentServiceHandler
	raws    chan *rawTunnelReq
	streams chan *cpTunnel
	rawHits atomic.Int32
}

// rawTunnelReq is one raw tunnel's upgrade, waiting for the test's answer.
type rawTunnelReq struct {
	header http.Header
	w      http.ResponseWriter
	answer chan func(http.ResponseWriter) // the test's answer, run by the handler
	done   chan struct{}
}

// cpTunnel is one Tunnel stream; the handler returns when end is closed.
type cpTunnel struct {
	header http.Header
	stream *connect.BidiStream[sandboxv1.TunnelRequest, sandboxv1.TunnelResponse]
	end    chan struct{}
}

// startTunnelCP serves the Tunnel stream, and the raw path unless
// withoutRaw (a server from before it: 404).
func startTunnelCP(t *testing.T, withoutRaw bool) (*tunnelCP, string) {
	t.Helper()
	f := &tunnelCP{raws: make(chan *rawTunnelReq, 8), streams: make(chan *cpTunnel, 8)}
	mux := http.NewServeMux()
	mux.Handle(sandboxv1connect.NewAgentServiceHandler(f))
	if !withoutRaw {
		mux.HandleFunc("GET "+agentwire.TunnelRawPath, func(w http.ResponseWriter, r *http.Request) {
			f.rawHits.Add(1)
			req := &rawTunnelReq{header: r.Header.Clone(), w: w, answer: make(chan func(http.ResponseWriter), 1), done: make(chan struct{})}
			f.raws <- req
			select {
			case answer := <-req.answer:
				answer(w)
			case <-r.Context().Done():
			}
			close(req.done)
		})
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = p
	srv.Start()
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *tunnelCP) Tunnel(ctx context.Context, stream *connect.BidiStream[sandboxv1.TunnelRequest, sandboxv1.TunnelResponse]) error {
	st := &cpTunnel{header: stream.RequestHeader().Clone(), stream: stream, end: make(chan struct{})}
	f.streams <- st
	select {
	case <-st.end:
	case <-ctx.Done():
	}
	return nil
}

// accept answers the upgrade with a 101 (and early, the destination's
// first bytes, in the same write) and returns the tunnel.
func (r *rawTunnelReq) accept(t *testing.T, early string) (net.Conn, *bufio.Reader) {
	t.Helper()
	type taken struct {
		c  net.Conn
		br *bufio.Reader
	}
	ch := make(chan taken, 1)
	r.answer <- func(w http.ResponseWriter) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			close(ch)
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+agentwire.TunnelRawProtocol+"\r\n\r\n"+early)
		ch <- taken{c, brw.Reader}
	}
	tk, ok := <-ch
	if !ok {
		t.Fatal("cannot take the agent's connection over")
	}
	t.Cleanup(func() { _ = tk.c.Close() })
	return tk.c, tk.br
}

// refuse answers the upgrade as the server refuses a tunnel.
func (r *rawTunnelReq) refuse(status int, kind, reason string) {
	r.answer <- func(w http.ResponseWriter) {
		if kind != "" {
			w.Header().Set(agentwire.HeaderTunnelRefused, kind)
		}
		http.Error(w, reason, status)
	}
	<-r.done
}

// egressAgent serves an agent's egress proxy on loopback (its link is not
// run: tunnels do not need it) and returns the agent and the proxy's
// address.
func egressAgent(t *testing.T, url string, edit func(*Config)) (*Agent, string) {
	t.Helper()
	cfg := testConfig(url, newFakeRunner())
	edit(&cfg)
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.ServeEgress(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := within(t, done, "ServeEgress did not return after its context ended"); err != nil {
			t.Errorf("ServeEgress: %v", err)
		}
	})
	return a, ln.Addr().String()
}

// proxyConnect opens a client connection through the proxy with CONNECT
// to; it returns the proxy's answer and the connection (any goroutine: it
// reports its failures in its answer).
func proxyConnect(t *testing.T, proxy, to string) (*http.Response, net.Conn, *bufio.Reader) {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return &http.Response{Status: err.Error(), Body: http.NoBody}, nil, nil
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, "CONNECT "+to+" HTTP/1.1\r\nHost: "+to+"\r\n\r\n"); err != nil {
		return &http.Response{Status: err.Error(), Body: http.NoBody}, nil, nil
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return &http.Response{Status: "the proxy's answer: " + err.Error(), Body: http.NoBody}, nil, nil
	}
	return resp, c, br
}

func body(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Where the server's address takes a connection of the agent's own, a
// tunnel goes on one, signed in and naming its destination, as raw bytes:
// what the server sends with its 101 comes first, and each side's end of
// writes reaches the other.
func TestAgentCarriesATunnelOnAConnectionOfItsOwn(t *testing.T) {
	cp, url := startTunnelCP(t, false)
	a, proxy := egressAgent(t, url, func(*Config) {})
	if !a.registration(testAgentID).GetRegistration().GetTunnelRaw() {
		t.Fatal("the agent does not register with tunnel_raw")
	}

	type opened struct {
		resp *http.Response
		c    net.Conn
		br   *bufio.Reader
	}
	got := make(chan opened, 1)
	go func() {
		resp, c, br := proxyConnect(t, proxy, "example.test:443")
		got <- opened{resp, c, br}
	}()
	req := within(t, cp.raws, "the agent's raw tunnel")
	if req.header.Get(agentwire.HeaderAgentID) != testAgentID || req.header.Get(agentwire.HeaderAgentSecret) != testSecret ||
		req.header.Get(agentwire.HeaderTunnelTo) != "example.test:443" || !strings.EqualFold(req.header.Get("Upgrade"), agentwire.TunnelRawProtocol) {
		t.Fatalf("the raw tunnel's upgrade: %v", req.header)
	}
	raw, rawR := req.accept(t, "banner;")
	o := within(t, got, "the proxy's answer")
	if o.resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", o.resp.Status)
	}
	if _, err := io.WriteString(o.c, "ping"); err != nil {
		t.Fatal(err)
	}
	_ = o.c.(*net.TCPConn).CloseWrite()
	if b, err := io.ReadAll(rawR); err != nil || string(b) != "ping" {
		t.Fatalf("at the server: %q %v", b, err)
	}
	if _, err := io.WriteString(raw, "pong"); err != nil {
		t.Fatalf("writing after the client's end: %v", err)
	}
	_ = raw.(*net.TCPConn).CloseWrite()
	if b, err := io.ReadAll(o.br); err != nil || string(b) != "banner;pong" {
		t.Fatalf("at the client: %q %v", b, err)
	}
	select {
	case st := <-cp.streams:
		close(st.end)
		t.Fatal("the tunnel also went on a Tunnel stream")
	default:
	}
}

// A plain-HTTP request through the proxy goes on the raw tunnel in
// origin-form, its answer back.
func TestAgentCarriesAPlainRequestOnARawTunnel(t *testing.T) {
	cp, url := startTunnelCP(t, false)
	_, proxy := egressAgent(t, url, func(*Config) {})
	type answer struct {
		resp *http.Response
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			got <- answer{nil, err}
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET http://example.test:8080/x?y=1 HTTP/1.1\r\nHost: example.test:8080\r\nProxy-Authorization: secret\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body = io.NopCloser(strings.NewReader(string(b)))
		}
		got <- answer{resp, err}
	}()
	req := within(t, cp.raws, "the agent's raw tunnel")
	if req.header.Get(agentwire.HeaderTunnelTo) != "example.test:8080" {
		t.Fatalf("destination %q", req.header.Get(agentwire.HeaderTunnelTo))
	}
	raw, rawR := req.accept(t, "")
	r, err := http.ReadRequest(rawR)
	if err != nil || r.RequestURI != "/x?y=1" || r.Header.Get("Proxy-Authorization") != "" {
		t.Fatalf("the request at the destination: %+v %v", r, err)
	}
	_, _ = io.WriteString(raw, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
	_ = raw.Close()
	a := within(t, got, "the client's answer")
	if a.err != nil || a.resp.StatusCode != 200 || body(a.resp) != "hello" {
		t.Fatalf("answer: %+v %v", a.resp, a.err)
	}
}

// The server's refusals reach the client as a proxy's: 403 with the
// policy's reason for a denied destination, 502 for the rest.
func TestAgentSaysWhyARawTunnelWasRefused(t *testing.T) {
	cp, url := startTunnelCP(t, false)
	_, proxy := egressAgent(t, url, func(*Config) {})
	for _, c := range []struct {
		status     int
		kind       string
		reason     string
		wantStatus int
		want       string
	}{
		{http.StatusForbidden, "denied", "example.test:443 matches no allowed host", http.StatusForbidden, "egress to example.test:443 refused: example.test:443 matches no allowed host"},
		{http.StatusBadGateway, "failed", "example.test:443 (127.0.0.1): connection refused", http.StatusBadGateway, "egress to example.test:443 failed: example.test:443 (127.0.0.1): connection refused"},
		{http.StatusUnauthorized, "", "unknown agent or wrong secret", http.StatusBadGateway, "401 Unauthorized: unknown agent or wrong secret"},
		{http.StatusTooManyRequests, "", "256 tunnels open, the limit", http.StatusBadGateway, "256 tunnels open, the limit"},
	} {
		got := make(chan *http.Response, 1)
		go func() {
			resp, _, _ := proxyConnect(t, proxy, "example.test:443")
			got <- resp
		}()
		within(t, cp.raws, "the agent's raw tunnel").refuse(c.status, c.kind, c.reason)
		resp := within(t, got, "the proxy's answer")
		if b := body(resp); resp.StatusCode != c.wantStatus || !strings.Contains(b, c.want) {
			t.Errorf("server %d %q: the client got %d %q, want %d with %q", c.status, c.reason, resp.StatusCode, b, c.wantStatus, c.want)
		}
	}
	select {
	case st := <-cp.streams:
		close(st.end)
		t.Fatal("a refused tunnel was tried again on a Tunnel stream")
	default:
	}
}

// streamTunnel plays the server on a Tunnel stream: it checks the open,
// allows it, and echoes what it reads, upper-cased, once the agent's side
// ended.
func streamTunnel(t *testing.T, st *cpTunnel, wantHost string, wantPort uint32) {
	t.Helper()
	defer close(st.end)
	first, err := st.stream.Receive()
	if err != nil || first.GetOpen().GetHost() != wantHost || first.GetOpen().GetPort() != wantPort {
		t.Fatalf("the stream's open: %v %v", first, err)
	}
	if st.header.Get(agentwire.HeaderAgentID) != testAgentID {
		t.Fatalf("the stream is not signed in: %v", st.header)
	}
	if err := st.stream.Send(&sandboxv1.TunnelResponse{Payload: &sandboxv1.TunnelResponse_Opened{Opened: &sandboxv1.TunnelOpened{Allowed: true}}}); err != nil {
		t.Fatal(err)
	}
	var b []byte
	for {
		m, err := st.stream.Receive()
		if err != nil {
			t.Fatalf("the stream ended before the agent's end: %v", err)
		}
		if m.GetCloseWrite() {
			break
		}
		b = append(b, m.GetData()...)
	}
	_ = st.stream.Send(&sandboxv1.TunnelResponse{Payload: &sandboxv1.TunnelResponse_Data{Data: []byte(strings.ToUpper(string(b)))}})
	_ = st.stream.Send(&sandboxv1.TunnelResponse{Payload: &sandboxv1.TunnelResponse_Eof{Eof: true}})
}

// pingThroughStream sends ping through the proxy and checks that a Tunnel
// stream carried it.
func pingThroughStream(t *testing.T, cp *tunnelCP, proxy string) {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		resp, c, br := proxyConnect(t, proxy, "example.test:443")
		if resp.StatusCode != http.StatusOK {
			got <- resp.Status
			return
		}
		_, _ = io.WriteString(c, "ping")
		_ = c.(*net.TCPConn).CloseWrite()
		b, _ := io.ReadAll(br)
		got <- string(b)
	}()
	streamTunnel(t, within(t, cp.streams, "the agent's Tunnel stream"), "example.test", 443)
	if s := within(t, got, "the client's answer"); s != "PING" {
		t.Fatalf("through the stream: %q", s)
	}
}

// An agent keeps the Tunnel stream where raw tunnels are not to be had: a
// server from before them (404; the agent then stops asking until it
// registers again), AGENT_NO_TUNNEL_RAW=1, or a server address that takes
// one connection only.
func TestAgentFallsBackToTunnelStreams(t *testing.T) {
	t.Run("a server without raw tunnels", func(t *testing.T) {
		cp, url := startTunnelCP(t, true)
		a, proxy := egressAgent(t, url, func(*Config) {})
		pingThroughStream(t, cp, proxy)
		if a.rawTunnels() {
			t.Fatal("the agent still asks for raw tunnels after a 404")
		}
		pingThroughStream(t, cp, proxy)
		if !a.registration(testAgentID).GetRegistration().GetTunnelRaw() || !a.rawTunnels() {
			t.Fatal("a new registration does not try raw tunnels again")
		}
	})
	t.Run("AGENT_NO_TUNNEL_RAW", func(t *testing.T) {
		cp, url := startTunnelCP(t, false)
		a, proxy := egressAgent(t, url, func(c *Config) { c.NoTunnelRaw = true })
		if a.registration(testAgentID).GetRegistration().GetTunnelRaw() {
			t.Fatal("registered with tunnel_raw")
		}
		pingThroughStream(t, cp, proxy)
		if n := cp.rawHits.Load(); n != 0 {
			t.Fatalf("%d raw tunnels asked for", n)
		}
	})
	t.Run("one connection only", func(t *testing.T) {
		for _, server := range []string{"unix:///nonexistent/agent.sock", "serial:///dev/null"} {
			a, err := New(testConfig(server, newFakeRunner()))
			if err != nil {
				t.Fatal(err)
			}
			if a.rawTunnels() || a.registration(testAgentID).GetRegistration().GetTunnelRaw() {
				t.Errorf("%s: raw tunnels on a link of one connection", server)
			}
		}
	})
}

// A raw tunnel cut at either end ends at the other: the server's reset
// closes the client's connection, the client's reset the server's.
func TestAgentEndsACutRawTunnel(t *testing.T) {
	cp, url := startTunnelCP(t, false)
	_, proxy := egressAgent(t, url, func(*Config) {})
	for _, cut := range []string{"server", "client"} {
		type opened struct {
			c  net.Conn
			br *bufio.Reader
		}
		got := make(chan opened, 1)
		go func() {
			_, c, br := proxyConnect(t, proxy, "example.test:443")
			got <- opened{c, br}
		}()
		raw, rawR := within(t, cp.raws, "the agent's raw tunnel").accept(t, "")
		o := within(t, got, "the proxy's answer")
		_, _ = io.WriteString(o.c, "x")
		if b := make([]byte, 1); func() error { _, err := io.ReadFull(rawR, b); return err }() != nil {
			t.Fatalf("%s: the first byte did not arrive", cut)
		}
		var other io.Reader = o.br
		victim := raw
		if cut == "client" {
			other, victim = rawR, o.c
		}
		_ = victim.(*net.TCPConn).SetLinger(0)
		_ = victim.Close()
		ended := make(chan error, 1)
		go func() { _, err := io.ReadAll(other); ended <- err }()
		within(t, ended, cut+" cut: the other end's connection ended")
	}
}
