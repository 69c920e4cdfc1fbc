package wsterm

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// busySessions refuses input as busy a number of times, then takes it.
type busySessions struct {
	SessionService // only Input and Leave are called
	mu             sync.Mutex
	busyFor        int // refusals left; <0: always busy
	refusals       int
	taken          []string
}

func (b *busySessions) Input(_ context.Context, _, _ string, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.busyFor != 0 {
		b.busyFor--
		b.refusals++
		return ports.ErrStdinBusy
	}
	b.taken = append(b.taken, string(data))
	return nil
}

func (b *busySessions) Leave(string, string) {}

func (b *busySessions) state() (int, []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.refusals, append([]string(nil), b.taken...)
}

type oneID struct{}

func (oneID) NewID() string { return "viewer-1" }

func dialInput(t *testing.T, sv SessionService) *websocket.Conn {
	t.Helper()
	srv := httptest.NewServer(New(Config{Sessions: sv, IDs: oneID{}, Token: "tok"}).Handler())
	t.Cleanup(srv.Close)
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/ws?token=tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	return ws
}

func readFrame(t *testing.T, ws *websocket.Conn) map[string]any {
	t.Helper()
	var f map[string]any
	if err := ws.ReadJSON(&f); err != nil {
		t.Fatal(err)
	}
	return f
}

// While a session's input queue is full, its input frame waits (the socket
// is not read meanwhile) and then goes in whole: nothing is dropped, and the
// frames after it are handled after it.
func TestInputWaitsForRoomInsteadOfDropping(t *testing.T) {
	sv := &busySessions{busyFor: 5}
	ws := dialInput(t, sv)
	for _, f := range []map[string]any{
		{"type": "input", "id": "in-1", "session_id": "s1", "data": "hello"},
		{"type": "ping", "id": "p-1"},
	} {
		if err := ws.WriteJSON(f); err != nil {
			t.Fatal(err)
		}
	}
	f := readFrame(t, ws)
	if f["type"] != "pong" || f["id"] != "p-1" {
		t.Fatalf("got %v, want the pong (no error for the input)", f)
	}
	refusals, taken := sv.state()
	if refusals != 5 || len(taken) != 1 || taken[0] != "hello" {
		t.Fatalf("after the pong: %d refusals, input taken %q", refusals, taken)
	}
}

// Input a session does not take within InputPatience is refused with a
// stdin_busy error frame naming the frame: not written, and said so.
func TestInputRefusedWhenTheQueueStaysFull(t *testing.T) {
	old := InputPatience
	InputPatience = 50 * time.Millisecond
	t.Cleanup(func() { InputPatience = old })
	sv := &busySessions{busyFor: -1}
	ws := dialInput(t, sv)
	if err := ws.WriteJSON(map[string]any{"type": "input", "id": "in-1", "session_id": "s1", "data": "hello"}); err != nil {
		t.Fatal(err)
	}
	f := readFrame(t, ws)
	if f["type"] != "error" || f["id"] != "in-1" || f["code"] != "stdin_busy" {
		t.Fatalf("got %v, want a stdin_busy error for in-1", f)
	}
	if _, taken := sv.state(); len(taken) != 0 {
		t.Fatalf("refused input was taken: %q", taken)
	}
}
