package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// closingSocket is a /ws connection read until the server closes it.
type closingSocket struct {
	closed   chan struct{}
	closeErr error
	closedAt time.Time
}

// dialRefusal dials /ws with a bearer token expecting a refusal: its
// status and body (a socket opened is a failure).
func dialRefusal(t *testing.T, s *harness.Server, token string) (int, string) {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(wsURLOf(s), http.Header{"Authorization": {"Bearer " + token}})
	if err == nil {
		_ = ws.Close()
		t.Fatal("/ws opened where a refusal was expected")
	}
	if resp == nil {
		t.Fatalf("dial /ws: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func wsURLOf(s *harness.Server) string {
	host, port, _ := strings.Cut(s.AgentAddr(), ":")
	p, _ := strconv.Atoi(port)
	return fmt.Sprintf("ws://%s:%d/ws", host, p+1)
}

// dialClosing opens /ws with a bearer token and reads it until the server
// closes it.
func dialClosing(t *testing.T, s *harness.Server, token string) *closingSocket {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(wsURLOf(s), http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatalf("dial /ws: %v", err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	c := &closingSocket{closed: make(chan struct{})}
	go func() {
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				c.closeErr, c.closedAt = err, time.Now()
				close(c.closed)
				return
			}
		}
	}()
	return c
}

// waitClosed waits (patience) until the server closes the socket with
// 1008: when.
func (c *closingSocket) waitClosed(t *testing.T, what string) time.Time {
	t.Helper()
	select {
	case <-c.closed:
	case <-time.After(patience):
		t.Fatalf("%s: the socket is still open", what)
	}
	if !websocket.IsCloseError(c.closeErr, websocket.ClosePolicyViolation) {
		t.Fatalf("%s: the socket ended with %v, want a close 1008", what, c.closeErr)
	}
	return c.closedAt
}

// answer waits for the frame answering the request id.
func answer(v *wsViewer, id string) map[string]any {
	v.t.Helper()
	return v.waitFor("the answer to "+id, func(f map[string]any) bool { return f["id"] == id })
}

// openChangeStream opens GET /api/v1/changes with token, reads its hello,
// and returns a channel closed (with the time) when the stream ends.
func openChangeStream(t *testing.T, s *harness.Server, token string) <-chan time.Time {
	t.Helper()
	req, _ := http.NewRequest("GET", s.RESTURL+"/api/v1/changes", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the change stream: %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the change stream before its hello: %v", err)
		}
		if strings.HasPrefix(line, "event: hello") {
			break
		}
	}
	ended := make(chan time.Time, 1)
	go func() {
		_, _ = io.Copy(io.Discard, br)
		ended <- time.Now()
	}()
	return ended
}

func waitStreamEnd(t *testing.T, ch <-chan time.Time, what string) time.Time {
	t.Helper()
	select {
	case at := <-ch:
		return at
	case <-time.After(patience):
		t.Fatalf("%s: the change stream is still open", what)
		return time.Time{}
	}
}

// restCall is rolesCall with the body as a string.
func restCall(t *testing.T, s *harness.Server, token, method, path, body string) (int, string) {
	t.Helper()
	st, b := rolesCall(t, s, method, path, body, token)
	return st, string(b)
}

// TestWebSocketRolesEndToEnd, with the real agentic-mgmt, a host agent and
// real WebSockets: a viewer token joins an operator's shell as an observer
// and sees its output, while its take control, input and kill are refused
// with forbidden error frames and change nothing; an executor token gets
// 403 forbidden on /ws; a revoked token's open socket and open change
// stream are closed (the delay after DELETE is logged), and so are an
// expiring token's once its expires_at passes (the delay after it is
// logged); the control frames over /ws are in GET /api/v1/audit.
func TestWebSocketRolesEndToEnd(t *testing.T) {
	s := startServer(t, 1, "")
	newToken := func(name, role, extra string) string {
		t.Helper()
		st, body := restCall(t, s, s.Token, "POST", "/api/v1/tokens", fmt.Sprintf(`{"name":%q,"role":%q%s}`, name, role, extra))
		var c struct{ Token string }
		if st != http.StatusCreated || json.Unmarshal([]byte(body), &c) != nil || c.Token == "" {
			t.Fatalf("token %s: %d %s", name, st, body)
		}
		return c.Token
	}
	opTok := newToken("ops", "operator", "")
	viewTok := newToken("watcher", "viewer", "")
	execTok := newToken("orchestrator", "executor", "")

	// The operator starts a shell and controls it.
	op := dialWS(t, s, opTok)
	op.send(map[string]any{"type": "create_session", "id": "c1", "agent_id": "host-01", "session_type": "interactive", "command": "sh"})
	started := answer(op, "c1")
	sid, _ := started["session_id"].(string)
	if started["type"] != "session_started" || sid == "" {
		t.Fatalf("the operator's create_session: %v", started)
	}
	op.waitFor("the operator's control", func(f map[string]any) bool {
		return f["type"] == "role_changed" && f["session_id"] == sid && f["role"] == "controller"
	})

	// The viewer observes it: it sees what the operator types run.
	v := dialWS(t, s, viewTok)
	if v.ws == nil {
		t.Fatalf("the viewer's /ws: %v", v.frames)
	}
	v.send(map[string]any{"type": "hello", "id": "h"})
	if got := answer(v, "h"); got["role"] != "viewer" {
		t.Fatalf("the viewer's hello: %v", got)
	}
	v.send(map[string]any{"type": "join_session", "id": "j", "session_id": sid, "replay_from": 0})
	if got := answer(v, "j"); got["type"] != "role_changed" || got["role"] != "observer" {
		t.Fatalf("the viewer's join: %v", got)
	}
	op.send(map[string]any{"type": "input", "session_id": sid, "data": "echo observed-$((6*7))\r"})
	v.waitOutput(sid, regexp.MustCompile(`observed-42`))

	// Take control, input and kill are refused to the viewer.
	for id, f := range map[string]map[string]any{
		"take":  {"type": "join_session", "session_id": sid, "role": "controller", "take": true},
		"input": {"type": "input", "session_id": sid, "data": "echo pwned-$((6*7))\r"},
		"kill":  {"type": "kill_session", "session_id": sid},
		"shell": {"type": "start_shell", "agent_id": "host-01"},
	} {
		f["id"] = id
		v.send(f)
		got := answer(v, id)
		if got["type"] != "error" || got["code"] != "forbidden" || !strings.Contains(fmt.Sprint(got["message"]), `"viewer"`) {
			t.Fatalf("the viewer's %s: %v", id, got)
		}
	}
	// Nothing happened: the operator still controls a running shell, which
	// never ran the viewer's input.
	op.send(map[string]any{"type": "input", "session_id": sid, "data": "echo still-$((40+2))\r"})
	op.waitOutput(sid, regexp.MustCompile(`still-42`))
	op.mu.Lock()
	pwned := strings.Contains(string(op.out[sid]), "pwned-42")
	op.mu.Unlock()
	if pwned {
		t.Fatal("the viewer's input ran")
	}
	if st, body := restCall(t, s, s.Token, "GET", "/api/v1/sessions/"+sid, ""); st != 200 || !strings.Contains(body, `"state":"running"`) {
		t.Fatalf("the session after the viewer's refusals: %d %s", st, body)
	}

	// An executor may not open /ws at all.
	st, body := dialRefusal(t, s, execTok)
	var refusal struct{ Error, Code string }
	if st != http.StatusForbidden || json.Unmarshal([]byte(body), &refusal) != nil || refusal.Code != "forbidden" || !strings.Contains(refusal.Error, `role "executor"`) {
		t.Fatalf("the executor's /ws: %d %s", st, body)
	}

	// Revocation closes the token's open socket and change stream.
	revTok := newToken("revoked", "viewer", "")
	revWS := dialClosing(t, s, revTok)
	revStream := openChangeStream(t, s, revTok)
	sent := time.Now()
	if st, body := restCall(t, s, s.Token, "DELETE", "/api/v1/tokens/revoked", ""); st != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", st, body)
	}
	wsAt := revWS.waitClosed(t, "the revoked token's socket")
	streamAt := waitStreamEnd(t, revStream, "the revoked token's stream")
	t.Logf("revocation: the socket closed %v and the change stream ended %v after DELETE /api/v1/tokens was sent", wsAt.Sub(sent), streamAt.Sub(sent))
	if st, _ := dialRefusal(t, s, revTok); st != http.StatusUnauthorized {
		t.Fatalf("the revoked token's /ws: %d", st)
	}

	// Expiry likewise, once expires_at passes.
	// Far enough ahead for a loaded machine to open both first.
	expires := time.Now().Add(8 * time.Second).UTC()
	expTok := newToken("brief", "viewer", fmt.Sprintf(`,"expires_at":%q`, expires.Format(time.RFC3339Nano)))
	expWS := dialClosing(t, s, expTok)
	expStream := openChangeStream(t, s, expTok)
	wsAt = expWS.waitClosed(t, "the expired token's socket")
	streamAt = waitStreamEnd(t, expStream, "the expired token's stream")
	if wsAt.Before(expires) || streamAt.Before(expires) {
		t.Fatalf("closed before expires_at %v: socket %v, stream %v", expires, wsAt, streamAt)
	}
	t.Logf("expiry: the socket closed %v and the change stream ended %v after expires_at", wsAt.Sub(expires), streamAt.Sub(expires))

	// The operator takes control from a second socket, and kills the shell.
	op2 := dialWS(t, s, opTok)
	op2.send(map[string]any{"type": "join_session", "id": "t", "session_id": sid, "role": "controller", "take": true})
	if got := answer(op2, "t"); got["role"] != "controller" {
		t.Fatalf("the operator's take control: %v", got)
	}
	op2.send(map[string]any{"type": "kill_session", "id": "k", "session_id": sid})
	op2.waitFor("the shell's end", func(f map[string]any) bool { return f["type"] == "session_exited" && f["session_id"] == sid })

	// The audit log has each control frame, in order, and never the input.
	st, body = restCall(t, s, s.Token, "GET", "/api/v1/audit?target="+sid, "")
	var audit struct {
		Entries []struct {
			Actor, Role, Client, Operation, Target, Code string
			Status                                       int
			RequestID                                    string `json:"request_id"`
		}
	}
	if st != 200 || json.Unmarshal([]byte(body), &audit) != nil {
		t.Fatalf("GET /api/v1/audit: %d %s", st, body)
	}
	var got []string
	for _, e := range audit.Entries {
		if e.Client != "127.0.0.1" || len(e.RequestID) < 16 {
			t.Fatalf("entry without client or request id: %+v", e)
		}
		got = append(got, fmt.Sprintf("%s %s %s %d %s", e.Actor, e.Role, e.Operation, e.Status, e.Code))
	}
	want := []string{
		"ops operator ws.createSession 200 ",
		"watcher viewer ws.takeControl 403 forbidden",
		"watcher viewer ws.killSession 403 forbidden",
		"ops operator ws.takeControl 200 ",
		"ops operator ws.killSession 200 ",
	}
	// The map of refusals above is sent in any order: compare as sets
	// where the order is not the test's.
	if len(got) != len(want) || got[0] != want[0] || got[3] != want[3] || got[4] != want[4] ||
		!((got[1] == want[1] && got[2] == want[2]) || (got[1] == want[2] && got[2] == want[1])) {
		t.Fatalf("audit entries of %s:\n%s\nwant:\n%s", sid, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(body, "pwned") || strings.Contains(body, "observed") {
		t.Fatalf("the audit log holds input: %s", body)
	}
}
