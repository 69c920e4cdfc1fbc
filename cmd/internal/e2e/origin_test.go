package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// A page may open the terminal WebSocket only from this server's own
// origins: same scheme, host and port. A page on another port of the same
// host, another host, or a rebound DNS name (whose Host header matches its
// Origin) is refused before the token is even looked at.
func TestWebSocketOriginMustBeTheServersOwn(t *testing.T) {
	s := startServer(t, 0, "")
	host, port, _ := strings.Cut(s.AgentAddr(), ":")
	agentPort, _ := strconv.Atoi(port)
	wsURL := fmt.Sprintf("ws://%s:%d/ws", host, agentPort+1)
	restOrigin := fmt.Sprintf("http://%s:%d", host, agentPort+2)
	dial := func(origin, hostHeader string) int {
		h := http.Header{"Authorization": {"Bearer " + s.Token}}
		if origin != "" {
			h.Set("Origin", origin)
		}
		if hostHeader != "" {
			h.Set("Host", hostHeader)
		}
		ws, resp, err := websocket.DefaultDialer.Dial(wsURL, h)
		if err == nil {
			ws.Close()
			return http.StatusSwitchingProtocols
		}
		if resp == nil {
			t.Fatalf("dial %s: %v", origin, err)
		}
		return resp.StatusCode
	}
	for _, tc := range []struct {
		origin, host string
		want         int
	}{
		{"", "", http.StatusSwitchingProtocols},         // not a browser: the token decides
		{restOrigin, "", http.StatusSwitchingProtocols}, // the server's own pages
		{strings.Replace(restOrigin, host, "localhost", 1), "", http.StatusSwitchingProtocols},
		{fmt.Sprintf("http://%s:%d", host, agentPort+1), "", http.StatusSwitchingProtocols},
		{fmt.Sprintf("http://%s:%d", host, agentPort+7), "", http.StatusForbidden}, // same host, another port
		{"https://" + strings.TrimPrefix(restOrigin, "http://"), "", http.StatusForbidden},
		{"http://evil.example", "", http.StatusForbidden},
		{"http://rebound.example:" + strconv.Itoa(agentPort+1), "rebound.example:" + strconv.Itoa(agentPort+1), http.StatusForbidden},
		{"null", "", http.StatusForbidden},
	} {
		if got := dial(tc.origin, tc.host); got != tc.want {
			t.Errorf("Origin %q Host %q: %d, want %d", tc.origin, tc.host, got, tc.want)
		}
	}
}

// A frame too large or not UTF-8 is answered with an error frame; the
// connection stays up for the next one.
func TestWebSocketBadFramesGetErrorFrames(t *testing.T) {
	s := startServer(t, 0, "")
	host, port, _ := strings.Cut(s.AgentAddr(), ":")
	p, _ := strconv.Atoi(port)
	ws, _, err := websocket.DefaultDialer.Dial(fmt.Sprintf("ws://%s:%d/ws", host, p+1), http.Header{"Authorization": {"Bearer " + s.Token}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	next := func(want string) map[string]any {
		t.Helper()
		for {
			_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
			var f map[string]any
			if err := ws.ReadJSON(&f); err != nil {
				t.Fatalf("waiting for %s: %v", want, err)
			}
			if f["type"] == want {
				return f
			}
		}
	}
	big := `{"type":"ping","id":"` + strings.Repeat("x", 2<<20) + `"}`
	if err := ws.WriteMessage(websocket.TextMessage, []byte(big)); err != nil {
		t.Fatal(err)
	}
	if f := next("error"); f["code"] != "frame_too_large" {
		t.Fatalf("a 2 MiB frame: %v", f)
	}
	if err := ws.WriteMessage(websocket.TextMessage, []byte("{\"type\":\"ping\",\"id\":\"\xff\xfe\"}")); err != nil {
		t.Fatal(err)
	}
	if f := next("error"); f["code"] != "invalid_frame" {
		t.Fatalf("invalid UTF-8: %v", f)
	}
	if err := ws.WriteJSON(map[string]any{"type": "ping", "id": "still-here"}); err != nil {
		t.Fatal(err)
	}
	if f := next("pong"); f["id"] != "still-here" {
		t.Fatalf("after the bad frames: %v", f)
	}
}
