package e2e

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/tlsca"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// Issue 31: a task's ANTHROPIC_API_KEY is injected. The run holds a
// placeholder and its client talks to $ANTHROPIC_BASE_URL (the agent's
// endpoint); the server puts the real key in and reaches the (fake) API
// over TLS it verifies. The key is nowhere the run can read.

const injectRealKey = "sk-ant-e2e-REAL-4f1d9c0b7a"

// fakeModelAPI is the Anthropic API over TLS with a certificate for
// api.anthropic.com from a CA of the test's own (the server trusts it by
// SSL_CERT_FILE). It streams message_start, then waits for the client to
// ask for the rest (POST /v1/ack): a stream buffered on the way would
// never be asked for. Non-streamed requests answer with a usage block.
type fakeModelAPI struct {
	port   string
	caFile string

	mu       sync.Mutex
	keys     []string
	acked    chan struct{}
	ackOnce  sync.Once
	unacked  bool // the stream's rest went out without the ack
	requests int
}

func newFakeModelAPI(t *testing.T) *fakeModelAPI {
	t.Helper()
	ca, err := tlsca.Open(t.TempDir(), []string{"api.anthropic.com"}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeModelAPI{acked: make(chan struct{})}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := tls.NewListener(tcp, ca.TLSConfig())
	srv := &http.Server{Handler: http.HandlerFunc(f.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	_, f.port, _ = net.SplitHostPort(ln.Addr().String())
	// Readable by the server's process (SSL_CERT_FILE).
	f.caFile = filepath.Join(t.TempDir(), "ca.pem")
	pem, err := os.ReadFile(ca.CAPath())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.caFile, pem, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeModelAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.keys = append(f.keys, r.Header.Get("X-Api-Key"))
	f.requests++
	f.mu.Unlock()
	body := new(bytes.Buffer)
	_, _ = body.ReadFrom(r.Body)
	switch {
	case r.URL.Path == "/v1/ack":
		f.ackOnce.Do(func() { close(f.acked) })
		w.WriteHeader(http.StatusOK)
	case r.URL.Path == "/v1/messages" && strings.Contains(body.String(), `"stream":true`):
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-haiku-4-5\",\"usage\":{\"input_tokens\":11,\"output_tokens\":1}}}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-f.acked:
		case <-time.After(patience):
			f.mu.Lock()
			f.unacked = true
			f.mu.Unlock()
		}
		fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":22}}\n\n")
		fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	case r.URL.Path == "/v1/messages":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"model":"claude-sonnet-4-5","usage":{"input_tokens":1000,"output_tokens":1000}}`)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeModelAPI) seen() (keys []string, unacked bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...), f.unacked
}

// injectClientRepo is a repository holding the injectclient program, which
// every runtime stages into the run's workspace.
func injectClientRepo(t *testing.T) string {
	t.Helper()
	repo := baseRepo(t, "a")
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(repo, "injectclient"), "./cmd/internal/e2e/testdata/injectclient")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building injectclient: %v %s", err, out)
	}
	gitIn(t, repo, "add", "injectclient")
	gitIn(t, repo, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "client")
	testkit.OpenToAll(t, repo)
	return repo
}

func TestInjectedSecretOnTheHostRuntime(t *testing.T) {
	// Workloads run as users of their own (as the server does by default
	// as root): one that shared the server's user could read its memory.
	s, spentID := injectScenario(t, "host", "", func(data string, env ...string) *harness.Server {
		return startServer(t, 0, data, append(env, "AGENTIC_RUNTIMES=host", "AGENTIC_TASK_RUNTIME=host", "AGENTIC_HOST_USER=")...)
	})
	// The dashboard's task view shows the spent task's usage and why it
	// ended. A screenshot (inject-usage) goes to the test's artifacts.
	p := newBrowser(t).newPage()
	signInAs(p, s.RESTURL+"/", s.Token, "")
	p.do("the spent task", chromedp.Navigate(s.RESTURL+"/#/task/"+spentID), chromedp.WaitVisible(testid("task-usage")))
	p.waitJS("its usage and reason", `(() => { const u = document.querySelector('[data-testid="task-usage"]').innerText;
		return /\b2 requests\b/.test(u) && /2000 input, 2000 output tokens/.test(u) && /cost \$0\.03\d\d/.test(u) &&
			document.body.innerText.includes("budget_exhausted") })()`)
	p.shot("inject-usage")
}

func TestInjectedSecretInDockerWithoutANetwork(t *testing.T) {
	host := privateDockerd(t)
	_, _ = injectScenario(t, "docker", ", network_mode: none", func(data string, env ...string) *harness.Server {
		return startServer(t, 0, data, append(env, "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=docker", "AGENTIC_TASK_RUNTIME=docker", "AGENTIC_ALLOWED_NETWORKS=none")...)
	})
}

// A VM under TCG has no NIC: the agent's endpoint is on the guest's
// loopback and its requests cross the virtio-serial link.
func TestInjectedSecretInAVM(t *testing.T) {
	_, _ = injectScenario(t, "libvirt", "", func(_ string, env ...string) *harness.Server {
		return startLibvirtServer(t, append(env, "AGENTIC_TASK_RUNTIME=libvirt")...)
	})
}

// injectScenario runs its tasks on a server start gives; it returns the
// server and the id of the task its budget ended.
func injectScenario(t *testing.T, runtime, network string, start func(dataDir string, env ...string) *harness.Server) (*harness.Server, string) {
	api := newFakeModelAPI(t)
	repo := injectClientRepo(t)
	data := t.TempDir()
	s := start(data, "SSL_CERT_FILE="+api.caFile, "AGENTIC_TEST_RESOLVE=api.anthropic.com=127.0.0.1", "INJECT_REAL_KEY="+injectRealKey)
	e := &taskEnv{t: t, s: s, repo: repo, data: data}
	manifest := func(args, lifecycle string) string {
		return `
repository: {url: ` + repo + `}
command: {argv: [./injectclient, ` + args + `]}
environment: {runtime: ` + runtime + network + `}
lifecycle: {artifact_patterns: [seen.txt, results.txt]` + lifecycle + `}
secrets:
  - {name: ANTHROPIC_API_KEY, source: env, key: INJECT_REAL_KEY, inject: {host: "api.anthropic.com:` + api.port + `", header: x-api-key}}
`
	}
	artifact := func(id, name string) string {
		st, b := fileDo(t, s, http.MethodGet, s.RESTURL+"/api/v1/tasks/"+id+"/artifacts/"+name, nil)
		if st != http.StatusOK {
			t.Fatalf("artifact %s of %s: %d %s", name, id, st, b)
		}
		return string(b)
	}

	// A streamed request: the API gets the real key, the run gets the
	// events one at a time (the API sent the rest only when the client,
	// holding the first, asked).
	streamed := e.run(manifest("stream", ""))
	if streamed.State != "completed" {
		t.Fatalf("stream task %s: %s %s", streamed.State, deref(streamed.Reason), deref(streamed.Error))
	}
	results := artifact(streamed.Id, "results.txt")
	want := "stream 200 text/event-stream\nevent message_start\nack 200 \nevent message_delta\nevent message_stop\n"
	if results != want {
		t.Errorf("the stream as the run saw it:\n%s\nwant:\n%s", results, want)
	}
	keys, unacked := api.seen()
	if unacked {
		t.Error("the stream's first event did not reach the run before the rest was sent: something buffered it")
	}
	if len(keys) != 2 || keys[0] != injectRealKey || keys[1] != injectRealKey {
		t.Errorf("the API saw keys %q, want the real key twice", keys)
	}
	// Its usage, as GET /api/v1/tasks/{id} shows it: the stream's tokens
	// (11 in, 22 out) priced, and the ack's request.
	if u := e.get(streamed.Id).Usage; u == nil || u.Requests != 2 || u.InputTokens != 11 || u.OutputTokens != 22 || u.CostUsd <= 0 ||
		u.BytesSent == 0 || u.BytesReceived < int64(len("event: message_start\nevent: message_delta\nevent: message_stop\n")) {
		t.Errorf("the stream task's usage %+v, want 2 requests, 11 input and 22 output tokens, a cost, the bodies' bytes", u)
	}
	// The run could read a placeholder, never the key: its environment and
	// every /proc environ and cmdline open to it.
	seen := artifact(streamed.Id, "seen.txt")
	if strings.Contains(seen, injectRealKey) {
		t.Errorf("the run could read the real key:\n%s", seen)
	}
	placeholder, baseURL := seenVariables(seen)
	if !strings.HasPrefix(placeholder, "agentic-placeholder-") || !strings.HasPrefix(baseURL, "http://127.0.0.1:") {
		t.Errorf("the run's ANTHROPIC_API_KEY %q and ANTHROPIC_BASE_URL %q", placeholder, baseURL)
	}

	// The placeholder anywhere but its header is refused, and none of
	// those requests reaches the API.
	misused := e.run(manifest("misuse", ""))
	if got := artifact(misused.Id, "results.txt"); got != "body 403 placeholder_misplaced\nquery 403 placeholder_misplaced\nheader 403 placeholder_misplaced\n" {
		t.Errorf("misuse:\n%s", got)
	}
	// The first run's placeholder, replayed by another once the first is
	// gone, is refused.
	replayed := e.run(manifest("replay, "+placeholder, ""))
	if got := artifact(replayed.Id, "results.txt"); got != "replay 403 placeholder_gone\n" {
		t.Errorf("replay:\n%s", got)
	}
	if keys, _ := api.seen(); len(keys) != 2 {
		t.Errorf("refused requests reached the API: %d requests", len(keys))
	}

	// A budget: each answer costs $0.018 (Sonnet, 1000 in and out), the
	// third is refused with 429, and the task fails for it.
	spent := e.run(manifest("spend", ", max_cost_usd: 0.03"))
	if spent.State == "completed" || deref(spent.Reason) != "budget_exhausted" {
		t.Errorf("the spending task: %s %s %s", spent.State, deref(spent.Reason), deref(spent.Error))
	}
	if keys, _ := api.seen(); len(keys) != 4 {
		t.Errorf("the API saw %d requests, want 4 (2 of the stream, 2 within the budget)", len(keys))
	}
	if u := e.get(spent.Id).Usage; u == nil || u.Requests != 2 || u.CostUsd < 0.03 {
		t.Errorf("the spending task's usage %+v, want its 2 requests costing at least $0.03", u)
	}

	assertNoKey(t, s, data)
	return s, spent.Id
}

// seenVariables reads the ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL the
// injectclient found in its environment from its seen.txt.
func seenVariables(seen string) (placeholder, baseURL string) {
	for _, line := range strings.Split(seen, "\n") {
		if v, ok := strings.CutPrefix(line, "env ANTHROPIC_API_KEY="); ok {
			placeholder = v
		}
		if v, ok := strings.CutPrefix(line, "env ANTHROPIC_BASE_URL="); ok {
			baseURL = v
		}
	}
	return placeholder, baseURL
}
