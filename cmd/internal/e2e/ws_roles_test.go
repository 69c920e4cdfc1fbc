package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// roleSocket is a client of /ws that keeps every frame and, once the
// server closes it, the error that ended it and when.
type roleSocket struct {
	t  *testing.T
	ws *websocket.Conn

	mu       sync.Mutex
	frames   []map[string]any
	notify   chan struct{}
	closed   chan struct{}
	closeErr error
	closedAt time.Time
}

func wsURLOf(s *harness.Server) string {
	host, port, _ := strings.Cut(s.AgentAddr(), ":")
	p, _ := strconv.Atoi(port)
	return fmt.Sprintf("ws://%s:%d/ws", host, p+1)
}

// dialRole opens /ws with a bearer token: the socket, or nil and the
// refusal's status and body.
func dialRole(t *testing.T, s *harness.Server, token string) (*roleSocket, int, string) {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(wsURLOf(s), http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		if resp == nil {
			t.Fatalf("dial /ws: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		return nil, resp.StatusCode, string(b)
	}
	c := &roleSocket{t: t, ws: ws, notify: make(chan struct{}, 1), closed: make(chan struct{})}
	t.Cleanup(func() { _ = ws.Close() })
	go func() {
		for {
			var f map[string]any
			if err := ws.ReadJSON(&f); err != nil {
				c.mu.Lock()
				c.closeErr, c.closedAt = err, time.Now()
				c.mu.Unlock()
				close(c.closed)
				return
			}
			c.mu.Lock()
			c.frames = append(c.frames, f)
			c.mu.Unlock()
			select {
			case c.notify <- struct{}{}:
			default:
			}
		}
	}()
	return c, resp.StatusCode, ""
}

func (c *roleSocket) send(f map[string]any) {
	c.t.Helper()
	if err := c.ws.WriteJSON(f); err != nil {
		c.t.Fatal(err)
	}
}

// waitFor waits (patience) until a frame matches.
func (c *roleSocket) waitFor(what string, match func(map[string]any) bool) map[string]any {
	c.t.Helper()
	deadline := time.After(patience)
	for {
		c.mu.Lock()
		for _, f := range c.frames {
			if match(f) {
				c.mu.Unlock()
				return f
			}
		}
		c.mu.Unlock()
		select {
		case <-c.notify:
		case <-c.closed:
			c.t.Fatalf("the socket closed (%v) before %s", c.closeErr, what)
		case <-deadline:
			c.t.Fatalf("no %s; frames: %v", what, c.frames)
		}
	}
}

// answer waits for the frame answering the request id.
func (c *roleSocket) answer(id string) map[string]any {
	c.t.Helper()
	return c.waitFor("the answer to "+id, func(f map[string]any) bool { return f["id"] == id })
}

// output is the session's output seen so far.
func (c *roleSocket) output(sid string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, f := range c.frames {
		if f["type"] == "output" && f["session_id"] == sid {
			b.WriteString(fmt.Sprint(f["data"]))
		}
	}
	return b.String()
}

// waitOutput waits (patience) until the session's output holds want.
func (c *roleSocket) waitOutput(sid, want string) {
	c.t.Helper()
	deadline := time.After(patience)
	for !strings.Contains(c.output(sid), want) {
		select {
		case <-c.notify:
		case <-c.closed:
			c.t.Fatalf("the socket closed (%v) before %q was output", c.closeErr, want)
		case <-deadline:
			c.t.Fatalf("no %q in the output of %s: %q", want, sid, c.output(sid))
		}
	}
}

// waitClosed waits (patience) until the server closes the socket: when.
func (c *roleSocket) waitClosed(what string) time.Time {
	c.t.Helper()
	select {
	case <-c.closed:
	case <-time.After(patience):
		c.t.Fatalf("%s: the socket is still open", what)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !websocket.IsCloseError(c.closeErr, websocket.ClosePolicyViolation) {
		c.t.Fatalf("%s: the socket ended with %v, want a close 1008", what, c.closeErr)
	}
	return c.closedAt
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

// restCall sends a request with a bearer token: status and body.
func restCall(t *testing.T, s *harness.Server, token, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.RESTURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
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
	op, _, _ := dialRole(t, s, opTok)
	op.send(map[string]any{"type": "create_session", "id": "c1", "agent_id": "host-01", "session_type": "interactive", "command": "sh"})
	started := op.answer("c1")
	sid, _ := started["session_id"].(string)
	if started["type"] != "session_started" || sid == "" {
		t.Fatalf("the operator's create_session: %v", started)
	}
	op.waitFor("the operator's control", func(f map[string]any) bool {
		return f["type"] == "role_changed" && f["session_id"] == sid && f["role"] == "controller"
	})

	// The viewer observes it: it sees what the operator types run.
	v, st, _ := dialRole(t, s, viewTok)
	if v == nil {
		t.Fatalf("the viewer's /ws: %d", st)
	}
	v.send(map[string]any{"type": "hello", "id": "h"})
	if got := v.answer("h"); got["role"] != "viewer" {
		t.Fatalf("the viewer's hello: %v", got)
	}
	v.send(map[string]any{"type": "join_session", "id": "j", "session_id": sid, "replay_from": 0})
	if got := v.answer("j"); got["type"] != "role_changed" || got["role"] != "observer" {
		t.Fatalf("the viewer's join: %v", got)
	}
	op.send(map[string]any{"type": "input", "session_id": sid, "data": "echo observed-$((6*7))\r"})
	v.waitOutput(sid, "observed-42")

	// Take control, input and kill are refused to the viewer.
	for id, f := range map[string]map[string]any{
		"take":  {"type": "join_session", "session_id": sid, "role": "controller", "take": true},
		"input": {"type": "input", "session_id": sid, "data": "echo pwned-$((6*7))\r"},
		"kill":  {"type": "kill_session", "session_id": sid},
		"shell": {"type": "start_shell", "agent_id": "host-01"},
	} {
		f["id"] = id
		v.send(f)
		got := v.answer(id)
		if got["type"] != "error" || got["code"] != "forbidden" || !strings.Contains(fmt.Sprint(got["message"]), `"viewer"`) {
			t.Fatalf("the viewer's %s: %v", id, got)
		}
	}
	// Nothing happened: the operator still controls a running shell, which
	// never ran the viewer's input.
	op.send(map[string]any{"type": "input", "session_id": sid, "data": "echo still-$((40+2))\r"})
	op.waitOutput(sid, "still-42")
	if strings.Contains(op.output(sid), "pwned-42") {
		t.Fatal("the viewer's input ran")
	}
	if st, body := restCall(t, s, s.Token, "GET", "/api/v1/sessions/"+sid, ""); st != 200 || !strings.Contains(body, `"state":"running"`) {
		t.Fatalf("the session after the viewer's refusals: %d %s", st, body)
	}

	// An executor may not open /ws at all.
	c, st, body := dialRole(t, s, execTok)
	var refusal struct{ Error, Code string }
	if c != nil || st != http.StatusForbidden || json.Unmarshal([]byte(body), &refusal) != nil || refusal.Code != "forbidden" || !strings.Contains(refusal.Error, `role "executor"`) {
		t.Fatalf("the executor's /ws: %d %s", st, body)
	}

	// Revocation closes the token's open socket and change stream.
	revTok := newToken("revoked", "viewer", "")
	revWS, _, _ := dialRole(t, s, revTok)
	revStream := openChangeStream(t, s, revTok)
	sent := time.Now()
	if st, body := restCall(t, s, s.Token, "DELETE", "/api/v1/tokens/revoked", ""); st != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", st, body)
	}
	wsAt := revWS.waitClosed("the revoked token's socket")
	streamAt := waitStreamEnd(t, revStream, "the revoked token's stream")
	t.Logf("revocation: the socket closed %v and the change stream ended %v after DELETE /api/v1/tokens was sent", wsAt.Sub(sent), streamAt.Sub(sent))
	if _, st, _ := dialRole(t, s, revTok); st != http.StatusUnauthorized {
		t.Fatalf("the revoked token's /ws: %d", st)
	}

	// Expiry likewise, once expires_at passes.
	expires := time.Now().Add(3 * time.Second).UTC()
	expTok := newToken("brief", "viewer", fmt.Sprintf(`,"expires_at":%q`, expires.Format(time.RFC3339Nano)))
	expWS, st, _ := dialRole(t, s, expTok)
	if expWS == nil {
		t.Fatalf("the expiring token's /ws: %d (the machine took over 3 s to get here?)", st)
	}
	expStream := openChangeStream(t, s, expTok)
	wsAt = expWS.waitClosed("the expired token's socket")
	streamAt = waitStreamEnd(t, expStream, "the expired token's stream")
	if wsAt.Before(expires) || streamAt.Before(expires) {
		t.Fatalf("closed before expires_at %v: socket %v, stream %v", expires, wsAt, streamAt)
	}
	t.Logf("expiry: the socket closed %v and the change stream ended %v after expires_at", wsAt.Sub(expires), streamAt.Sub(expires))

	// The operator takes control from a second socket, and kills the shell.
	op2, _, _ := dialRole(t, s, opTok)
	op2.send(map[string]any{"type": "join_session", "id": "t", "session_id": sid, "role": "controller", "take": true})
	if got := op2.answer("t"); got["role"] != "controller" {
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
