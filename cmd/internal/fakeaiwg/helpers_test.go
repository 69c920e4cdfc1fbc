package fakeaiwg_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/aiwg"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// memOutbox is the shared fake outbox, with a helper to fill it.
type memOutbox struct{ *portsfake.Outbox }

func newOutbox() *memOutbox { return &memOutbox{portsfake.NewOutbox()} }

// add appends mission events numbered by data "n".
func (o *memOutbox) add(t *testing.T, mission string, typ string, n int) ports.Event {
	t.Helper()
	evs, err := o.Append(context.Background(), ports.Event{
		Type: ports.EventType(typ), MissionID: mission,
		TS:   time.Date(2026, 5, 9, 7, 13, 22, 120_000_000, time.UTC),
		Data: map[string]any{"n": n},
	})
	if err != nil {
		t.Fatal(err)
	}
	return evs[0]
}

type hitlCall struct{ id, text string }

// memHub is an in-memory ports.ExecutorHub owning a fixed set of missions.
type memHub struct {
	mu       sync.Mutex
	owned    []string
	resyncs  int
	hitl     []hitlCall
	hitlCh   chan hitlCall
	onResync func() // runs inside Resync, e.g. to append events meanwhile
	fail     error
}

func newHub(owned ...string) *memHub {
	return &memHub{owned: owned, hitlCh: make(chan hitlCall, 16)}
}

func (h *memHub) Resync(context.Context) (ports.Event, []ports.Event, error) {
	h.mu.Lock()
	h.resyncs++
	owned := append([]string{}, h.owned...)
	hook, fail := h.onResync, h.fail
	h.mu.Unlock()
	if fail != nil {
		return ports.Event{}, nil, fail
	}
	if hook != nil {
		hook()
	}
	now := time.Now()
	resync := ports.Event{Type: ports.EventResync, TS: now, Data: map[string]any{
		"owned_mission_ids": owned, "protocol_version": "1.0.0",
	}}
	var pairs []ports.Event
	for _, id := range owned {
		pairs = append(pairs,
			ports.Event{Type: "mission.reconnected", MissionID: id, TS: now, Data: map[string]any{"checkpoint_id": "ck-" + id}},
			ports.Event{Type: "mission.resumed", MissionID: id, TS: now, Data: map[string]any{"state": "running", "resumed_from": "suspended"}},
		)
	}
	return resync, pairs, nil
}

func (h *memHub) HITLResponded(_ context.Context, id, text string) error {
	h.mu.Lock()
	h.hitl = append(h.hitl, hitlCall{id, text})
	h.mu.Unlock()
	select {
	case h.hitlCh <- hitlCall{id, text}:
	default:
	}
	if id == "unknown" {
		return errors.New("no such HITL request")
	}
	return nil
}

func (h *memHub) hitlCalls() []hitlCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hitlCall(nil), h.hitl...)
}

const testInstance = "0196b3a4-7c1e-7d2a-9f00-1234567890ab"

func testCaps() []string {
	return []string{"isolation:host", "platform:linux/amd64", "resumable", "hitl"}
}

// rig is a client under test against a fake aiwg serve.
type rig struct {
	t    *testing.T
	srv  *fakeaiwg.Server
	hub  *memHub
	out  *memOutbox
	c    *aiwg.Client
	logs *testkit.Buffer // for the token-leak check
	stop context.CancelFunc
	done chan struct{}
}

// newRig builds (but does not start) a client against a fresh fake.
func newRig(t *testing.T, hub *memHub, out *memOutbox, tweak func(*aiwg.Config)) *rig {
	t.Helper()
	srv, err := fakeaiwg.Start()
	if err != nil {
		t.Fatal(err)
	}
	if hub == nil {
		hub = newHub()
	}
	if out == nil {
		out = newOutbox()
	}
	r := &rig{t: t, srv: srv, hub: hub, out: out, logs: &testkit.Buffer{}}
	cfg := aiwg.Config{
		Endpoint:     srv.URL(),
		Name:         "test",
		InstanceID:   testInstance,
		Version:      "1.2.3",
		GRPCEndpoint: "http://10.0.0.5:8120",
		WSEndpoint:   "ws://10.0.0.5:8121",
		RESTEndpoint: "http://10.0.0.5:8122",
		Capabilities: testCaps,
		Hub:          hub,
		Outbox:       out,
		Logger:       slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		BackoffMin:   20 * time.Millisecond,
		BackoffMax:   200 * time.Millisecond,
		PingInterval: time.Second, // generous: a loaded CI box must not look like a dead peer
	}
	if tweak != nil {
		tweak(&cfg)
	}
	r.c = aiwg.New(cfg)
	t.Cleanup(func() {
		if r.stop != nil {
			r.stop()
			select {
			case <-r.done:
			case <-time.After(time.Second):
				t.Error("Run did not return within 1 s after its context ended")
			}
		}
		srv.Close()
		r.checkNoTokenLeak()
	})
	return r
}

// start runs the client until the test ends.
func (r *rig) start() *rig {
	ctx, cancel := context.WithCancel(context.Background())
	r.stop, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		r.c.Run(ctx)
	}()
	return r
}

// checkNoTokenLeak fails if any issued token shows in the logs or status.
func (r *rig) checkNoTokenLeak() {
	st, _ := json.Marshal(r.c.Status())
	logs := r.logs.String()
	for _, tok := range r.srv.Tokens() {
		if strings.Contains(logs, tok) {
			r.t.Errorf("token %q appears in the logs", tok)
		}
		if strings.Contains(string(st), tok) {
			r.t.Errorf("token %q appears in the status", tok)
		}
	}
}

// waitLong bounds a wait for what must happen: only a hang outlasts it,
// however loaded the machine.
const waitLong = 30 * time.Second

// waitFor polls cond for up to waitLong.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFrame waits up to waitLong for a matching frame.
func (r *rig) waitFrame(what string, match func(fakeaiwg.Frame) bool) fakeaiwg.Frame {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	f, err := r.srv.WaitFrame(ctx, match)
	if err != nil {
		r.t.Fatalf("waiting for %s: %v (frames: %s)", what, err, describe(r.srv.Frames()))
	}
	return f
}

func describe(fs []fakeaiwg.Frame) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "\n  conn %d %s %s n=%v", f.Conn, f.Event, f.MissionID, f.Data["n"])
	}
	return b.String()
}

// num is a frame's data "n", or -1.
func num(f fakeaiwg.Frame) int {
	if v, ok := f.Data["n"].(float64); ok {
		return int(v)
	}
	return -1
}
