package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/apicontract"
)

// Issue 29: a dev server (cmd/internal/devserver) in a background session
// inside an environment without a network device, reached through its
// preview URL and through `agenticctl port-forward`, over the agent link.

// The dev server in a Docker container with network none: everything, and
// a cookie for one environment refused on another's preview host.
func TestPreviewInDocker(t *testing.T) {
	host := privateDockerd(t)
	s := startServer(t, 0, "", "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=docker")
	a := newPreviewEnv(t, s, "docker", "pv-a", 5173, 5174, "/tmp")
	b := newPreviewEnv(t, s, "docker", "pv-b", 5173, 5174, "/tmp")
	if got := strings.TrimSpace(execOK(t, s, a.env, restapi.ExecRequest{Command: "ls", Args: ptr([]string{"/sys/class/net"})}).Stdout); got != "lo" {
		t.Fatalf("network devices in the container: %q, want only lo", got)
	}
	a.start(t)
	b.start(t)
	previewThroughTheHost(t, a)
	previewSecurity(t, a, b)
	previewInChromium(t, a, "docker")
	previewPortForward(t, a)
	a.stop(t)
}

// The same in VMs without a NIC under TCG.
func TestPreviewInAVM(t *testing.T) {
	harness.NeedEngine(t, "libvirt") // libvirtd started when it is not
	s := startLibvirtServer(t)
	name := fmt.Sprintf("pv-vm-%d", time.Now().UnixNano()%100000)
	a := newPreviewEnv(t, s, "libvirt", name, 5173, 5174, "/tmp")
	b := newPreviewEnv(t, s, "libvirt", name+"-b", 5173, 5174, "/tmp")
	if got := strings.TrimSpace(execOK(t, s, a.env, restapi.ExecRequest{Command: "ls", Args: ptr([]string{"/sys/class/net"})}).Stdout); got != "lo" {
		t.Fatalf("network devices in the VM: %q, want only lo", got)
	}
	a.start(t)
	b.start(t)
	previewThroughTheHost(t, a)
	previewSecurity(t, a, b)
	previewInChromium(t, a, "vm")
	previewPortForward(t, a)
	a.stop(t)
}

// And with host agents (environments of the host runtime, which share
// the machine's network: the dev servers listen on free ports).
func TestPreviewOnTheHostRuntime(t *testing.T) {
	s := startServer(t, 0, "", "AGENTIC_RUNTIMES=host")
	a := newPreviewEnv(t, s, "host", "pv-host-a", freePort(t), freePort(t), t.TempDir())
	b := newPreviewEnv(t, s, "host", "pv-host-b", freePort(t), freePort(t), t.TempDir())
	a.start(t)
	b.start(t)
	previewThroughTheHost(t, a)
	previewSecurity(t, a, b)
	previewInChromium(t, a, "host")
	previewPortForward(t, a)
	a.stop(t)
	previewPublicExpires(t, b)
}

// previewPublicExpires: a port public for the shortest time (60 s) is
// reachable without credentials, then refused again once the mark lapses,
// and the ports list says private.
func previewPublicExpires(t *testing.T, p *previewEnv) {
	t.Helper()
	c := previewClient(p.s, nil)
	path := fmt.Sprintf("/api/v1/environments/%s/ports/%d/public", p.env, p.port)
	if st, b := apiDo(t, p.s, http.MethodPut, path, `{"ttl_seconds":60}`); st != http.StatusOK {
		t.Fatalf("make %d public: %d %s", p.port, st, b)
	}
	if resp, body := previewGet(t, c, p.url("/"), "Accept", "*/*"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a public port without credentials: %d %.200s", resp.StatusCode, body)
	}
	for deadline := time.Now().Add(time.Minute + patience); ; time.Sleep(500 * time.Millisecond) {
		resp, body := previewGet(t, c, p.url("/"), "Accept", "*/*")
		if resp.StatusCode == http.StatusUnauthorized {
			break
		}
		if resp.StatusCode != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("a port public for 60 s, without credentials: %d %.200s (by %v, want 200 then 401 once it lapses)", resp.StatusCode, body, time.Minute+patience)
		}
	}
	if e, _ := p.listed(t); e.Public || e.PublicUntil != "" {
		t.Errorf("the ports list after the mark lapsed: %+v", e)
	}
}

// AGENTIC_PREVIEW_HOST=keep: the dev server sees the preview host as the
// browser sent it (the default rewrites it, TestPreviewOnTheHostRuntime).
func TestPreviewKeepsTheHostWhenConfigured(t *testing.T) {
	s := startServer(t, 0, "", "AGENTIC_RUNTIMES=host", "AGENTIC_PREVIEW_HOST=keep")
	p := newPreviewEnv(t, s, "host", "pv-keep", freePort(t), freePort(t), t.TempDir())
	p.start(t)
	resp, body := previewGet(t, previewClient(s, nil), p.url("/echo-headers"), "Authorization", "Bearer "+s.Token)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("echo-headers: %d %s", resp.StatusCode, body)
	}
	if seen := echoed(t, body); seen.Host != p.host() {
		t.Errorf("Host at the dev server %q, want the preview host %q kept", seen.Host, p.host())
	}
}

// previewEnv is an environment with the dev server in it.
type previewEnv struct {
	s    *harness.Server
	env  string
	port int
	// dir is where the dev server's binary goes inside.
	dir string
	// idle is a port nothing listens on inside.
	idle int
	// session runs the dev server.
	session string
	// names: the agent can name the process holding a port. A container's
	// agent cannot when its commands run as another user (nobody): without
	// CAP_SYS_PTRACE it may not read their /proc/<pid>/fd.
	names bool
}

// newPreviewEnv creates the environment (network none where the runtime
// has networks) and waits until it is ready.
func newPreviewEnv(t *testing.T, s *harness.Server, runtime, name string, port, idle int, dir string) *previewEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req := restapi.CreateEnvironmentRequest{Runtime: runtime, Name: name}
	if runtime == "docker" {
		req.Network = ptr("none")
	}
	c := s.Client()
	if r, err := c.CreateEnvironmentWithResponse(ctx, req); err != nil || r.StatusCode() >= 300 {
		t.Fatalf("create %s: %v %s", name, err, r.Body)
	}
	t.Cleanup(func() { _, _ = c.DeleteEnvironmentWithResponse(context.Background(), name) })
	boot := patience
	if runtime == "libvirt" {
		boot = 5 * time.Minute // TCG
	}
	waitEnvReady(t, s, name, boot)
	return &previewEnv{s: s, env: name, port: port, idle: idle, dir: dir, names: runtime != "docker"}
}

// start uploads the dev server through the files API, starts it in a
// background session and waits until the ports list shows it.
func (p *previewEnv) start(t *testing.T) {
	t.Helper()
	bin := p.dir + "/devserver"
	putFile(t, p.s, p.env, bin, devserverBinary(t), "0755")
	bg := restapi.SessionBackground
	sess := createSession(t, p.s, p.env, restapi.CreateSessionRequest{Type: &bg, Name: ptr("devserver"), Command: bin,
		Args: ptr([]string{"-addr", "127.0.0.1:" + strconv.Itoa(p.port)})})
	p.session = sess.SessionId
	for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
		if e, ok := p.listed(t); ok && e.Address == "127.0.0.1" && (e.Process == "devserver" || !p.names && e.Process == "") {
			break
		}
		if time.Now().After(deadline) {
			_, ports := apiDo(t, p.s, http.MethodGet, "/api/v1/environments/"+p.env+"/ports", "")
			_, out := apiDo(t, p.s, http.MethodGet, "/api/v1/sessions/"+sess.SessionId+"/output", "")
			_, info := apiDo(t, p.s, http.MethodGet, "/api/v1/sessions/"+sess.SessionId, "")
			t.Fatalf("devserver on %d not in %s's ports within %v: %s\nsession %s\noutput %q", p.port, p.env, patience, ports, info, out)
		}
	}
	e, _ := p.listed(t)
	if e.Public || e.PublicUntil != "" {
		t.Errorf("a new port is public: %+v", e)
	}
	if e.PreviewURL != p.url("/") {
		t.Errorf("preview_url %q, want %q", e.PreviewURL, p.url("/"))
	}
}

// stop kills the dev server: its port leaves the ports list, and its
// preview answers 502.
func (p *previewEnv) stop(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if r, err := p.s.Client().KillSessionWithResponse(ctx, p.session); err != nil || r.StatusCode() >= 300 {
		t.Fatalf("kill the dev server: %v %v", err, r)
	}
	eventually(t, patience, fmt.Sprintf("port %d gone from %s's ports", p.port, p.env), func() bool {
		_, ok := p.listed(t)
		return !ok
	})
	resp, body := previewGet(t, previewClient(p.s, nil), p.url("/"), "Authorization", "Bearer "+p.s.Token, "Accept", "application/json")
	if resp.StatusCode != http.StatusBadGateway || errorCode(body) != "port_not_listening" {
		t.Errorf("the preview of a stopped dev server: %d %.300s", resp.StatusCode, body)
	}
}

// portEntry is an item of a ports list, read loosely (what issue 29 adds
// to it included).
type portEntry struct {
	Port        int    `json:"port"`
	Address     string `json:"address"`
	Process     string `json:"process"`
	Public      bool   `json:"public"`
	PublicUntil string `json:"public_until"`
	PreviewURL  string `json:"preview_url"`
}

// listed is the ports list's entry of the dev server's port.
func (p *previewEnv) listed(t *testing.T) (portEntry, bool) {
	t.Helper()
	st, body := apiDo(t, p.s, http.MethodGet, "/api/v1/environments/"+p.env+"/ports", "")
	if st != http.StatusOK {
		t.Fatalf("ports of %s: %d %s", p.env, st, body)
	}
	var l struct{ Ports []portEntry }
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Ports {
		if e.Port == p.port {
			return e, true
		}
	}
	return portEntry{}, false
}

// restPort is the REST listener's port.
func restPort(s *harness.Server) string {
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.RESTURL, "http://"))
	return port
}

// host is the preview host of the dev server's port (with the REST port).
func (p *previewEnv) host() string { return p.hostOf(p.port) }

func (p *previewEnv) hostOf(port int) string {
	return fmt.Sprintf("%d-%s.localhost:%s", port, p.env, restPort(p.s))
}

func (p *previewEnv) url(path string) string { return "http://" + p.host() + path }

// dashboard is the dashboard's origin as a browser on this machine names
// it: the preview domain's own host (localhost), where /preview-signin is.
func dashboard(s *harness.Server) string { return "http://localhost:" + restPort(s) }

// previewTransport reaches every host through the REST listener: Go's
// resolver need not resolve *.localhost (browsers do it themselves).
func previewTransport(s *harness.Server) *http.Transport {
	addr := strings.TrimPrefix(s.RESTURL, "http://")
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
		MaxIdleConnsPerHost: 8,
	}
}

// previewClient follows no redirects (a test looks at each); jar may be nil.
func previewClient(s *harness.Server, jar http.CookieJar) *http.Client {
	return &http.Client{Transport: previewTransport(s), Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// previewGet sends GET u with the headers given as name, value pairs and
// returns the answer, its body read whole.
func previewGet(t *testing.T, c *http.Client, u string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the answer: %v", u, err)
	}
	return resp, b
}

// apiDo sends a REST request with the operator token and a JSON body ("" for
// none), holds the answer to openapi.yaml, and returns it.
func apiDo(t *testing.T, s *harness.Server, method, path, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.RESTURL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := apicontract.CheckResponse(req, resp.StatusCode, resp.Header, b); err != nil {
		t.Errorf("openapi.yaml: %v", err)
	}
	return resp.StatusCode, b
}

const previewPage = "<title>devserver: preview test page</title>"

// previewThroughTheHost: with the operator token, the page, a 64 MiB
// download whole, SSE events one by one, WebSocket echoes, and the dev
// server sees neither the token nor the preview cookie.
func previewThroughTheHost(t *testing.T, p *previewEnv) {
	t.Helper()
	c := previewClient(p.s, nil)
	bearer := "Bearer " + p.s.Token
	resp, body := previewGet(t, c, p.url("/"), "Authorization", bearer, "Accept", "text/html")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), previewPage) {
		t.Fatalf("the page through %s: %d %.300s", p.host(), resp.StatusCode, body)
	}

	// 64 MiB, every byte where it belongs.
	const size = 64 << 20
	if n, err := download(c, p.url("/download?bytes="+strconv.Itoa(size)), bearer); err != nil || n != size {
		t.Fatalf("64 MiB through the preview: %d bytes, %v", n, err)
	}

	previewSSE(t, p, c, bearer)
	previewWebSocket(t, p, bearer)

	// The dev server sees the request as sent, without the token; its own
	// cookies pass.
	resp, body = previewGet(t, c, p.url("/echo-headers?x=1"), "Authorization", bearer, "Cookie", "theirs=1; agentic_preview=not-a-real-one", "X-Custom", "kept")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("echo-headers: %d %s", resp.StatusCode, body)
	}
	seen := echoed(t, body)
	if _, ok := seen.Headers["Authorization"]; ok {
		t.Errorf("the operator token reached the dev server: %s", body)
	}
	if got := strings.Join(seen.Headers["Cookie"], "; "); strings.Contains(got, "agentic_preview") || !strings.Contains(got, "theirs=1") {
		t.Errorf("cookies at the dev server: %q; want theirs=1 and no agentic_preview", got)
	}
	if got := strings.Join(seen.Headers["X-Custom"], ","); got != "kept" || seen.URI != "/echo-headers?x=1" || seen.Method != http.MethodGet {
		t.Errorf("the request at the dev server: %s", body)
	}
	// The Host header as configured: by default rewritten to
	// localhost:<port>, which a dev server checking its Host (Vite) accepts.
	if want := "localhost:" + strconv.Itoa(p.port); seen.Host != want {
		t.Errorf("Host at the dev server %q, want %q", seen.Host, want)
	}
}

type echoedRequest struct {
	Method, URI, Host string
	Headers           http.Header
}

func echoed(t *testing.T, body []byte) echoedRequest {
	t.Helper()
	var e echoedRequest
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("echo-headers: %v %s", err, body)
	}
	return e
}

// download GETs u and checks the body against the dev server's pattern as it
// streams; it returns how many bytes came.
func download(c *http.Client, u, authorization string) (int64, error) {
	// Generous: a VM under TCG moves its bytes slowly.
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return checkPattern(resp.Body)
}

// checkPattern reads r to its end and checks it against the dev server's
// download pattern (cmd/internal/devserver: the 8-byte word at offset off
// is off*0x9E3779B97F4A7C15, big-endian).
func checkPattern(r io.Reader) (int64, error) {
	buf := make([]byte, 256<<10)
	want := make([]byte, len(buf))
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			for i := 0; i < n; i += 8 {
				binary.BigEndian.PutUint64(want[i:], uint64(off+int64(i))*0x9E3779B97F4A7C15) //nolint:gosec // off is never negative
			}
			if !bytes.Equal(buf[:n], want[:n]) {
				for i := range n {
					if buf[i] != want[i] {
						return off + int64(i), fmt.Errorf("byte %d differs from the pattern", off+int64(i))
					}
				}
			}
			off += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return off, nil
		}
		if err != nil {
			return off, err
		}
	}
}

// previewSSE: each event arrives while the dev server waits for it to be
// read before it sends the next (an ack through the preview): buffering on
// the way would stall the stream, and the test with it.
func previewSSE(t *testing.T, p *previewEnv, c *http.Client, bearer string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	var id [8]byte
	_, _ = rand.Read(id[:])
	gate := hex.EncodeToString(id[:])
	const count = 5
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url(fmt.Sprintf("/events?count=%d&gate=%s", count, gate)), nil)
	req.Header.Set("Authorization", bearer)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := bufio.NewReader(resp.Body)
	for i := 1; i <= count; i++ {
		var data string
		for {
			line, err := lines.ReadString('\n')
			if err != nil {
				t.Fatalf("event %d of %d did not arrive (the dev server sends the next only once this one is read): %v", i, count, err)
			}
			line = strings.TrimRight(line, "\r\n")
			if line == "" && data != "" {
				break
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				data = v
			}
		}
		if want := fmt.Sprintf("event %d of %d", i, count); data != want {
			t.Fatalf("event %d: %q, want %q", i, data, want)
		}
		if i < count {
			if r, b := previewGet(t, c, p.url("/events/ack?gate="+gate), "Authorization", bearer); r.StatusCode != http.StatusNoContent {
				t.Fatalf("ack %d: %d %s", i, r.StatusCode, b)
			}
		}
	}
	if rest, err := io.ReadAll(lines); err != nil || len(rest) != 0 {
		t.Errorf("after the last event: %q %v", rest, err)
	}
}

// wsDial opens a WebSocket to the preview host's path with the headers given.
func wsDial(p *previewEnv, path string, h http.Header) (*websocket.Conn, *http.Response, error) {
	addr := strings.TrimPrefix(p.s.RESTURL, "http://")
	d := websocket.Dialer{
		NetDialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "tcp", addr)
		},
		HandshakeTimeout: patience,
	}
	return d.Dial("ws://"+p.host()+path, h)
}

// previewWebSocket: messages echoed through an upgraded connection, text
// and a 1 MiB binary one.
func previewWebSocket(t *testing.T, p *previewEnv, bearer string) {
	t.Helper()
	conn, resp, err := wsDial(p, "/ws", http.Header{"Authorization": {bearer}})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("WebSocket through the preview: %v (status %d)", err, status)
	}
	defer conn.Close()
	big := make([]byte, 1<<20)
	_, _ = rand.Read(big)
	for _, m := range []struct {
		kind int
		data []byte
	}{{websocket.TextMessage, []byte("hello")}, {websocket.BinaryMessage, big}, {websocket.TextMessage, []byte("again")}} {
		_ = conn.SetReadDeadline(time.Now().Add(patience))
		_ = conn.SetWriteDeadline(time.Now().Add(patience))
		if err := conn.WriteMessage(m.kind, m.data); err != nil {
			t.Fatalf("WebSocket write: %v", err)
		}
		kind, got, err := conn.ReadMessage()
		if err != nil || kind != m.kind || !bytes.Equal(got, m.data) {
			t.Fatalf("WebSocket echo of %d bytes: kind %d, %d bytes, %v", len(m.data), kind, len(got), err)
		}
	}
}

// previewSecurity: without credentials a page is redirected to sign in and
// anything else is 401; the sign-in round gives a cookie for that one host,
// refused on another environment's host (b, when given) and by the API; a
// public port needs nothing until made private again; a port nothing
// listens on is 502.
func previewSecurity(t *testing.T, a, b *previewEnv) {
	t.Helper()
	c := previewClient(a.s, nil)

	// No credentials: a page is sent to sign in, a program and an upgrade get 401.
	resp, body := previewGet(t, c, a.url("/some/page?q=1"), "Accept", "text/html,application/xhtml+xml")
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusFound || !strings.Contains(loc, "/preview-signin") || strings.Contains(loc, a.s.Token) {
		t.Fatalf("a page without credentials: %d Location %q %.200s", resp.StatusCode, loc, body)
	}
	for _, h := range [][]string{{"Accept", "*/*"}, {"Accept", "application/json"}, {"Accept", "*/*", "Authorization", "Bearer wrong"}, {"Accept", "*/*", "Authorization", "Basic b3BlcmF0b3I6eA=="}} {
		if resp, body := previewGet(t, c, a.url("/"), h...); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("without credentials (%v): %d %.200s", h, resp.StatusCode, body)
		}
	}
	if conn, resp, err := wsDial(a, "/ws", http.Header{"Accept": {"text/html"}}); err == nil {
		conn.Close()
		t.Errorf("a WebSocket without credentials was let in")
	} else if resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a WebSocket without credentials: %v %v, want 401", err, resp)
	}

	// The sign-in round with a cookie jar: the dashboard's sign-in, then
	// the redirect through /preview-signin to the preview host, which sets
	// its cookie and returns to the page.
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	jc := &http.Client{Transport: previewTransport(a.s), Jar: jar}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	signin, _ := http.NewRequestWithContext(ctx, http.MethodPost, dashboard(a.s)+"/api/v1/signin", strings.NewReader(`{"token":"`+a.s.Token+`"}`))
	signin.Header.Set("Content-Type", "application/json")
	if r, err := jc.Do(signin); err != nil || r.StatusCode != http.StatusNoContent {
		t.Fatalf("dashboard sign-in: %v %v", err, r)
	} else {
		r.Body.Close()
	}
	// Following the first redirect a page without credentials got.
	next, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	round, _ := http.NewRequestWithContext(ctx, http.MethodGet, resolveAgainst(a.url("/some/page?q=1"), next), nil)
	round.Header.Set("Accept", "text/html")
	var hops []string
	jc.CheckRedirect = func(r *http.Request, _ []*http.Request) error {
		hops = append(hops, r.URL.String())
		return nil
	}
	r, err := jc.Do(round)
	if err != nil {
		t.Fatalf("the sign-in round: %v (hops %v)", err, hops)
	}
	page, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusNotFound || !strings.Contains(string(page), "404 page not found") || r.Request.URL.Host != a.host() || r.Request.URL.RequestURI() != "/some/page?q=1" {
		// The dev server has no /some/page: its 404 is the page, reached.
		t.Fatalf("the sign-in round ended at %s with %d %.200s (hops %v)", r.Request.URL, r.StatusCode, page, hops)
	}
	for _, h := range hops {
		if strings.Contains(h, a.s.Token) {
			t.Fatalf("the operator token in a URL: %s", h)
		}
	}
	var cookie *http.Cookie
	for _, ck := range jar.Cookies(&url.URL{Scheme: "http", Host: a.host(), Path: "/"}) {
		if ck.Name == "agentic_preview" {
			cookie = ck
		}
	}
	if cookie == nil {
		t.Fatalf("no agentic_preview cookie for %s after the sign-in round (hops %v)", a.host(), hops)
	}
	for _, ck := range jar.Cookies(&url.URL{Scheme: "http", Host: "localhost:" + restPort(a.s), Path: "/"}) {
		if ck.Name == "agentic_preview" {
			t.Errorf("the preview cookie is sent to the dashboard's host too")
		}
	}
	// The cookie alone opens the page (and a WebSocket), and does not reach the dev server.
	withCookie := []string{"Cookie", "agentic_preview=" + cookie.Value, "Accept", "*/*"}
	if resp, body := previewGet(t, c, a.url("/"), withCookie...); resp.StatusCode != http.StatusOK || !strings.Contains(string(body), previewPage) {
		t.Fatalf("the page with the preview cookie: %d %.200s", resp.StatusCode, body)
	}
	if resp, body := previewGet(t, c, a.url("/echo-headers"), withCookie...); resp.StatusCode != http.StatusOK || strings.Contains(strings.Join(echoed(t, body).Headers["Cookie"], ";"), "agentic_preview") {
		t.Errorf("the preview cookie at the dev server: %d %s", resp.StatusCode, body)
	}
	if conn, _, err := wsDial(a, "/ws", http.Header{"Cookie": {"agentic_preview=" + cookie.Value}}); err != nil {
		t.Errorf("a WebSocket with the preview cookie: %v", err)
	} else {
		conn.Close()
	}
	// Another port of the same environment is another host: refused.
	if resp, body := previewGet(t, c, "http://"+a.hostOf(a.idle)+"/", withCookie...); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the cookie of %s on %s: %d %.200s", a.host(), a.hostOf(a.idle), resp.StatusCode, body)
	}
	// Another environment's preview host refuses it.
	if b != nil {
		if resp, body := previewGet(t, c, b.url("/"), withCookie...); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("the cookie of %s on %s: %d %.200s", a.host(), b.host(), resp.StatusCode, body)
		}
		if conn, resp, err := wsDial(b, "/ws", http.Header{"Cookie": {"agentic_preview=" + cookie.Value}}); err == nil {
			conn.Close()
			t.Errorf("a WebSocket on %s with %s's cookie was let in", b.host(), a.host())
		} else if resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a WebSocket on %s with %s's cookie: %v %v, want 401", b.host(), a.host(), err, resp)
		}
	}
	// The API refuses it, on its own host and on the preview host's name.
	for _, u := range []string{a.s.RESTURL + "/api/v1/agents", dashboard(a.s) + "/api/v1/agents"} {
		if resp, body := previewGet(t, c, u, "Cookie", "agentic_preview="+cookie.Value); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("the preview cookie on %s: %d %.200s", u, resp.StatusCode, body)
		}
	}

	// Public: reachable with nothing until made private again.
	path := fmt.Sprintf("/api/v1/environments/%s/ports/%d/public", a.env, a.port)
	st, pb := apiDo(t, a.s, http.MethodPut, path, `{"ttl_seconds":60}`)
	var pub struct {
		Port        int       `json:"port"`
		Public      bool      `json:"public"`
		PublicUntil time.Time `json:"public_until"`
	}
	if st != http.StatusOK || json.Unmarshal(pb, &pub) != nil || !pub.Public || pub.Port != a.port || pub.PublicUntil.IsZero() {
		t.Fatalf("make %d public: %d %s", a.port, st, pb)
	}
	if e, _ := a.listed(t); !e.Public || e.PublicUntil == "" {
		t.Errorf("the ports list after making it public: %+v", e)
	}
	if resp, body := previewGet(t, c, a.url("/"), "Accept", "*/*"); resp.StatusCode != http.StatusOK || !strings.Contains(string(body), previewPage) {
		t.Errorf("a public port without credentials: %d %.200s", resp.StatusCode, body)
	}
	if conn, _, err := wsDial(a, "/ws", nil); err != nil {
		t.Errorf("a WebSocket to a public port without credentials: %v", err)
	} else {
		conn.Close()
	}
	if st, b := apiDo(t, a.s, http.MethodDelete, path, ""); st != http.StatusNoContent {
		t.Fatalf("make %d private: %d %s", a.port, st, b)
	}
	if e, _ := a.listed(t); e.Public {
		t.Errorf("the ports list after making it private: %+v", e)
	}
	if resp, body := previewGet(t, c, a.url("/"), "Accept", "*/*"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a private port again without credentials: %d %.200s", resp.StatusCode, body)
	}
	for _, bad := range []string{`{"ttl_seconds":59}`, `{"ttl_seconds":2592001}`} {
		if st, b := apiDo(t, a.s, http.MethodPut, path, bad); st != http.StatusBadRequest {
			t.Errorf("public with %s: %d %s", bad, st, b)
		}
	}
	if st, b := apiDo(t, a.s, http.MethodPut, "/api/v1/environments/nowhere/ports/80/public", `{}`); st != http.StatusNotFound {
		t.Errorf("public on an unknown environment: %d %s", st, b)
	}

	// Nothing listens on the next port: 502, with a page saying so.
	resp, body = previewGet(t, c, "http://"+a.hostOf(a.idle)+"/", "Authorization", "Bearer "+a.s.Token, "Accept", "text/html")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "Nothing listens on port "+strconv.Itoa(a.idle)) {
		t.Errorf("a port nothing listens on: %d %.300s", resp.StatusCode, body)
	}
	resp, body = previewGet(t, c, "http://"+a.hostOf(a.idle)+"/", "Authorization", "Bearer "+a.s.Token, "Accept", "application/json")
	if resp.StatusCode != http.StatusBadGateway || errorCode(body) != "port_not_listening" {
		t.Errorf("a port nothing listens on, asked by a program: %d %.300s", resp.StatusCode, body)
	}
	// An environment that does not exist: 404.
	if resp, body := previewGet(t, c, fmt.Sprintf("http://5173-nowhere.localhost:%s/", restPort(a.s)), "Authorization", "Bearer "+a.s.Token); resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown environment's preview: %d %.200s", resp.StatusCode, body)
	}
}

// resolveAgainst resolves ref against base.
func resolveAgainst(base string, ref *url.URL) string {
	b, _ := url.Parse(base)
	return b.ResolveReference(ref).String()
}

// previewInChromium: signed in to the dashboard, the preview URL goes
// through the sign-in redirect and comes back; the page's WebSocket echoes
// and its EventSource gets every event. A screenshot shows it.
func previewInChromium(t *testing.T, p *previewEnv, name string) {
	t.Helper()
	b := newBrowser(t)
	pg := b.newPage()
	signInAs(pg, dashboard(p.s)+"/", p.s.Token, "")
	docs := recordDocuments(pg)
	pg.do("open the preview", chromedp.Navigate(p.url("/")))
	pg.waitJS("the dev server's page", `location.host === `+strconv.Quote(p.host())+` && document.title === "devserver: preview test page"`)
	// It went through the sign-in round: the dashboard's /preview-signin,
	// then the preview host's /.agentic-preview/auth, and back.
	var signin, auth int
	for _, u := range docs.all() {
		signin += b2i(strings.HasPrefix(u, dashboard(p.s)+"/preview-signin?"))
		auth += b2i(strings.HasPrefix(u, p.url("/.agentic-preview/auth?")))
		if strings.Contains(u, p.s.Token) {
			t.Errorf("the operator token in a URL the browser loaded: %s", u)
		}
	}
	if signin == 0 || auth != 1 || docs.count(p.url("/")) != 2 {
		t.Errorf("the browser's documents: %q; want the preview, the dashboard's /preview-signin, the preview host's auth, the preview", docs.all())
	}
	pg.waitJS("the WebSocket echo", `document.getElementById("ws").dataset.echo === "hello"`)
	pg.waitJS("every SSE event", `document.getElementById("sse-state").dataset.done === "true" && document.querySelectorAll("#sse li").length === 5`)
	pg.shot("preview-" + name)
	if got := pg.eval(`document.getElementById("sse").innerText`); !strings.Contains(got, "event 1 of 5") || !strings.Contains(got, "event 5 of 5") {
		t.Errorf("events on the page: %q", got)
	}
	// Reloaded, the page comes straight: the preview cookie is held.
	before := len(docs.all())
	pg.do("reload the preview", chromedp.Reload())
	pg.waitJS("the WebSocket echo after a reload", `document.getElementById("ws").dataset.echo === "hello"`)
	if got := docs.all()[before:]; len(got) != 1 || got[0] != p.url("/") {
		t.Errorf("documents of the reload: %q, want the preview alone", got)
	}
	// The page cannot read the dashboard's API, though the browser is
	// signed in there.
	if got := pg.evalAsync(`fetch(` + strconv.Quote(dashboard(p.s)+"/api/v1/agents") + `, {credentials: "include"}).then(r => "read " + r.status, () => "refused")`); got != "refused" {
		t.Errorf("the dashboard's API from the preview page: %s, want refused", got)
	}
}

// previewPortForward: `agenticctl port-forward` with two pairs, each
// carrying the page and a 64 MiB download at once.
func previewPortForward(t *testing.T, p *previewEnv) {
	t.Helper()
	l1, l2 := freePort(t), freePort(t)
	cmd := exec.Command(bins.Ctl, "--server", p.s.RESTURL, "--token", p.s.Token, "port-forward", p.env,
		fmt.Sprintf("%d:%d", l1, p.port), fmt.Sprintf("%d:%d", l2, p.port))
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agenticctl port-forward said:\n%s", out.String())
		}
	})
	for _, l := range []int{l1, l2} {
		eventually(t, patience, fmt.Sprintf("port-forward listening on %d", l), func() bool {
			c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(l)), time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
	const size = 64 << 20
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for _, l := range []int{l1, l2} {
		base := fmt.Sprintf("http://127.0.0.1:%d", l)
		c := &http.Client{Transport: &http.Transport{}}
		wg.Add(2)
		go func() {
			defer wg.Done()
			if n, err := download(c, base+"/download?bytes="+strconv.Itoa(size), ""); err != nil || n != size {
				errs <- fmt.Errorf("64 MiB through %s: %d bytes, %v", base, n, err)
			}
		}()
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
			resp, err := c.Do(req)
			if err != nil {
				errs <- fmt.Errorf("the page through %s: %v", base, err)
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(previewPage)) {
				errs <- fmt.Errorf("the page through %s: %d %v %.200s", base, resp.StatusCode, err, b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The dev server saw a plain request: no credentials of ours.
	resp, body := previewGet(t, &http.Client{}, fmt.Sprintf("http://127.0.0.1:%d/echo-headers", l1))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("echo-headers through port-forward: %d %s", resp.StatusCode, body)
	}
	if _, ok := echoed(t, body).Headers["Authorization"]; ok {
		t.Errorf("credentials at the dev server through port-forward: %s", body)
	}
}

// syncBuffer is a bytes.Buffer safe for a process's output and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// freePort is a TCP port free on this machine's loopback just now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

var (
	devserverOnce sync.Once
	devserverBin  []byte
	devserverErr  error
)

// devserverBinary is cmd/internal/devserver, static, built once.
func devserverBinary(t *testing.T) []byte {
	t.Helper()
	devserverOnce.Do(func() {
		dir, err := os.MkdirTemp("", "devserver-")
		if err != nil {
			devserverErr = err
			return
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "devserver")
		root, err := harness.ModuleRoot()
		if err != nil {
			devserverErr = err
			return
		}
		build := exec.Command("go", "build", "-o", bin, "./cmd/internal/devserver")
		build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			devserverErr = fmt.Errorf("%v %s", err, out)
			return
		}
		devserverBin, devserverErr = os.ReadFile(bin)
	})
	if devserverErr != nil {
		t.Fatalf("building the dev server: %v", devserverErr)
	}
	return devserverBin
}
