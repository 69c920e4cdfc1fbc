package wsterm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/core/access"
	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/credential"
	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

type seqIDs struct{ n atomic.Int64 }

func (g *seqIDs) NewID() string { return fmt.Sprintf("id-%04d", g.n.Add(1)) }

// rig is a /ws server on the real session use case over a fake link, with
// a token store, three agents (two in environments labelled team=a and
// team=b, one on a host) and an audit log.
type rig struct {
	t        *testing.T
	url      string
	sessions *session.Service
	tokens   *portsfake.Tokens
	watch    *credential.Watchers
	audit    *portsfake.AuditLog
	signIns  *signin.Sessions
}

func newRig(t *testing.T) *rig {
	t.Helper()
	agents := portsfake.NewDirectory(
		ports.AgentInfo{ID: "env-a", Status: ports.AgentReady},
		ports.AgentInfo{ID: "env-b", Status: ports.AgentReady},
		// A host agent's own labels claim team=a: a scope does not trust them.
		ports.AgentInfo{ID: "host-1", Status: ports.AgentReady, Labels: map[string]string{"team": "a"}},
	)
	link := portsfake.NewLink(portsfake.WithDirectory(agents))
	log := portsfake.NewSessionLog(0)
	ids := &seqIDs{}
	svc := session.New(session.Config{Link: link, Agents: agents, Log: log, Clock: clock.Wall{}, IDs: ids})
	envs := map[string]map[string]string{"env-a": {"team": "a"}, "env-b": {"team": "b"}}
	r := &rig{t: t, sessions: svc, tokens: portsfake.NewTokens(), watch: credential.NewWatchers(), audit: portsfake.NewAuditLog()}
	r.signIns = signin.NewSessions(portsfake.NewSignInSessions(), "op-token").WithWatchers(r.watch).
		WithTokens(func(id string) ([32]byte, bool) {
			tk, err := r.tokens.Get(id)
			return tk.Hash, err == nil && !tk.Expired(time.Now())
		})
	srv := httptest.NewServer(New(Config{Sessions: svc, Agents: agents, Log: log, IDs: ids, Token: "op-token",
		Tokens: r.tokens, Watch: r.watch, Audit: r.audit, SignIns: r.signIns,
		EnvironmentLabels: func(name string) (map[string]string, bool) { l, ok := envs[name]; return l, ok },
	}).Handler())
	t.Cleanup(srv.Close)
	r.url = "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"
	return r
}

// token makes a named token; its secret is "ast_"+name.
func (r *rig) token(name, role string, labels map[string]string, expires time.Time) ports.Token {
	r.t.Helper()
	tk := ports.Token{ID: "tok_" + name, Name: name, Role: role, Labels: labels, CreatedAt: time.Now(), ExpiresAt: expires, Hash: ports.HashTokenSecret("ast_" + name)}
	if err := r.tokens.Create(tk); err != nil {
		r.t.Fatal(err)
	}
	return tk
}

// dial opens /ws with secret as a bearer token: the socket, or the refusal.
func (r *rig) dial(secret string) (*client, *http.Response) {
	r.t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(r.url, http.Header{"Authorization": {"Bearer " + secret}})
	if err != nil {
		if resp == nil {
			r.t.Fatalf("dial: %v", err)
		}
		return nil, resp
	}
	r.t.Cleanup(func() { _ = ws.Close() })
	return &client{t: r.t, ws: ws}, resp
}

type client struct {
	t  *testing.T
	ws *websocket.Conn
	n  int
	// last holds the frames skipped while waiting for an answer, by id.
	last map[string]map[string]any
}

// do sends a frame with a fresh id and returns the first answer with that
// id (frames of other ids, such as output, are skipped).
func (c *client) do(frame map[string]any) map[string]any {
	c.t.Helper()
	id := c.sendNew(frame)
	_ = c.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		var got map[string]any
		if err := c.ws.ReadJSON(&got); err != nil {
			c.t.Fatalf("reading the answer to %v: %v", frame, err)
		}
		if got["id"] == id {
			return got
		}
		if fid, _ := got["id"].(string); fid != "" {
			if c.last == nil {
				c.last = map[string]map[string]any{}
			}
			c.last[fid] = got
		}
	}
}

// sendNew sends frame with a fresh id, which it returns.
func (c *client) sendNew(frame map[string]any) string {
	c.t.Helper()
	c.n++
	id := fmt.Sprintf("f%d", c.n)
	frame["id"] = id
	if err := c.ws.WriteJSON(frame); err != nil {
		c.t.Fatal(err)
	}
	return id
}

// act sends a frame that answers only when it fails (input, resize,
// signal, kill), then a ping: the error frame answering it, or nil once the
// pong came first (frames are handled in order).
func (c *client) act(frame map[string]any) map[string]any {
	c.t.Helper()
	id := c.sendNew(frame)
	if got := c.do(map[string]any{"type": "ping"}); got["type"] != FramePong {
		c.t.Fatalf("ping: %v", got)
	}
	return c.last[id]
}

// refused checks the answer is an error frame of code.
func refused(t *testing.T, got map[string]any, code string, mention ...string) {
	t.Helper()
	if got["type"] != FrameError || got["code"] != code {
		t.Fatalf("want an error frame %s, got %v", code, got)
	}
	for _, m := range mention {
		if msg, _ := got["message"].(string); !strings.Contains(msg, m) {
			t.Fatalf("error frame %v does not say %q", got, m)
		}
	}
}

func (r *rig) entries() []ports.AuditEntry {
	r.t.Helper()
	es, _, err := r.audit.Query(ports.AuditQuery{Limit: ports.MaxAuditLimit})
	if err != nil {
		r.t.Fatal(err)
	}
	return es
}

// TestViewerOnlyObserves: a viewer token lists and joins a session as an
// observer and receives its output; asking for control, input, resize,
// signals, kills, new sessions and shells are refused with a forbidden
// error frame naming the role, and nothing happens to the session. Each
// refused control frame, and the operator's, is one audit entry.
func TestViewerOnlyObserves(t *testing.T) {
	r := newRig(t)
	r.token("alice", access.Operator, nil, time.Time{})
	r.token("val", access.Viewer, nil, time.Time{})
	op, _ := r.dial("ast_alice")
	opHello := op.do(map[string]any{"type": "hello"})
	if opHello["role"] != access.Operator {
		t.Fatalf("operator's hello: %v", opHello)
	}
	started := op.do(map[string]any{"type": "create_session", "agent_id": "env-a", "name": "dev", "session_type": "interactive", "command": "bash"})
	sid, _ := started["session_id"].(string)
	if started["type"] != FrameSessionStarted || sid == "" {
		t.Fatalf("operator's create_session: %v", started)
	}

	v, _ := r.dial("ast_val")
	vHello := v.do(map[string]any{"type": "hello"})
	if vHello["role"] != access.Viewer {
		t.Fatalf("viewer's hello: %v", vHello)
	}
	if got := v.do(map[string]any{"type": "list_sessions"}); !strings.Contains(fmt.Sprint(got["sessions"]), sid) {
		t.Fatalf("the viewer does not see the session: %v", got)
	}
	if got := v.do(map[string]any{"type": "join_session", "session_id": sid}); got["type"] != FrameRoleChanged || got["role"] != "observer" {
		t.Fatalf("the viewer's join as observer: %v", got)
	}
	for _, f := range []map[string]any{
		{"type": "join_session", "session_id": sid, "role": "controller", "take": true},
		{"type": "join_session", "session_id": sid, "role": "controller"},
		{"type": "input", "session_id": sid, "data": "rm -rf /\r"},
		{"type": "resize", "session_id": sid, "cols": 100, "rows": 30},
		{"type": "signal", "session_id": sid, "signal": "INT"},
		{"type": "kill_session", "session_id": sid},
		{"type": "create_session", "agent_id": "env-a", "session_type": "interactive", "command": "bash"},
		{"type": "start_shell", "agent_id": "env-a"},
	} {
		refused(t, v.act(f), "forbidden", `"val"`, `"viewer"`)
	}
	if s, ok := r.sessions.Get(sid); !ok || s.State.Ended() {
		t.Fatalf("the session after the viewer's refused frames: %+v %v", s, ok)
	}
	roles := map[string]session.Role{}
	for _, vw := range r.sessions.Viewers(sid) {
		roles[vw.ID] = vw.Role
	}
	if len(roles) != 2 || roles[opHello["viewer_id"].(string)] != session.Controller || roles[vHello["viewer_id"].(string)] != session.Observer {
		t.Fatalf("viewers after the viewer's refused frames: %+v", r.sessions.Viewers(sid))
	}
	// The operator, still the controller, is heard.
	if got := op.act(map[string]any{"type": "resize", "session_id": sid, "cols": 90, "rows": 20}); got != nil {
		t.Fatalf("the operator's resize: %v", got)
	}
	if got := op.act(map[string]any{"type": "kill_session", "session_id": sid}); got != nil {
		t.Fatalf("the operator's kill: %v", got)
	}

	var lines []string
	for _, e := range r.entries() {
		if e.RequestID == "" || e.Client == "" {
			t.Fatalf("entry without request id or client: %+v", e)
		}
		lines = append(lines, fmt.Sprintf("%s %s %s %s %d %s", e.Actor, e.Role, e.Operation, e.Target, e.Status, e.Code))
	}
	want := []string{
		"alice operator ws.createSession " + sid + " 200 ",
		"val viewer ws.takeControl " + sid + " 403 forbidden",
		"val viewer ws.takeControl " + sid + " 403 forbidden",
		"val viewer ws.signal " + sid + " 403 forbidden",
		"val viewer ws.killSession " + sid + " 403 forbidden",
		"val viewer ws.createSession env-a 403 forbidden",
		"val viewer ws.startShell env-a 403 forbidden",
		"alice operator ws.killSession " + sid + " 200 ",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit entries:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// TestWhoMayOpenTheSocket: an executor token is refused with 403 JSON
// forbidden naming its role; an unknown, revoked or expired token with 401;
// the operator token, an admin's, an operator's and a viewer's open it.
func TestWhoMayOpenTheSocket(t *testing.T) {
	r := newRig(t)
	r.token("orch", access.Executor, nil, time.Time{})
	r.token("adm", access.Admin, nil, time.Time{})
	r.token("gone", access.Operator, nil, time.Time{})
	r.token("v", access.Viewer, nil, time.Time{})
	if _, err := r.tokens.Delete("gone"); err != nil {
		t.Fatal(err)
	}
	late := r.token("late", access.Operator, nil, time.Now().Add(time.Hour))
	_ = late
	if err := r.tokens.Create(ports.Token{ID: "tok_past", Name: "past", Role: access.Admin, Hash: ports.HashTokenSecret("ast_past"), ExpiresAt: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	for secret, want := range map[string]int{
		"op-token": http.StatusSwitchingProtocols, "ast_adm": http.StatusSwitchingProtocols,
		"ast_late": http.StatusSwitchingProtocols, "ast_v": http.StatusSwitchingProtocols,
		"ast_orch": http.StatusForbidden, "ast_gone": http.StatusUnauthorized,
		"ast_past": http.StatusUnauthorized, "ast_nope": http.StatusUnauthorized,
	} {
		c, resp := r.dial(secret)
		if resp.StatusCode != want {
			t.Fatalf("%s: %d, want %d", secret, resp.StatusCode, want)
		}
		if c != nil {
			_ = c.ws.Close()
			continue
		}
		var body struct{ Error, Code string }
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: the refusal is not JSON: %v", secret, err)
		}
		wantCode := map[int]string{http.StatusForbidden: "forbidden", http.StatusUnauthorized: "unauthorized"}[want]
		if body.Code != wantCode || (want == http.StatusForbidden && !strings.Contains(body.Error, `role "executor"`)) {
			t.Fatalf("%s: %+v", secret, body)
		}
	}
	// ?token= works as a bearer header does (browsers cannot set headers).
	ws, resp, err := websocket.DefaultDialer.Dial(r.url+"?token=ast_orch", nil)
	if err == nil {
		_ = ws.Close()
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("executor with ?token=: %v %v", resp, err)
	}
}

// TestLabelScope: a token scoped to team=a sees only the agent of the
// environment labelled team=a and its sessions (not the host agent, whose
// labels are its own claim); the others' sessions and agents are answered
// as if they did not exist, and are left alone.
func TestLabelScope(t *testing.T) {
	r := newRig(t)
	r.token("root", access.Admin, nil, time.Time{})
	r.token("pay", access.Operator, map[string]string{"team": "a"}, time.Time{})
	r.token("payview", access.Viewer, map[string]string{"team": "a"}, time.Time{})
	admin, _ := r.dial("ast_root")
	ids := map[string]string{}
	for _, agent := range []string{"env-a", "env-b", "host-1"} {
		got := admin.do(map[string]any{"type": "create_session", "agent_id": agent, "session_type": "background", "command": "sleep"})
		if got["type"] != FrameSessionStarted {
			t.Fatalf("admin's session on %s: %v", agent, got)
		}
		ids[agent], _ = got["session_id"].(string)
	}
	if got := admin.do(map[string]any{"type": "list_agents"}); !strings.Contains(fmt.Sprint(got["agents"]), "env-b") || !strings.Contains(fmt.Sprint(got["agents"]), "host-1") {
		t.Fatalf("an unscoped token sees every agent: %v", got)
	}

	for _, secret := range []string{"ast_pay", "ast_payview"} {
		c, _ := r.dial(secret)
		agents := fmt.Sprint(c.do(map[string]any{"type": "list_agents"})["agents"])
		if !strings.Contains(agents, "env-a") || strings.Contains(agents, "env-b") || strings.Contains(agents, "host-1") {
			t.Fatalf("%s sees agents %s", secret, agents)
		}
		sessions := fmt.Sprint(c.do(map[string]any{"type": "list_sessions"})["sessions"])
		if !strings.Contains(sessions, ids["env-a"]) || strings.Contains(sessions, ids["env-b"]) || strings.Contains(sessions, ids["host-1"]) {
			t.Fatalf("%s sees sessions %s", secret, sessions)
		}
		if got := c.do(map[string]any{"type": "join_session", "session_id": ids["env-a"]}); got["type"] != FrameRoleChanged {
			t.Fatalf("%s joins its scope's session: %v", secret, got)
		}
		for _, other := range []string{ids["env-b"], ids["host-1"]} {
			refused(t, c.do(map[string]any{"type": "join_session", "session_id": other}), "session_not_found")
		}
	}
	pay, _ := r.dial("ast_pay")
	for _, other := range []string{ids["env-b"], ids["host-1"]} {
		refused(t, pay.act(map[string]any{"type": "kill_session", "session_id": other}), "session_not_found")
		refused(t, pay.act(map[string]any{"type": "signal", "session_id": other, "signal": "TERM"}), "session_not_found")
		refused(t, pay.act(map[string]any{"type": "input", "session_id": other, "data": "x"}), "session_not_found")
		refused(t, pay.do(map[string]any{"type": "join_session", "session_id": other, "role": "controller", "take": true}), "session_not_found")
		if s, _ := r.sessions.Get(other); s.State.Ended() {
			t.Fatalf("a session out of scope was ended: %+v", s)
		}
	}
	for _, agent := range []string{"env-b", "host-1"} {
		refused(t, pay.do(map[string]any{"type": "create_session", "agent_id": agent, "session_type": "background", "command": "sleep"}), "agent_not_found")
		refused(t, pay.do(map[string]any{"type": "start_shell", "agent_id": agent}), "agent_not_found")
	}
	if got := pay.do(map[string]any{"type": "create_session", "agent_id": "env-a", "session_type": "background", "command": "sleep"}); got["type"] != FrameSessionStarted {
		t.Fatalf("a scoped operator creates a session in its scope: %v", got)
	}
	if got := pay.act(map[string]any{"type": "kill_session", "session_id": ids["env-a"]}); got != nil {
		t.Fatalf("a scoped operator kills a session in its scope: %v", got)
	}
}

// readUntilClosed reads c until the server closes it and returns the error.
func readUntilClosed(ws *websocket.Conn) <-chan error {
	closed := make(chan error, 1)
	go func() {
		_ = ws.SetReadDeadline(time.Time{})
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				closed <- err
				return
			}
		}
	}()
	return closed
}

// TestRevocationAndExpiryCloseTheSocket: a named token's open socket is
// closed (1008) when it is revoked (the watchers told, as DELETE
// /api/v1/tokens does) and when its expires_at passes, as is a socket
// opened with a sign-in session of a revoked token; another token's socket
// stays open.
func TestRevocationAndExpiryCloseTheSocket(t *testing.T) {
	r := newRig(t)
	r.token("rev", access.Operator, nil, time.Time{})
	r.token("stay", access.Viewer, nil, time.Time{})
	r.token("brief", access.Viewer, nil, time.Now().Add(time.Second))
	rev, _ := r.dial("ast_rev")
	stay, _ := r.dial("ast_stay")
	brief, _ := r.dial("ast_brief")
	cookie, _, err := r.signIns.Mint("tok_rev", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	page, _, err := websocket.DefaultDialer.Dial(r.url, http.Header{"Cookie": {signin.CookieName + "=" + cookie}})
	if err != nil {
		t.Fatal(err)
	}
	defer page.Close()
	revClosed, pageClosed, briefClosed := readUntilClosed(rev.ws), readUntilClosed(page), readUntilClosed(brief.ws)

	if _, err := r.tokens.Delete("tok_rev"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r.watch.EndToken("tok_rev")
	for name, ch := range map[string]<-chan error{"bearer": revClosed, "sign-in session": pageClosed} {
		err := testkit.Receive(t, 30*time.Second, ch, "the revoked token's socket ("+name+") closed")
		if !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
			t.Fatalf("%s: closed with %v, want 1008", name, err)
		}
	}
	t.Logf("revoked token's sockets closed %v after the revocation", time.Since(start))
	err = testkit.Receive(t, 30*time.Second, briefClosed, "the expiring token's socket closed")
	if !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
		t.Fatalf("expiry: closed with %v, want 1008", err)
	}
	if got := stay.do(map[string]any{"type": "ping"}); got["type"] != FramePong {
		t.Fatalf("the other token's socket: %v", got)
	}
	if _, resp := r.dial("ast_rev"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the revoked token reopens /ws: %d", resp.StatusCode)
	}
	testkit.Eventually(t, 15*time.Second, "the closed sockets' watches released", func() bool { return r.watch.Watching() == 1 })
}
