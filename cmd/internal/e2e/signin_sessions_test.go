package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// TestSignInSessionsEndOnSignOut: the dashboard's sign-in is a session kept
// by the server. Its cookie reads the API and opens the client WebSocket;
// sign-out ends it on the server (the same cookie, replayed, is refused
// everywhere, and the socket it opened is closed); a session outlives a restart on the same data dir but not a
// new operator token; the file keeps no cookie; the sixth wrong sign-in
// within a minute from one address is 429 with Retry-After, while another
// address still signs in.
func TestSignInSessionsEndOnSignOut(t *testing.T) {
	t.Parallel()
	s := startServer(t, 0, "")

	cookie := signInCookie(t, s.RESTURL, s.Token, nil)
	wantSessionReads(t, s, cookie, http.StatusOK, "a fresh session")
	wantSessionWS(t, s, cookie, http.StatusSwitchingProtocols, "a fresh session")

	// A socket open on the session is closed by its sign-out.
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.RESTURL, "http://"))
	p, _ := strconv.Atoi(port)
	open, _, err := websocket.DefaultDialer.Dial(fmt.Sprintf("ws://127.0.0.1:%d/ws", p-1), http.Header{"Cookie": {cookie.Name + "=" + cookie.Value}})
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

	resp := signinPost(t, nil, s.RESTURL+"/api/v1/signout", "", cookie)
	if resp.StatusCode != http.StatusNoContent || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
		t.Fatalf("sign-out: %d %v", resp.StatusCode, resp.Cookies())
	}
	wantSessionReads(t, s, cookie, http.StatusUnauthorized, "the cookie after sign-out")
	wantSessionWS(t, s, cookie, http.StatusUnauthorized, "the cookie after sign-out")
	if err := testkit.Receive(t, patience, closed, "the socket open on the session closed by sign-out"); !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
		t.Fatalf("the socket open on the session ended with %v, want a close 1008", err)
	}

	// A restart keeps a session; the file holds no cookie value.
	cookie = signInCookie(t, s.RESTURL, s.Token, nil)
	stop(t, s)
	b, err := os.ReadFile(filepath.Join(s.DataDir, "signin-sessions.json"))
	if err != nil || strings.Contains(string(b), cookie.Value) || !strings.Contains(string(b), `"token_id":"operator"`) {
		t.Fatalf("signin-sessions.json: %v %s", err, b)
	}
	if fi, err := os.Stat(filepath.Join(s.DataDir, "signin-sessions.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("signin-sessions.json mode: %v %v", fi, err)
	}
	s2 := restart(t, s)
	wantSessionReads(t, s2, cookie, http.StatusOK, "the cookie after a restart")

	// Another operator token ends every session.
	stop(t, s2)
	s2.Opts.Env = append(s2.Opts.Env, "AGENTIC_OPERATOR_TOKEN=another-operator-token-for-the-sign-in-test")
	s3 := restart(t, s2)
	s3.Token = "another-operator-token-for-the-sign-in-test"
	wantSessionReads(t, s3, cookie, http.StatusUnauthorized, "the cookie after the operator token changed")

	// Failed sign-ins from one address are limited; another address is not.
	for i := range 5 {
		if r := signinPost(t, nil, s3.RESTURL+"/api/v1/signin", `{"token":"wrong"}`, nil); r.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong sign-in %d: %d", i+1, r.StatusCode)
		}
	}
	r := signinPost(t, nil, s3.RESTURL+"/api/v1/signin", `{"token":"`+s3.Token+`"}`, nil)
	var body struct{ Error, Code string }
	_ = json.Unmarshal(r.body, &body)
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); r.StatusCode != http.StatusTooManyRequests || body.Code != "too_many_sign_ins" || err != nil || ra < 1 || ra > 60 {
		t.Fatalf("the sixth sign-in: %d %q %s", r.StatusCode, r.Header.Get("Retry-After"), r.body)
	}
	// The server's log reaches the test through a pipe: read as it comes.
	testkit.Eventually(t, patience, "the 429 in the server's log", func() bool {
		return strings.Contains(s3.Log(), "too many failed sign-ins")
	})
	other := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	c := signInCookie(t, s3.RESTURL, s3.Token, other)
	wantSessionReads(t, s3, c, http.StatusOK, "a session signed in from another address")
}

type signinResponse struct {
	*http.Response
	body []byte
}

// signinPost posts body (none if "") with cookie (if any), from dialer's
// address (nil: the default).
func signinPost(t *testing.T, dialer *net.Dialer, url, body string, cookie *http.Cookie) signinResponse {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if cookie != nil {
		req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
	}
	client := http.DefaultClient
	if dialer != nil {
		client = &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return signinResponse{Response: resp, body: b}
}

// signInCookie signs in as the dashboard does and returns the cookie.
func signInCookie(t *testing.T, restURL, token string, dialer *net.Dialer) *http.Cookie {
	t.Helper()
	resp := signinPost(t, dialer, restURL+"/api/v1/signin", `{"token":"`+token+`"}`, nil)
	if resp.StatusCode != http.StatusNoContent || len(resp.Cookies()) != 1 || resp.Cookies()[0].Name != "agentic_session" {
		t.Fatalf("sign-in: %d %v %s", resp.StatusCode, resp.Cookies(), resp.body)
	}
	return resp.Cookies()[0]
}

func wantSessionReads(t *testing.T, s *harness.Server, cookie *http.Cookie, want int, what string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, s.RESTURL+"/api/v1/agents", nil)
	req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("%s: GET /api/v1/agents %d, want %d", what, resp.StatusCode, want)
	}
}

// wantSessionWS opens the client WebSocket with the cookie.
func wantSessionWS(t *testing.T, s *harness.Server, cookie *http.Cookie, want int, what string) {
	t.Helper()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.RESTURL, "http://"))
	p, _ := strconv.Atoi(port)
	h := http.Header{"Cookie": {cookie.Name + "=" + cookie.Value}}
	ws, resp, err := websocket.DefaultDialer.Dial(fmt.Sprintf("ws://127.0.0.1:%d/ws", p-1), h)
	if ws != nil {
		ws.Close()
	}
	if resp == nil || resp.StatusCode != want {
		t.Fatalf("%s: the client WebSocket: %v %v, want %d", what, resp, err, want)
	}
}
