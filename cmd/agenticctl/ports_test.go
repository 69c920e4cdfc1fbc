package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// envsOf is the environments use case knowing only the environments given
// (each one's agent has its name); it changes none.
type envsOf map[string]environment.Environment

func (e envsOf) Runtimes() []ports.RuntimeCapabilities                         { return nil }
func (e envsOf) OfferedNetworks(ports.RuntimeCapabilities) []ports.NetworkMode { return nil }
func (e envsOf) Create(context.Context, environment.Request) (environment.Environment, error) {
	return environment.Environment{}, ports.ErrUnsupported
}
func (e envsOf) List(context.Context) []environment.Environment { return nil }
func (e envsOf) Get(name string) (environment.Environment, bool) {
	return e.Inspect(context.Background(), name)
}
func (e envsOf) Inspect(_ context.Context, name string) (environment.Environment, bool) {
	env, ok := e[name]
	return env, ok
}
func (e envsOf) Start(context.Context, string) (environment.Environment, error) {
	return environment.Environment{}, ports.ErrUnsupported
}
func (e envsOf) Stop(context.Context, string) (environment.Environment, error) {
	return environment.Environment{}, ports.ErrUnsupported
}
func (e envsOf) Pause(context.Context, string) (environment.Environment, error) {
	return environment.Environment{}, ports.ErrUnsupported
}
func (e envsOf) Resume(context.Context, string) (environment.Environment, error) {
	return environment.Environment{}, ports.ErrUnsupported
}
func (e envsOf) Hibernate(context.Context, string) (environment.Environment, error) {
	return environment.Environment{}, ports.ErrUnsupported
}
func (e envsOf) Wake(context.Context, string) (environment.Environment, error) {
	return environment.Environment{}, ports.ErrUnsupported
}
func (e envsOf) Delete(context.Context, string) error      { return ports.ErrUnsupported }
func (e envsOf) InjectedUsage(string) (inject.Usage, bool) { return inject.Usage{}, false }

// listeningOf is a ports.ListeningPortsReader of fixed lists.
type listeningOf map[string]ports.ListeningPorts

func (l listeningOf) ListeningPorts(agentID string) ports.ListeningPorts { return l[agentID] }

// portsFixture is a real REST server with environment "dev", whose agent
// reports 5173 and 8080 listening, and whose ports 5173 and 6000 reach
// real TCP echo servers.
type portsFixture struct {
	*fixture
	forwards *resttest.Forwards
	srv      *httptest.Server
}

func newPortsFixture(t *testing.T, tlsServer bool) *portsFixture {
	t.Helper()
	link := resttest.NewLink()
	link.AddAgent(ports.AgentInfo{ID: "dev", Status: "ready", Runtime: "docker", Hostname: "dev"})
	fw := resttest.NewForwards()
	for _, p := range []uint16{5173, 6000} {
		echo, err := resttest.NewEchoServer()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = echo.Close() })
		fw.Route("dev", p, echo.Addr())
	}
	d := rest.Deps{Link: link, Agents: link, Token: token, Version: "test",
		Environments: envsOf{"dev": {Name: "dev", Runtime: "docker", State: environment.StateReady, AgentID: "dev"}},
		ListeningPorts: listeningOf{"dev": {UpdatedAt: time.Now(), Ports: []ports.ListeningPort{
			{Port: 5173, Address: "127.0.0.1", Family: ports.FamilyIPv4, Process: "node"},
			{Port: 8080, Address: "0.0.0.0", Family: ports.FamilyIPv4},
		}}},
		Forwards: fw, PublicPorts: portsfake.NewPublicPorts()}
	var srv *httptest.Server
	if tlsServer {
		srv = httptest.NewTLSServer(rest.New(d).Handler())
		// The CLI trusts the system's roots, by way of net/http's default
		// transport: make that trust the test server for this test.
		dt := http.DefaultTransport.(*http.Transport)
		old := dt.TLSClientConfig
		dt.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		t.Cleanup(func() { dt.TLSClientConfig = old })
	} else {
		srv = httptest.NewServer(rest.New(d).Handler())
	}
	t.Cleanup(srv.Close)
	return &portsFixture{fixture: &fixture{link: link, url: srv.URL}, forwards: fw, srv: srv}
}

func TestPortsListPublicAndPrivate(t *testing.T) {
	f := newPortsFixture(t, false)
	r := f.run(t, "", "ports", "dev")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	port := f.srv.Listener.Addr().(*net.TCPAddr).Port
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	want := []string{
		"PORT ADDRESS PROCESS PUBLIC PREVIEW",
		fmt.Sprintf("5173 127.0.0.1 node no http://5173-dev.localhost:%d/", port),
		fmt.Sprintf("8080 0.0.0.0 - no http://8080-dev.localhost:%d/", port),
	}
	if len(lines) != len(want) {
		t.Fatalf("table:\n%s", r.stdout)
	}
	for i := range want {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != want[i] {
			t.Errorf("line %d: %q, want %q", i, got, want[i])
		}
	}

	r = f.run(t, "", "port", "public", "dev", "5173", "--ttl", "2h")
	if r.code != 0 || !regexp.MustCompile(`^port 5173 of dev is public until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ `).MatchString(r.stdout) {
		t.Fatalf("port public: exit %d: %q %s", r.code, r.stdout, r.stderr)
	}
	until := strings.Fields(r.stdout)[7]
	at, err := time.Parse(time.RFC3339, until)
	if err != nil || at.Before(time.Now().Add(time.Hour)) || at.After(time.Now().Add(3*time.Hour)) {
		t.Fatalf("public until %s (%v), want about two hours from now", until, err)
	}
	r = f.run(t, "", "ports", "dev")
	if r.code != 0 || !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), "5173 127.0.0.1 node until "+until+" http://5173-dev.localhost:") {
		t.Fatalf("after port public:\n%s%s", r.stdout, r.stderr)
	}
	r = f.run(t, "", "ports", "--json", "dev")
	if r.code != 0 || !strings.Contains(r.stdout, `"public": true`) || !strings.Contains(r.stdout, `"public_until": "`) {
		t.Fatalf("ports --json:\n%s%s", r.stdout, r.stderr)
	}
	r = f.run(t, "", "port", "private", "dev", "5173")
	if r.code != 0 || r.stdout != "port 5173 of dev is private\n" {
		t.Fatalf("port private: exit %d: %q %s", r.code, r.stdout, r.stderr)
	}
	if r = f.run(t, "", "ports", "dev"); strings.Contains(r.stdout, "until") {
		t.Fatalf("after port private:\n%s", r.stdout)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ports", "nope"}, "environment_not_found, HTTP 404"},
		{[]string{"ports"}, "ports takes one environment"},
		{[]string{"port", "public", "nope", "5173"}, "environment_not_found, HTTP 404"},
		{[]string{"port", "private", "nope", "5173"}, "environment_not_found, HTTP 404"},
		{[]string{"port", "public", "dev", "0"}, `"0" is not a TCP port`},
		{[]string{"port", "public", "dev"}, "takes an environment and a port"},
		{[]string{"port", "public", "--ttl", "30s", "dev", "5173"}, "--ttl 30s: from 1m to 720h"},
		{[]string{"port", "public", "dev", "5173", "--ttl", "721h"}, "--ttl 721h0m0s: from 1m to 720h"},
		{[]string{"port", "open", "dev", "5173"}, `unknown port command "open"`},
	} {
		r := f.run(t, "", c.args...)
		if r.code != exitError || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	r = runWith(t, envOf("AGENTIC_SERVER", f.url, "AGENTIC_OPERATOR_TOKEN", "wrong"), "", "port", "public", "dev", "5173")
	if r.code != exitError || !strings.Contains(r.stderr, "unauthorized") {
		t.Fatalf("a wrong token: exit %d: %s", r.code, r.stderr)
	}
}

// lockedBuffer is written by the CLI's goroutines and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startPortForward runs port-forward until the test ends it with the
// returned stop, which waits for it and returns its exit code.
func (f *portsFixture) startPortForward(t *testing.T, args ...string) (stdout, stderr *lockedBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	old := portForwardContext
	portForwardContext = func() (context.Context, context.CancelFunc) { return ctx, cancel }
	t.Cleanup(func() { portForwardContext = old })
	stdout, stderr = &lockedBuffer{}, &lockedBuffer{}
	done := make(chan int, 1)
	env := envOf("AGENTIC_SERVER", f.url, "AGENTIC_OPERATOR_TOKEN", token)
	go func() {
		done <- run(append([]string{"port-forward"}, args...), strings.NewReader(""), stdout, stderr, env)
	}()
	var once sync.Once
	code := -1
	stop = func() int {
		once.Do(func() {
			cancel()
			code = testkit.Receive(t, 15*time.Second, done, "port-forward did not end on its context's end")
		})
		return code
	}
	t.Cleanup(func() { stop() })
	return stdout, stderr, stop
}

var forwardingLine = regexp.MustCompile(`(?m)^Forwarding from (\S+) -> (\d+)$`)

// listening waits for port-forward's n "Forwarding from" lines and returns
// the local address of each remote port.
func listening(t *testing.T, stdout, stderr *lockedBuffer, n int) map[string]string {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, "port-forward listening", func() bool {
		return len(forwardingLine.FindAllString(stdout.String(), -1)) == n || stderr.String() != ""
	})
	out := map[string]string{}
	for _, m := range forwardingLine.FindAllStringSubmatch(stdout.String(), -1) {
		out[m[2]] = m[1]
	}
	if len(out) != n {
		t.Fatalf("port-forward: %q, %q; want %d forwards", stdout, stderr, n)
	}
	return out
}

// echoThrough sends payload to addr, ends its side, and checks that the
// same bytes come back, then the end.
func echoThrough(addr string, payload []byte) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second)) // a hang fails, never blocks the run
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(payload)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		wrote <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		return fmt.Errorf("reading back: %w (after %d bytes)", err, len(got))
	}
	if err := <-wrote; err != nil {
		return err
	}
	if !bytes.Equal(got, payload) {
		return fmt.Errorf("got %d bytes back, want the %d sent", len(got), len(payload))
	}
	return nil
}

func TestPortForwardSeveralPairs(t *testing.T) {
	for _, tlsServer := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[tlsServer], func(t *testing.T) {
			f := newPortsFixture(t, tlsServer)
			stdout, stderr, stop := f.startPortForward(t, "dev", ":5173", ":6000", ":7000")
			addrs := listening(t, stdout, stderr, 3)
			for remote, addr := range addrs {
				if !strings.HasPrefix(addr, "127.0.0.1:") {
					t.Fatalf("%s listens on %s, want 127.0.0.1", remote, addr)
				}
			}
			// Both pairs at once, several connections each, with more than
			// the socket buffers hold so that both ways run together.
			var wg sync.WaitGroup
			errs := make(chan error, 6)
			for _, remote := range []string{"5173", "6000"} {
				for i := range 3 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						payload := make([]byte, 1<<20+i)
						_, _ = rand.Read(payload)
						if err := echoThrough(addrs[remote], payload); err != nil {
							errs <- fmt.Errorf("-> %s #%d: %w", remote, i, err)
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}

			// Nothing listens on 7000: that connection ends, the error is
			// printed, and port-forward goes on.
			c, err := net.Dial("tcp", addrs["7000"])
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(60 * time.Second))
			if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
				t.Fatalf("the connection to 7000: %q, %v; want it closed", b, err)
			}
			c.Close()
			testkit.Eventually(t, 15*time.Second, "the refusal printed", func() bool {
				return strings.Contains(stderr.String(), " -> 7000: ")
			})
			if line := stderr.String(); !regexp.MustCompile(`^agenticctl: port-forward 127\.0\.0\.1:\d+ -> 7000: port 7000 of environment "dev": nothing listens .*\(port_not_listening, HTTP 502\)\n$`).MatchString(line) {
				t.Fatalf("stderr %q, want the server's port_not_listening", line)
			}
			if err := echoThrough(addrs["5173"], []byte("still forwarding")); err != nil {
				t.Fatalf("after a refusal: %v", err)
			}
			if code := stop(); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if _, err := net.Dial("tcp", addrs["5173"]); err == nil {
				t.Fatal("still listening after port-forward ended")
			}
		})
	}
}

// TestPortForwardLocalPorts: LOCAL:REMOTE listens on LOCAL, PORT alone is
// that port on both sides, and --address picks where it listens.
func TestPortForwardLocalPorts(t *testing.T) {
	f := newPortsFixture(t, false)
	for _, form := range []string{"LOCAL:REMOTE", "PORT"} {
		t.Run(form, func(t *testing.T) {
			// A port free a moment ago may be taken by the time port-forward
			// listens (other tests run on this machine): try a few.
			for try := 0; ; try++ {
				free := freePort(t)
				remote := free
				arg := fmt.Sprint(free)
				if form == "LOCAL:REMOTE" {
					remote = 5173
					arg = fmt.Sprintf("%d:5173", free)
				} else {
					f.forwards.Route("dev", uint16(free), f.echoAddr(t))
				}
				stdout, stderr, stop := f.startPortForward(t, "--address", "127.0.0.1", "dev", arg)
				testkit.Eventually(t, 15*time.Second, "port-forward listening", func() bool {
					return strings.Contains(stdout.String(), "Forwarding") || stderr.String() != ""
				})
				if strings.Contains(stderr.String(), "address already in use") && try < 5 {
					stop()
					continue
				}
				want := fmt.Sprintf("Forwarding from 127.0.0.1:%d -> %d\n", free, remote)
				if stdout.String() != want {
					t.Fatalf("stdout %q, stderr %q; want %q", stdout, stderr, want)
				}
				if err := echoThrough(fmt.Sprintf("127.0.0.1:%d", free), []byte("to "+arg)); err != nil {
					t.Fatal(err)
				}
				if code := stop(); code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				return
			}
		})
	}
}

// freePort is a loopback TCP port nothing listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// echoAddr starts another echo server.
func (f *portsFixture) echoAddr(t *testing.T) string {
	t.Helper()
	echo, err := resttest.NewEchoServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = echo.Close() })
	return echo.Addr()
}

// TestPortForwardRefusesBeforeListening: a wrong environment, token or
// pair fails at once, listening on nothing.
func TestPortForwardRefusesBeforeListening(t *testing.T) {
	f := newPortsFixture(t, false)
	for _, c := range []struct {
		env  func(string) string
		args []string
		want string
	}{
		{nil, []string{"port-forward", "nope", "8080:5173"}, "environment_not_found, HTTP 404"},
		{envOf("AGENTIC_SERVER", f.url, "AGENTIC_OPERATOR_TOKEN", "wrong"), []string{"port-forward", "dev", "8080:5173"}, "unauthorized"},
		{nil, []string{"port-forward", "dev"}, "takes an environment and LOCAL:REMOTE"},
		{nil, []string{"port-forward", "dev", "8080:0"}, "the remote port must be 1 to 65535"},
		{nil, []string{"port-forward", "dev", "x:5173"}, "the local port must be 1 to 65535"},
		{nil, []string{"port-forward", "dev", "8080:5173:1"}, "the remote port must be"},
		{nil, []string{"port-forward", "--address", "256.0.0.1", "dev", ":5173"}, "listening for 5173"},
	} {
		env := c.env
		if env == nil {
			env = envOf("AGENTIC_SERVER", f.url, "AGENTIC_OPERATOR_TOKEN", token)
		}
		r := runWith(t, env, "", c.args...)
		if r.code != exitError || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stdout, "Forwarding") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 1 and %q", c.args, r.code, r.stdout, r.stderr, c.want)
		}
	}
}

// TestPortForwardHelp: --help says how, on stdout.
func TestPortForwardHelp(t *testing.T) {
	r := runWith(t, envOf(), "", "port-forward", "--help")
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	sc.Scan()
	if r.code != 0 || sc.Text() != "Usage:" || !strings.Contains(r.stdout, "--address") {
		t.Fatalf("exit %d: %q", r.code, r.stdout)
	}
}
