package wsterm

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// A session's stream writes its frames on its own goroutine (no hand-off
// to the connection's writer) only when no frame sent before is still
// queued: the creator's session_started and role_changed come before the
// output the command wrote at once, and output written while the client
// keeps the connection busy with other frames (pongs, queued by the read
// loop) arrives whole and in order.
func TestStreamedFramesNeverOvertakeQueuedOnes(t *testing.T) {
	agents := portsfake.NewDirectory(ports.AgentInfo{ID: "a1", Status: ports.AgentReady})
	link := portsfake.NewLink(portsfake.WithDirectory(agents))
	const chunks = 300
	var want strings.Builder
	for i := range chunks {
		fmt.Fprintf(&want, "chunk %04d|", i)
	}
	// The first output is in the log before the creator is even told of
	// the session; the rest comes while the client sends pings.
	release := make(chan struct{})
	link.SetOnStart(func(c *portsfake.Command) {
		c.Emit(ports.StreamPTY, []byte("chunk 0000|"))
		go func() {
			<-release
			for i := 1; i < chunks; i++ {
				c.Emit(ports.StreamPTY, fmt.Appendf(nil, "chunk %04d|", i))
			}
		}()
	})
	log := portsfake.NewSessionLog(0)
	ids := &seqIDs{}
	svc := session.New(session.Config{Link: link, Agents: agents, Log: log, Clock: clock.Wall{}, IDs: ids})
	srv := New(Config{Sessions: svc, Agents: agents, Log: log, IDs: ids, Token: "tok"})
	c := dialHandler(t, srv)

	if err := c.WriteJSON(map[string]any{"type": "create_session", "id": "create", "agent_id": "a1", "session_type": "interactive", "command": "sh"}); err != nil {
		t.Fatal(err)
	}
	close(release)
	for i := range 100 {
		if err := c.WriteJSON(map[string]any{"type": "ping", "id": fmt.Sprintf("p%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var order []string
	var got strings.Builder
	next := uint64(0)
	pongs := 0
	deadline := time.Now().Add(30 * time.Second)
	for got.Len() < want.Len() || pongs < 100 {
		_ = c.SetReadDeadline(deadline)
		var f map[string]any
		if err := c.ReadJSON(&f); err != nil {
			t.Fatalf("after %q (%d pongs, frames %v): %v", got.String(), pongs, order, err)
		}
		typ, _ := f["type"].(string)
		switch typ {
		case FramePong:
			pongs++
			continue
		case FrameOutput:
			off := uint64(f["offset"].(float64))
			if off != next {
				t.Fatalf("output at offset %d, want %d (frames so far %v)", off, next, order)
			}
			data, _ := f["data"].(string)
			got.WriteString(data)
			next += uint64(len(data))
		}
		if len(order) == 0 || order[len(order)-1] != typ {
			order = append(order, typ)
		}
	}
	if got.String() != want.String() {
		t.Fatalf("output %q, want %q", got.String(), want.String())
	}
	if len(order) < 3 || order[0] != FrameSessionStarted || order[1] != FrameRoleChanged || order[2] != FrameOutput {
		t.Fatalf("frames in the order %v, want session_started, role_changed, then output", order)
	}
}

func dialHandler(t *testing.T, s *Server) *websocket.Conn {
	t.Helper()
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/ws?token=tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}
