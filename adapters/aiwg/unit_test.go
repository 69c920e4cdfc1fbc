package aiwg

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The client's behaviour against a real (fake) aiwg serve over HTTP and
// WebSocket is tested in cmd/internal/fakeaiwg, which Go's internal-package
// rule keeps this package from importing. These are the unit tests.

// stubHub records HITL answers; Resync is not used by the unit tests.
type stubHub struct {
	mu   sync.Mutex
	hitl [][2]string
}

func (h *stubHub) Resync(context.Context) (ports.Event, []ports.Event, error) {
	return ports.Event{Type: ports.EventResync}, nil, nil
}

func (h *stubHub) HITLResponded(_ context.Context, id, text string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hitl = append(h.hitl, [2]string{id, text})
	return nil
}

func (h *stubHub) calls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.hitl)
}

func TestEncodeEvent(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	b, err := encodeEvent(ports.Event{Seq: 9, Type: ports.EventResync, MissionID: "ignored"}, "ex", now)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"event":"executor.resync","executor_id":"ex","ts":"2026-01-02T03:04:05.006Z","data":{}}` {
		t.Errorf("got %s", b)
	}
	if _, err := encodeEvent(ports.Event{Type: "x", Data: map[string]any{"bad": make(chan int)}}, "ex", now); err == nil {
		t.Error("unencodable data accepted")
	}
}

func TestIntegrationOff(t *testing.T) {
	c := New(Config{})
	runReturns(t, c, "Run did not return with no endpoint")
	if c.Configured() || c.Registered() || c.VerifyToken("") || c.VerifyToken("x") {
		t.Error("unconfigured client claims a registration")
	}
	if st := c.Status(); st != (ports.ExecutorStatus{}) {
		t.Errorf("status %+v", st)
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Errorf("Flush: %v", err)
	}
	c.Reconnect() // must not block
}

func TestInvalidEndpoint(t *testing.T) {
	c := New(Config{Endpoint: "ftp://user:secret@host/x"})
	runReturns(t, c, "Run did not return with an unusable endpoint")
	st := c.Status()
	if !st.Configured || st.ExecutorRegisterError == "" || strings.Contains(st.Endpoint, "secret") {
		t.Errorf("status %+v", st)
	}
}

func TestStreamURL(t *testing.T) {
	for _, tc := range []struct{ endpoint, want string }{
		{"http://h:7337", "ws://h:7337/ws/executors/a%2Fb?token=T%26x"},
		{"https://user:pw@h/base/", "wss://h/base/ws/executors/a%2Fb?token=T%26x"},
		{"http://h:1/aiwg?k=v#frag", "ws://h:1/aiwg/ws/executors/a%2Fb?k=v&token=T%26x"},
	} {
		c := New(Config{Endpoint: tc.endpoint})
		if got := c.streamURL("T&x", "ws", "executors", "a%2Fb"); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.endpoint, got, tc.want)
		}
	}
	c := New(Config{Endpoint: "https://user:pw@h/base"})
	h := http.Header{}
	c.authHeader(h)
	if h.Get("Authorization") != "Basic dXNlcjpwdw==" {
		t.Errorf("auth header %q", h.Get("Authorization"))
	}
	if got := c.endpointURL("api", "v1", "executors", "register").String(); got != "https://h/base/api/v1/executors/register" {
		t.Errorf("endpoint URL %s", got)
	}
}

func TestConfirmations(t *testing.T) {
	var k confirmations
	p1, p2, p3 := k.add(5), k.add(7), k.add(7)
	if _, ok := k.pong("garbage"); ok {
		t.Error("garbage pong confirmed something")
	}
	if seq, ok := k.pong(p2); !ok || seq != 7 {
		t.Errorf("pong %s: %d %v", p2, seq, ok)
	}
	if _, ok := k.pong(p1); ok {
		t.Error("stale pong confirmed again")
	}
	if seq, ok := k.pong(p3); !ok || seq != 7 {
		t.Errorf("pong %s: %d %v", p3, seq, ok)
	}
	if _, ok := k.pong(""); ok {
		t.Error("empty pong confirmed something")
	}
}

// runReturns runs c and fails the test with what unless Run returns by
// itself (its context never ends) within a wait that only a hang outlasts.
func runReturns(t *testing.T, c *Client, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); c.Run(context.Background()) }()
	testkit.Receive(t, 15*time.Second, done, what)
}
