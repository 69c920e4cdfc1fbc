package injectproxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

const realKey = "sk-ant-real-key-0123456789"

// fakeAPI is a Messages API over TLS: it records the key it is given and
// answers JSON, or streams events one at a time when asked.
type fakeAPI struct {
	srv *httptest.Server

	mu   sync.Mutex
	keys []string
	hdrs []http.Header
	// next releases the stream's second event.
	next chan struct{}
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{next: make(chan struct{})}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.keys = append(f.keys, r.Header.Get("X-Api-Key"))
		f.hdrs = append(f.hdrs, r.Header.Clone())
		f.mu.Unlock()
		if r.URL.Path != "/v1/messages" {
			http.NotFound(w, r)
			return
		}
		if r.URL.Query().Get("stream") == "1" {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":100,\"output_tokens\":1}}}\n\n")
			w.(http.Flusher).Flush()
			<-f.next
			fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":200}}\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"model":"claude-haiku-4-5","usage":{"input_tokens":10,"output_tokens":20}}`)
	}))
	f.srv.EnableHTTP2 = true
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) port() int { return f.srv.Listener.Addr().(*net.TCPAddr).Port }

func (f *fakeAPI) seen() ([]string, []http.Header) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...), append([]http.Header(nil), f.hdrs...)
}

type rig struct {
	api   *fakeAPI
	reg   *inject.Registry
	proxy *Proxy
	front *httptest.Server
	ph    string
	recs  chan Record
}

// newRig serves the proxy for the environment named in the X-Test-Env
// header (standing in for the agent link, which knows it), at /<secret>/<path>.
func newRig(t *testing.T, limits inject.Limits) *rig {
	api := newFakeAPI(t)
	reg := inject.NewRegistry(nil)
	spec, err := inject.ParseSpec(fmt.Sprintf("example.com:%d", api.port()), "x-api-key", "", "ANTHROPIC_BASE_URL")
	if err != nil {
		t.Fatal(err)
	}
	g, err := reg.Register("env-a", []inject.Secret{{Name: "ANTHROPIC_API_KEY", Spec: spec, Value: realKey}}, limits, func(b []byte) error { _, err := rand.Read(b); return err })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register("env-b", []inject.Secret{{Name: "ANTHROPIC_API_KEY", Spec: spec, Value: "sk-other"}}, inject.Limits{}, func(b []byte) error { _, err := rand.Read(b); return err }); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(api.srv.Certificate())
	recs := make(chan Record, 64)
	p := New(Config{Registry: reg, RootCAs: roots, Pinned: map[string]netip.Addr{"example.com": netip.MustParseAddr("127.0.0.1")},
		MaxRequestBytes: 1 << 20, Observe: func(r Record) { recs <- r }})
	t.Cleanup(p.Close)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
		p.Serve(w, r, r.Header.Get("X-Test-Env"), secret, "/"+rest)
	}))
	t.Cleanup(front.Close)
	return &rig{api: api, reg: reg, proxy: p, front: front, ph: g[0].Placeholder, recs: recs}
}

func (r *rig) send(t *testing.T, env, path, key, body string, extra ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.front.URL+"/ANTHROPIC_API_KEY"+path, strings.NewReader(body))
	req.Header.Set("X-Test-Env", env)
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestInjectsTheKeyAndReadsUsage(t *testing.T) {
	r := newRig(t, inject.Limits{})
	resp, body := r.send(t, "env-a", "/v1/messages", r.ph, `{"model":"claude-haiku-4-5"}`, "Accept-Encoding", "identity", "X-Forwarded-For", "10.1.2.3", "X-Agent-Secret", "agent-secret")
	if resp.StatusCode != 200 || !strings.Contains(body, `"output_tokens":20`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	keys, hdrs := r.api.seen()
	if len(keys) != 1 || keys[0] != realKey {
		t.Fatalf("the API saw keys %q", keys)
	}
	if hdrs[0].Get("X-Forwarded-For") != "" || hdrs[0].Get("X-Agent-Secret") != "" || strings.Contains(fmt.Sprint(hdrs[0]), r.ph) {
		t.Fatalf("the API saw %v", hdrs[0])
	}
	// The record is made once the answer is through, after the usage is kept.
	rec := testkit.Receive(t, 15*time.Second, r.recs, "the request's record")
	u, _ := r.reg.Usage("env-a")
	if u.Requests != 1 || u.InputTokens != 10 || u.OutputTokens != 20 || u.CostUSD <= 0 ||
		u.BytesSent != int64(len(`{"model":"claude-haiku-4-5"}`)) || u.BytesReceived != int64(len(body)) {
		t.Fatalf("usage %+v (answer of %d bytes)", u, len(body))
	}
	if rec.Status != 200 || rec.Usage == nil || rec.Host != "example.com" || rec.BytesDown == 0 {
		t.Fatalf("record %+v", rec)
	}
	if strings.Contains(fmt.Sprintf("%+v", rec), realKey) || strings.Contains(fmt.Sprintf("%+v", rec), r.ph) {
		t.Fatal("the record holds a secret")
	}
}

func TestStreamsEventByEvent(t *testing.T) {
	r := newRig(t, inject.Limits{})
	req, _ := http.NewRequest(http.MethodPost, r.front.URL+"/ANTHROPIC_API_KEY/v1/messages?stream=1", strings.NewReader(`{}`))
	req.Header.Set("X-Test-Env", "env-a")
	req.Header.Set("X-Api-Key", r.ph)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	// The first event arrives while the API still holds back the second:
	// nothing on the way buffers the stream.
	first := make(chan string, 1)
	go func() {
		var b strings.Builder
		for {
			line, err := br.ReadString('\n')
			b.WriteString(line)
			if err != nil || line == "\n" {
				first <- b.String()
				return
			}
		}
	}()
	got := testkit.Receive(t, 15*time.Second, first, "the first event")
	if !strings.Contains(got, "message_start") {
		t.Fatalf("first event %q", got)
	}
	close(r.api.next)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "message_delta") {
		t.Fatalf("rest %q", rest)
	}
	testkit.Eventually(t, 15*time.Second, "the stream's usage", func() bool {
		u, _ := r.reg.Usage("env-a")
		return u.OutputTokens == 200 && u.InputTokens == 100
	})
}

func TestRefusals(t *testing.T) {
	r := newRig(t, inject.Limits{PerMinute: 1000})
	for name, c := range map[string]struct {
		env, path, key, body string
		status               int
		code                 string
	}{
		"no placeholder":            {"env-a", "/v1/messages", "", `{}`, 403, inject.CodeNoPlaceholder},
		"placeholder in the body":   {"env-a", "/v1/messages", r.ph, `{"x":"` + r.ph + `"}`, 403, inject.CodeMisplaced},
		"placeholder in the URL":    {"env-a", "/v1/" + r.ph, r.ph, `{}`, 403, inject.CodeMisplaced},
		"from another environment":  {"env-b", "/v1/messages", r.ph, `{}`, 403, inject.CodeForeign},
		"an environment without it": {"env-x", "/v1/messages", r.ph, `{}`, 403, inject.CodeForeign},
		"too large":                 {"env-a", "/v1/messages", r.ph, strings.Repeat("x", 1<<20+1), 413, "too_large"},
	} {
		resp, body := r.send(t, c.env, c.path, c.key, c.body)
		var e struct{ Error, Code string }
		_ = json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != c.status || e.Code != c.code || e.Error == "" {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
		if strings.Contains(body, realKey) || strings.Contains(body, r.ph) {
			t.Errorf("%s: the answer tells a secret: %s", name, body)
		}
		if rec := testkit.Receive(t, 15*time.Second, r.recs, "the refusal's record"); strings.Contains(fmt.Sprintf("%+v", rec), r.ph) {
			t.Errorf("%s: the record holds the placeholder: %+v", name, rec)
		}
	}
	if keys, _ := r.api.seen(); len(keys) != 0 {
		t.Fatalf("refused requests reached the API: %q", keys)
	}
	// After the environment is removed its placeholder is gone.
	r.reg.Forget("env-a")
	if resp, body := r.send(t, "env-a", "/v1/messages", r.ph, `{}`); resp.StatusCode != 403 || !strings.Contains(body, inject.CodeGone) {
		t.Fatalf("after removal: %d %s", resp.StatusCode, body)
	}
}

func TestBudgetStopsRequests(t *testing.T) {
	// Haiku 4.5: 10 input + 20 output tokens cost $0.00011.
	r := newRig(t, inject.Limits{MaxCostUSD: 0.0001})
	if resp, _ := r.send(t, "env-a", "/v1/messages", r.ph, `{}`); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	testkit.Receive(t, 15*time.Second, r.recs, "the first request's record")
	resp, body := r.send(t, "env-a", "/v1/messages", r.ph, `{}`)
	if resp.StatusCode != 429 || !strings.Contains(body, inject.CodeBudget) {
		t.Fatalf("over budget: %d %s", resp.StatusCode, body)
	}
	if keys, _ := r.api.seen(); len(keys) != 1 {
		t.Fatalf("the API saw %d requests", len(keys))
	}
}

func TestUnpinnedInternalAddressRefused(t *testing.T) {
	reg := inject.NewRegistry(nil)
	spec, _ := inject.ParseSpec("api.anthropic.com", "x-api-key", "", "")
	g, err := reg.Register("e", []inject.Secret{{Name: "K", Spec: spec, Value: realKey}}, inject.Limits{}, func(b []byte) error { _, err := rand.Read(b); return err })
	if err != nil {
		t.Fatal(err)
	}
	// A resolver that answers the cloud's metadata address: refused, as
	// egress refuses it, before any connection is made.
	p := New(Config{Registry: reg, Resolve: func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
	}})
	defer p.Close()
	req := httptest.NewRequest(http.MethodPost, "/K/v1/messages", strings.NewReader(`{}`))
	req.Header.Set("X-Api-Key", g[0].Placeholder)
	w := httptest.NewRecorder()
	p.Serve(w, req, "e", "K", "/v1/messages")
	if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), "internal address") || strings.Contains(w.Body.String(), realKey) {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
}
