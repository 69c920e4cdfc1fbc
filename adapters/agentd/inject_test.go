package agentd

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
)

// fakeInjectRoute stands for the server's inject route: it keeps what it
// was sent and streams two events, the second when the test says.
type fakeInjectRoute struct {
	mu      sync.Mutex
	seen    []*http.Request
	bodies  []string
	release chan struct{}
}

func (f *fakeInjectRoute) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.seen = append(f.seen, r.Clone(r.Context()))
	f.bodies = append(f.bodies, string(b))
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Upstream", "yes")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprint(w, "data: one\n\n")
	w.(http.Flusher).Flush()
	<-f.release
	fmt.Fprint(w, "data: two\n\n")
}

func TestInjectEndpointCarriesRequestsToTheServer(t *testing.T) {
	route := &fakeInjectRoute{release: make(chan struct{})}
	srv := httptest.NewUnstartedServer(route)
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = p
	srv.Start()
	defer srv.Close()
	a, err := New(testConfig(srv.URL, newFakeRunner()))
	if err != nil {
		t.Fatal(err)
	}
	urls, err := a.injectURLs(map[string]string{"ANTHROPIC_BASE_URL": "ANTHROPIC_API_KEY", "OTHER_URL": "A B"})
	if err != nil {
		t.Fatal(err)
	}
	base := urls["ANTHROPIC_BASE_URL"]
	if !strings.HasPrefix(base, "http://127.0.0.1:") || !strings.HasSuffix(base, "/ANTHROPIC_API_KEY") || !strings.HasSuffix(urls["OTHER_URL"], "/A%20B") {
		t.Fatalf("urls %v", urls)
	}
	if again, _ := a.injectURLs(map[string]string{"X": "ANTHROPIC_API_KEY"}); again["X"] != base {
		t.Fatalf("a second endpoint: %v", again)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages?beta=true", strings.NewReader(`{"model":"m"}`))
	req.Header.Set("X-Api-Key", "placeholder")
	req.Header.Set("X-Agent-Secret", "forged") // the workload's own: replaced
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Upstream") != "yes" {
		t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	// The first event comes while the server still holds the second.
	if line, err := br.ReadString('\n'); err != nil || line != "data: one\n" {
		t.Fatalf("first event %q %v", line, err)
	}
	close(route.release)
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: two\n\n" {
		t.Fatalf("rest %q", rest)
	}
	route.mu.Lock()
	defer route.mu.Unlock()
	got := route.seen[0]
	if got.URL.Path != agentwire.InjectPath+"ANTHROPIC_API_KEY/v1/messages" || got.URL.RawQuery != "beta=true" || got.Method != http.MethodPost {
		t.Fatalf("the server was asked %s %s?%s", got.Method, got.URL.Path, got.URL.RawQuery)
	}
	if got.Header.Get("X-Agent-Id") != testAgentID || got.Header.Get("X-Agent-Secret") != testSecret || got.Header.Get("X-Api-Key") != "placeholder" {
		t.Fatalf("headers %v", got.Header)
	}
	if route.bodies[0] != `{"model":"m"}` {
		t.Fatalf("body %q", route.bodies[0])
	}
}

func TestInjectEndpointWithoutASecretName(t *testing.T) {
	a, err := New(testConfig("http://127.0.0.1:1", newFakeRunner()))
	if err != nil {
		t.Fatal(err)
	}
	urls, err := a.injectURLs(map[string]string{"U": "K"})
	if err != nil {
		t.Fatal(err)
	}
	root := strings.TrimSuffix(urls["U"], "/K")
	resp, err := http.Get(root + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("%d", resp.StatusCode)
	}
	// A server that cannot be reached is a 502 with a code.
	resp, err = http.Get(urls["U"] + "/v1/messages")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "server_unreachable") || strings.Contains(string(b), testSecret) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// A command with inject endpoints gets each variable set to the agent's
// endpoint for its secret, over a value the command brought itself.
func TestCommandGetsItsInjectEndpoints(t *testing.T) {
	cp, url := startCP(t)
	r := newFakeRunner()
	runAgent(t, testConfig(url, r))
	s := cp.nextSession(t)
	s.send(commandMsg(&sandboxv1.CommandRequest{CommandId: "c1", Command: "x",
		Env:             map[string]string{"ANTHROPIC_API_KEY": "placeholder", "ANTHROPIC_BASE_URL": "https://elsewhere"},
		InjectEndpoints: map[string]string{"ANTHROPIC_BASE_URL": "ANTHROPIC_API_KEY"}}))
	p := within(t, r.started, "the command")
	env := p.spec.Env
	if !strings.HasPrefix(env["ANTHROPIC_BASE_URL"], "http://127.0.0.1:") || !strings.HasSuffix(env["ANTHROPIC_BASE_URL"], "/ANTHROPIC_API_KEY") || env["ANTHROPIC_API_KEY"] != "placeholder" {
		t.Fatalf("env %v", env)
	}
}
