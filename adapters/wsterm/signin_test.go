package wsterm

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// TestSessionCookieOpensTheSocketUntilSignOut: a page signed in opens /ws
// with its session cookie alone; once the session is ended (sign-out) the
// same cookie is refused, as is one of no session, and a socket it opened
// is closed.
func TestSessionCookieOpensTheSocketUntilSignOut(t *testing.T) {
	sessions := signin.NewSessions(portsfake.NewSignInSessions(), "tok")
	srv := httptest.NewServer(New(Config{Sessions: &busySessions{}, IDs: oneID{}, Token: "tok", SignIns: sessions}).Handler())
	t.Cleanup(srv.Close)
	value, _, err := sessions.Mint(signin.OperatorTokenID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dial := func(cookie string) int {
		t.Helper()
		ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", http.Header{"Cookie": {signin.CookieName + "=" + cookie}})
		if ws != nil {
			_ = ws.Close()
		}
		if resp == nil {
			t.Fatalf("dial: %v", err)
		}
		return resp.StatusCode
	}
	if got := dial(value); got != http.StatusSwitchingProtocols {
		t.Fatalf("a live session: %d", got)
	}
	// A socket open on the session is closed when it ends.
	open, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", http.Header{"Cookie": {signin.CookieName + "=" + value}})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	closed := make(chan error, 1)
	go func() {
		for {
			if _, _, err := open.ReadMessage(); err != nil {
				closed <- err
				return
			}
		}
	}()
	if got := dial(strings.Repeat("A", 43)); got != http.StatusUnauthorized {
		t.Fatalf("no such session: %d", got)
	}
	if err := sessions.End(value); err != nil {
		t.Fatal(err)
	}
	if got := dial(value); got != http.StatusUnauthorized {
		t.Fatalf("after sign-out: %d", got)
	}
	select {
	case err := <-closed:
		if !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
			t.Fatalf("the open socket ended with %v, want a close 1008", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the socket open on the session stayed open after sign-out")
	}
}
