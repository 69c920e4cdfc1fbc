package preview

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// The test's dev server: what `npm run dev` would serve inside an
// environment, here a real HTTP server on a real socket.

const (
	downloadSize = 64 << 20
	firstPart    = 1 << 20
	sseEvents    = 5
	patience     = 30 * time.Second
	testToken    = "operator-token-for-tests"
)

type devApp struct {
	srv      *httptest.Server
	release  chan struct{} // a gated download writes its rest once closed
	openOnce sync.Once
	finished atomic.Bool // a gated download wrote its last byte
	sseAck   chan int    // the test read event n
	mu       sync.Mutex
	seen     []string // request URIs
}

func pattern(i int) byte { return byte(i % 251) }

func patternSum(n int) [32]byte {
	h := sha256.New()
	buf := make([]byte, 1<<16)
	for off := 0; off < n; off += len(buf) {
		m := min(len(buf), n-off)
		for i := range m {
			buf[i] = pattern(off + i)
		}
		h.Write(buf[:m])
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

func newDevApp(t testing.TB, who string) *devApp {
	t.Helper()
	a := &devApp{release: make(chan struct{}), sseAck: make(chan int, sseEvents)}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><h1>dev page of %s</h1>", who)
	})
	echoHandler := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(echo{Who: who, Method: r.Method, URI: r.RequestURI, Host: r.Host, Header: r.Header})
	}
	mux.HandleFunc("/echo", echoHandler)
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, n)
	})
	mux.HandleFunc("/echo/", echoHandler)
	mux.HandleFunc("/set-cookie", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "app=1; Path=/")
		w.Header().Add("Set-Cookie", "wide=1; Domain=localhost; Path=/")
		w.Header().Add("Set-Cookie", signin.CookieName+"=junk; Path=/")
		w.Header().Add("Set-Cookie", CookieName+"=junk; Path=/")
		w.Header().Add("Set-Cookie", "own=1; Domain="+strings.Split(r.Header.Get("X-Forwarded-Host"), ":")[0]+"; Path=/")
		io.WriteString(w, "cookies")
	})
	mux.HandleFunc("/download", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(downloadSize))
		buf := make([]byte, 1<<16)
		for off := 0; off < downloadSize; off += len(buf) {
			if off == firstPart && r.URL.Query().Get("gate") == "1" {
				w.(http.Flusher).Flush()
				select {
				case <-a.release:
				case <-time.After(2 * patience):
					return // the test gave up
				}
			}
			for i := range buf {
				buf[i] = pattern(off + i)
			}
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
		a.finished.Store(true)
	})
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		for i := range sseEvents {
			if i > 0 {
				time.Sleep(50 * time.Millisecond) // pace, like a real source
			}
			fmt.Fprintf(w, "id: %d\ndata: event %d\n\n", i, i)
			w.(http.Flusher).Flush()
			select { // the next event only once the client read this one
			case n := <-a.sseAck:
				if n != i {
					return
				}
			case <-time.After(2 * patience):
				return
			case <-r.Context().Done():
				return
			}
		}
	})
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			typ, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			if err := c.WriteMessage(typ, append([]byte(who+" echo: "), msg...)); err != nil {
				return
			}
		}
	})
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.RequestURI)
		a.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(a.srv.Close)
	t.Cleanup(a.open) // a failed test must not leave a download waiting
	return a
}

// open lets a gated download write its rest.
func (a *devApp) open() { a.openOnce.Do(func() { close(a.release) }) }

func (a *devApp) sawURI(sub string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, u := range a.seen {
		if strings.Contains(u, sub) {
			return true
		}
	}
	return false
}

type echo struct {
	Who    string
	Method string
	URI    string
	Host   string
	Header http.Header
}

// fakeDialer dials real TCP addresses: each (agent, port) it knows goes to
// its dev server; any other port goes where nothing listens.
type fakeDialer struct {
	mu      sync.Mutex
	targets map[string]string
	offline map[string]bool
	closed  string // an address where nothing listens
	dials   []string
}

func key(agent string, port uint16) string { return agent + "/" + strconv.Itoa(int(port)) }

func (d *fakeDialer) DialPort(ctx context.Context, agentID string, port uint16) (ports.Conn, error) {
	d.mu.Lock()
	d.dials = append(d.dials, key(agentID, port))
	addr, ok := d.targets[key(agentID, port)]
	off := d.offline[agentID]
	d.mu.Unlock()
	switch {
	case off:
		return nil, ports.ErrAgentNotConnected
	case port == 22:
		return nil, ports.ErrPortRefused
	case port == 6000:
		return nil, ports.ErrTooManyForwards
	}
	if !ok {
		addr = d.closed
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", addr)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("%w: %v", ports.ErrPortNotListening, err)
	}
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

func (d *fakeDialer) dialed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dials...)
}

// fakePublic is an in-memory ports.PublicPorts.
type fakePublic struct {
	mu    sync.Mutex
	marks map[string]time.Time
}

func (p *fakePublic) SetPublic(env string, port uint16, until time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marks[key(env, port)] = until
	return nil
}

func (p *fakePublic) SetPrivate(env string, port uint16) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.marks, key(env, port))
	return nil
}

func (p *fakePublic) PublicUntil(env string, port uint16, now time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u, ok := p.marks[key(env, port)]
	return u, ok && now.Before(u)
}

func (p *fakePublic) Public(string, time.Time) []ports.PublicPort { return nil }

func (p *fakePublic) ForgetEnvironment(string) error { return nil }

var _ ports.PublicPorts = (*fakePublic)(nil)

// rig is the preview handler in front of a stand-in API, served by a real
// HTTP server, with one dev server in environment "dev" on port 5173.
type rig struct {
	app    *devApp
	dialer *fakeDialer
	public *fakePublic
	clock  *portsfake.Clock
	// signIns are the dashboard's sessions the rig's cookies are of.
	signIns *signin.Sessions
	h       *Handler
	srv     *httptest.Server
	port    string // the server's port: previews are <p>-<name>.localhost:<port>

	mu   sync.Mutex
	next []*http.Request // what reached the API
}

var envNames = []string{"dev", "other", "a.b", "Dup", "dup", "offline"}

func resolveIn(names []string) func(string, bool) (string, error) {
	return func(name string, fold bool) (string, error) {
		var found []string
		for _, n := range names {
			if n == name || fold && strings.EqualFold(n, name) {
				found = append(found, n)
			}
		}
		switch len(found) {
		case 0:
			return "", ports.ErrEnvNotFound
		case 1:
			return found[0], nil
		}
		return "", fmt.Errorf("%w: %s", ErrAmbiguousName, strings.Join(found, ", "))
	}
}

// rigReadTimeout is the rig server's ReadTimeout.
const rigReadTimeout = 300 * time.Millisecond

func newRig(t testing.TB, keepHost bool) *rig {
	t.Helper()
	r := &rig{app: newDevApp(t, "dev"), public: &fakePublic{marks: map[string]time.Time{}}, clock: portsfake.NewClock(time.Unix(1_900_000_000, 0))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	r.dialer = &fakeDialer{
		targets: map[string]string{key("dev", 5173): r.app.srv.Listener.Addr().String(), key("a.b", 5173): r.app.srv.Listener.Addr().String()},
		offline: map[string]bool{"offline": true},
		closed:  closed,
	}
	signIns := portsfake.NewSignInSessions()
	signIns.Now = r.clock.Now
	r.signIns = signin.NewSessions(signIns, testToken)
	r.h = New(Config{Dialer: r.dialer, Public: r.public, Token: testToken, SignIns: r.signIns, KeepHost: keepHost, Resolve: resolveIn(envNames), Clock: r.clock})
	t.Cleanup(r.h.Close)
	api := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.next = append(r.next, req)
		r.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "the API")
	})
	r.srv = httptest.NewUnstartedServer(r.h.Wrap(api))
	// Like the REST listener's (a minute there): a preview outlives it.
	r.srv.Config.ReadTimeout = rigReadTimeout
	// HTTP/1.1 and h2c with prior knowledge, as the REST listener serves.
	r.srv.Config.Protocols = new(http.Protocols)
	r.srv.Config.Protocols.SetHTTP1(true)
	r.srv.Config.Protocols.SetUnencryptedHTTP2(true)
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	_, r.port, _ = net.SplitHostPort(r.srv.Listener.Addr().String())
	return r
}

func (r *rig) apiRequests() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.next...)
}

// host is a preview host of the rig: "5173-dev.localhost:<port>".
func (r *rig) host(port int, name string) string {
	return fmt.Sprintf("%d-%s.localhost:%s", port, name, r.port)
}

func (r *rig) mainURL(path string) string { return "http://localhost:" + r.port + path }

// dial reaches the rig's server whatever the URL's host name.
func (r *rig) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, r.srv.Listener.Addr().String())
}

// client sends every request to the rig's server; it follows redirects
// only when follow is set.
func (r *rig) client(jar http.CookieJar, follow bool) *http.Client {
	c := &http.Client{Transport: &http.Transport{DialContext: r.dial, DisableCompression: true}, Jar: jar, Timeout: 2 * patience}
	if !follow {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return c
}

func newJar(t *testing.T) *cookiejar.Jar {
	t.Helper()
	j, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

type hdr map[string]string

func (r *rig) get(t *testing.T, c *http.Client, method, url string, h hdr) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading: %v", method, url, err)
	}
	return resp, string(b)
}

func (r *rig) echoOf(t *testing.T, body string) echo {
	t.Helper()
	var e echo
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not an echo: %v: %q", err, body)
	}
	return e
}

func bearerHdr() hdr { return hdr{"Authorization": "Bearer " + testToken} }

// previewCookie is a live preview cookie of host.
func (r *rig) previewCookie(host string) string {
	return CookieName + "=" + cookieValue(testToken, host, r.clock.Now().Add(CookieTTL))
}

// sessionCookie is a live dashboard session cookie.
func (r *rig) sessionCookie() *http.Cookie {
	v, exp, err := r.signIns.Mint(signin.OperatorTokenID, r.clock.Now())
	if err != nil {
		panic(err)
	}
	return signin.Cookie(v, exp, false)
}

func (r *rig) wsDial(t *testing.T, host, path string, h http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	d := websocket.Dialer{NetDialContext: r.dial, HandshakeTimeout: patience}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	return d.DialContext(ctx, "ws://"+host+path, h)
}

func wsEcho(t *testing.T, c *websocket.Conn, who string) {
	t.Helper()
	for i := range 3 {
		msg := fmt.Sprintf("hello %d", i)
		if err := c.NetConn().SetDeadline(time.Now().Add(patience)); err != nil {
			t.Fatal(err)
		}
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := c.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != who+" echo: "+msg {
			t.Fatalf("echo %q, want %q", got, who+" echo: "+msg)
		}
	}
}
