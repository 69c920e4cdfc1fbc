package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// A page may open the terminal WebSocket only from this server's own
// origins: same scheme, host and port. A page on another port of the same
// host, another host, or a rebound DNS name (whose Host header matches its
// Origin) is refused before the token is even looked at.
func TestWebSocketOriginMustBeTheServersOwn(t *testing.T) {
	s := startServer(t, 0, "")
	host, port, _ := strings.Cut(strings.TrimPrefix(s.AgentURL, "http://"), ":")
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
