package rest

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// A scripted sequence of calls yields exactly the expected audit entries:
// every state-changing call (answered, refused, failed), the sign-ins,
// none of the reads; each with the request id the answer carried; and no
// entry holds a token or a body sent.
func TestAuditRecordsEveryStateChangingCall(t *testing.T) {
	audit := portsfake.NewAuditLog()
	e := newEnv(t, func(d *Deps) { d.Audit = audit })
	const secretBody = "s3cret-in-a-body"

	type want struct {
		actor, role, op, target, code string
		status                        int
	}
	var wants []want
	var ids []string
	step := func(r response, w want) {
		t.Helper()
		id := r.header.Get("X-Request-Id")
		if len(id) < 16 {
			t.Fatalf("%s: X-Request-Id %q", w.op, id)
		}
		if w.op != "" {
			wants = append(wants, w)
			ids = append(ids, id)
		}
	}

	r := e.call("POST", "/api/v1/agents/a1/commands", `{"command":"echo `+secretBody+`"}`)
	expect(t, r, 202, "")
	step(r, want{"operator", "admin", "startCommand", "a1", "", 202})
	e.nextCommand()
	step(e.call("GET", "/api/v1/agents", ""), want{}) // a read: not recorded
	r = e.call("POST", "/api/v1/agents/nope/commands", `{"command":"true"}`)
	expect(t, r, 404, "agent_not_found")
	step(r, want{"operator", "admin", "startCommand", "nope", "agent_not_found", 404})
	r = e.call("DELETE", "/api/v1/commands/c-none", "")
	step(r, want{"operator", "admin", "killCommand", "c-none", r.code(t), r.status})
	r = e.callAuth("POST", "/api/v1/agents/a1/commands", `{"command":"true"}`, "Bearer wrong-"+secretBody)
	expect(t, r, 401, "unauthorized")
	step(r, want{"anonymous", "", "startCommand", "a1", "unauthorized", 401})
	r = e.callAuth("POST", "/api/v1/signin", `{"token":"wrong-`+secretBody+`"}`, "")
	expect(t, r, 401, "unauthorized")
	step(r, want{"anonymous", "", "signIn", "", "unauthorized", 401})
	r = e.callAuth("POST", "/api/v1/signin", `{"token":"`+testToken+`"}`, "")
	expect(t, r, 204, "")
	step(r, want{"dashboard", "admin", "signIn", "", "", 204})
	r = e.callAuth("POST", "/api/v1/no-such-route", `{}`, "Bearer "+testToken)
	step(r, want{}) // no route: nothing it could change

	got := audit.Entries()
	if len(got) != len(wants) {
		t.Fatalf("%d entries; want %d:\n%+v", len(got), len(wants), got)
	}
	for i, g := range got {
		w := wants[i]
		if g.Actor != w.actor || g.Role != w.role || g.Operation != w.op || g.Target != w.target || g.Status != w.status || g.Code != w.code {
			t.Errorf("entry %d = %+v; want %+v", i, g, w)
		}
		if g.RequestID != ids[i] {
			t.Errorf("entry %d: request id %q; the answer's X-Request-Id was %q", i, g.RequestID, ids[i])
		}
		if g.Client != "127.0.0.1" {
			t.Errorf("entry %d: client %q; want 127.0.0.1", i, g.Client)
		}
		if !g.At.Equal(e.clock.Now()) {
			t.Errorf("entry %d at %v; want the clock's %v", i, g.At, e.clock.Now())
		}
		// The server's log line of the request names it too.
		if !strings.Contains(e.logs.String(), "request_id="+ids[i]) {
			t.Errorf("entry %d: request id %s is in no log line", i, ids[i])
		}
	}
	raw, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{testToken, testExecToken, secretBody} {
		if strings.Contains(string(raw), s) {
			t.Errorf("an audit entry holds %q:\n%s", s, raw)
		}
	}
}

// GET /api/v1/audit filters by since, actor and target and pages with
// next_cursor; a foreign cursor is 400; without an audit log, 503.
func TestAuditListFiltersAndPages(t *testing.T) {
	audit := portsfake.NewAuditLog()
	e := newEnv(t, func(d *Deps) { d.Audit = audit })
	base := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	for i := range 7 {
		actor := []string{"alice", "bob"}[i%2]
		if err := audit.Append(ports.AuditEntry{At: base.Add(time.Duration(i) * time.Minute), Actor: actor, Role: "operator",
			Operation: "createEnvironment", Target: fmt.Sprintf("env-%d", i%3), Status: 201, RequestID: fmt.Sprintf("r%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(query string) restapi.AuditList {
		t.Helper()
		r := e.call("GET", "/api/v1/audit"+query, "")
		expect(t, r, 200, "")
		var l restapi.AuditList
		r.decode(t, &l)
		return l
	}
	ids := func(l restapi.AuditList) string {
		var s []string
		for _, en := range l.Entries {
			s = append(s, en.RequestId)
		}
		return strings.Join(s, ",")
	}
	if got := ids(list("")); got != "r0,r1,r2,r3,r4,r5,r6" {
		t.Errorf("all: %s", got)
	}
	if got := ids(list("?actor=bob")); got != "r1,r3,r5" {
		t.Errorf("actor=bob: %s", got)
	}
	if got := ids(list("?target=env-1")); got != "r1,r4" {
		t.Errorf("target=env-1: %s", got)
	}
	if got := ids(list("?since=" + url.QueryEscape(base.Add(5*time.Minute).Format(time.RFC3339)))); got != "r5,r6" {
		t.Errorf("since: %s", got)
	}
	var pages []string
	q := "?actor=alice&limit=2"
	for range 10 {
		l := list(q)
		pages = append(pages, ids(l))
		if l.NextCursor == nil {
			break
		}
		q = "?actor=alice&limit=2&cursor=" + url.QueryEscape(*l.NextCursor)
	}
	if got := strings.Join(pages, "|"); got != "r0,r2|r4,r6" {
		t.Errorf("pages of 2 of alice's: %s", got)
	}
	expect(t, e.call("GET", "/api/v1/audit?cursor=not-a-number", ""), 400, "invalid_cursor")
	expect(t, e.call("GET", "/api/v1/audit?limit=1001", ""), 400, "")
	expect(t, e.callAuth("GET", "/api/v1/audit", "", ""), 401, "unauthorized")

	none := newEnv(t)
	expect(t, none.call("GET", "/api/v1/audit", ""), 503, "store_unavailable")
}
