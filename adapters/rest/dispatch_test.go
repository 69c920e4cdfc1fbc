package rest

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

const execAuth = "Bearer " + testExecToken

// dispatch posts a dispatch body for aiwg session sid with the given
// Authorization header.
func (e *env) dispatch(sid, body, auth string) response {
	e.t.Helper()
	return e.callAuth("POST", "/api/v1/sessions/"+sid+"/dispatch", body, auth)
}

const okBody = `{"mission_id":"m-1","objective":"echo hi"}`

var tsFormat = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// TestDispatchStatuses walks the contract's table, including the order of
// the checks: 503 (configuration) before 401 before 413/400 before the use case.
func TestDispatchStatuses(t *testing.T) {
	big := `{"mission_id":"m-1","objective":"echo","metadata":{"pad":"` + strings.Repeat("x", MaxBodyBytes) + `"}}`
	for _, tc := range []struct {
		name      string
		setup     func(*env)
		deps      func(*Deps)
		sid, body string
		auth      string
		status    int
		code      string
		// reached says whether the use case may see the request.
		reached bool
	}{
		{name: "integration off", deps: func(d *Deps) { d.Executor = nil }, body: okBody, auth: execAuth, status: 503, code: "integration_disabled"},
		{name: "integration off, bad token, bad body", deps: func(d *Deps) { d.Executor = nil }, body: `{`, auth: "Bearer nope", status: 503, code: "integration_disabled"},
		{name: "link not configured", setup: func(e *env) { e.exec.SetConfigured(false) }, body: okBody, auth: execAuth, status: 503, code: "integration_disabled"},
		{name: "no mission service", deps: func(d *Deps) { d.Missions = nil }, body: okBody, auth: execAuth, status: 503, code: "integration_disabled"},
		{name: "not registered", setup: func(e *env) { e.exec.SetRegistered(false) }, body: okBody, auth: execAuth, status: 503, code: "executor_not_registered"},
		{name: "not registered, bad token", setup: func(e *env) { e.exec.SetRegistered(false) }, body: okBody, auth: "Bearer nope", status: 503, code: "executor_not_registered"},
		{name: "not registered, no token, too large", setup: func(e *env) { e.exec.SetRegistered(false) }, body: big, status: 503, code: "executor_not_registered"},
		{name: "no bearer", body: okBody, status: 401, code: "unauthorized"},
		{name: "wrong bearer", body: okBody, auth: "Bearer nope", status: 401, code: "unauthorized"},
		{name: "token prefix", body: okBody, auth: "Bearer " + testExecToken[:6], status: 401, code: "unauthorized"},
		{name: "token plus more", body: okBody, auth: execAuth + "x", status: 401, code: "unauthorized"},
		{name: "basic scheme", body: okBody, auth: "Basic " + testExecToken, status: 401, code: "unauthorized"},
		{name: "operator token", body: okBody, auth: "Bearer " + testToken, status: 401, code: "unauthorized"},
		{name: "bad token and bad body", body: `{"mission_id":`, auth: "Bearer nope", status: 401, code: "unauthorized"},
		{name: "bad token and too large", body: big, auth: "Bearer nope", status: 401, code: "unauthorized"},
		{name: "scheme case-insensitive", body: okBody, auth: "bearer " + testExecToken, status: 202, reached: true},
		{name: "too large", body: big, auth: execAuth, status: 413, code: "body_too_large"},
		{name: "empty", body: "", auth: execAuth, status: 400, code: "invalid_json"},
		{name: "malformed", body: `{"mission_id":"m-1",`, auth: execAuth, status: 400, code: "invalid_json"},
		{name: "syntax", body: `{"mission_id" "m-1"}`, auth: execAuth, status: 400, code: "invalid_json"},
		{name: "array", body: `[]`, auth: execAuth, status: 400, code: "invalid_json"},
		{name: "null", body: `null`, auth: execAuth, status: 400, code: "invalid_json"},
		{name: "trailing data", body: okBody + `{}`, auth: execAuth, status: 400, code: "invalid_json"},
		{name: "missing mission_id", body: `{"objective":"x"}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "null mission_id", body: `{"mission_id":null,"objective":"x"}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "empty mission_id", body: `{"mission_id":"","objective":"x"}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "numeric mission_id", body: `{"mission_id":7,"objective":"x"}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "mission_id of 257 chars", body: `{"mission_id":"` + strings.Repeat("é", 257) + `","objective":"x"}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "mission_id of 256 chars", body: `{"mission_id":"` + strings.Repeat("é", 256) + `","objective":"x"}`, auth: execAuth, status: 202, reached: true},
		{name: "missing objective", body: `{"mission_id":"m-1"}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "empty objective", body: `{"mission_id":"m-1","objective":""}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "objective array", body: `{"mission_id":"m-1","objective":["echo"]}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "NUL in objective", body: `{"mission_id":"m-1","objective":"ec\u0000ho"}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "completion number", body: `{"mission_id":"m-1","objective":"x","completion":1}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "long_running string", body: `{"mission_id":"m-1","objective":"x","long_running":"yes"}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "executor_filter array", body: `{"mission_id":"m-1","objective":"x","executor_filter":[]}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "capabilities string", body: `{"mission_id":"m-1","objective":"x","executor_filter":{"capabilities":"hitl"}}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "capability number", body: `{"mission_id":"m-1","objective":"x","executor_filter":{"capabilities":["hitl",1]}}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "capability null", body: `{"mission_id":"m-1","objective":"x","executor_filter":{"capabilities":[null]}}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "agent_id number", body: `{"mission_id":"m-1","objective":"x","executor_filter":{"agent_id":5}}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "executor_id bool", body: `{"mission_id":"m-1","objective":"x","executor_filter":{"executor_id":true}}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "metadata array", body: `{"mission_id":"m-1","objective":"x","metadata":[1]}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "metadata string", body: `{"mission_id":"m-1","objective":"x","metadata":"{}"}`, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "session id of 257 chars", sid: strings.Repeat("s", 257), body: okBody, auth: execAuth, status: 400, code: "invalid_request"},
		{name: "agent not connected", body: `{"mission_id":"m-1","objective":"x","executor_filter":{"agent_id":"off"}}`, auth: execAuth, status: 404, code: "agent_not_connected", reached: true},
		{name: "agent unknown", body: `{"mission_id":"m-1","objective":"x","executor_filter":{"agent_id":"ghost"}}`, auth: execAuth, status: 404, code: "agent_not_connected", reached: true},
		{name: "no agent", body: `{"mission_id":"m-1","objective":"x","executor_filter":{"capabilities":["isolation:vm"]}}`, auth: execAuth, status: 503, code: "no_agent", reached: true},
		{name: "store unavailable", setup: func(e *env) {
			e.missions.SetDispatchError(fmt.Errorf("writing missions.json: %w", ports.ErrStoreUnavailable))
		}, body: okBody, auth: execAuth, status: 503, code: "store_unavailable", reached: true},
		{name: "use case says not registered", setup: func(e *env) { e.missions.SetDispatchError(ports.ErrExecutorUnregistered) },
			body: okBody, auth: execAuth, status: 503, code: "executor_not_registered", reached: true},
		{name: "unexpected use case error", setup: func(e *env) { e.missions.SetDispatchError(errors.New("boom")) },
			body: okBody, auth: execAuth, status: 503, code: "internal_error", reached: true},
		{name: "conflict", setup: func(e *env) {
			if r := e.dispatch("s-1", `{"mission_id":"m-1","objective":"other"}`, execAuth); r.status != 202 {
				e.t.Fatalf("first dispatch: %d %s", r.status, r.body)
			}
		}, body: okBody, auth: execAuth, status: 409, code: "mission_conflict", reached: true},
		{name: "accepted", body: okBody, auth: execAuth, status: 202, reached: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.deps)
			if tc.setup != nil {
				tc.setup(e)
			}
			before := len(e.missions.Dispatches())
			sid := tc.sid
			if sid == "" {
				sid = "s-1"
			}
			r := e.dispatch(sid, tc.body, tc.auth)
			expect(t, r, tc.status, tc.code)
			if tc.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if got := len(e.missions.Dispatches()) - before; (got > 0) != tc.reached {
				t.Errorf("use case reached %d times, want reached=%v", got, tc.reached)
			}
		})
	}
}

func TestDispatchAccepted(t *testing.T) {
	e := newEnv(t)
	e.link.AddAgent(ports.AgentInfo{ID: "c1", Status: "ready", Runtime: "container", Capabilities: []string{"isolation:container", "hitl"}})
	body := `{
		"mission_id": "m-42",
		"objective": "make test",
		"completion": "tests pass",
		"long_running": true,
		"executor_filter": {"executor_id": "exec-1", "capabilities": ["hitl"], "agent_id": "c1"},
		"metadata": { "z": 1.50, "a": [1, 2], "big": 12345678901234567890, "s": "\u00e9<" }
	}`
	r := e.dispatch("aiwg-sess-7", body, execAuth)
	expect(t, r, 202, "")
	var got map[string]any
	r.decode(t, &got)
	want := map[string]any{"mission_id": "m-42", "executor_id": "exec-1", "status": "assigned", "estimated_start": "2026-05-09T07:13:22.123Z"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("202 body %v, want %v", got, want)
	}
	if s, _ := got["estimated_start"].(string); !tsFormat.MatchString(s) {
		t.Fatalf("estimated_start %q is not RFC 3339 UTC with milliseconds", s)
	}
	ds := e.missions.Dispatches()
	if len(ds) != 1 {
		t.Fatalf("%d dispatches", len(ds))
	}
	d := ds[0]
	if d.AIWGSessionID != "aiwg-sess-7" || d.MissionID != "m-42" || d.Objective != "make test" || d.Completion != "tests pass" ||
		!d.LongRunning || d.Filter.ExecutorID != "exec-1" || d.Filter.AgentID != "c1" || fmt.Sprint(d.Filter.Capabilities) != "[hitl]" {
		t.Fatalf("dispatch request %+v", d)
	}
	if m := string(d.Metadata); m != `{"z":1.50,"a":[1,2],"big":12345678901234567890,"s":"\u00e9<"}` {
		t.Fatalf("metadata %s, want the body's, compacted and otherwise verbatim", m)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(d.RequestHash) {
		t.Fatalf("request hash %q", d.RequestHash)
	}

	// Every optional field may be null; absent metadata stays nil.
	r = e.dispatch("s", `{"mission_id":"m-43","objective":"x","completion":null,"long_running":null,"executor_filter":null,"metadata":null}`, execAuth)
	expect(t, r, 202, "")
	r = e.dispatch("s", `{"mission_id":"m-44","objective":"x","executor_filter":{"executor_id":null,"capabilities":null,"agent_id":null}}`, execAuth)
	expect(t, r, 202, "")
	for _, d := range e.missions.Dispatches()[1:] {
		if d.Metadata != nil || d.Completion != "" || d.LongRunning || d.Filter.AgentID != "" || d.Filter.Capabilities != nil {
			t.Errorf("nulls gave %+v", d)
		}
	}
}

func TestDispatchAcceptsUnknownFields(t *testing.T) {
	e := newEnv(t)
	for i, body := range []string{
		`{"mission_id":"m-%d","objective":"x","priority":5,"trace":{"id":"t"}}`,
		// Unknown members never shadow known ones, in any case or type.
		`{"mission_id":"m-%d","objective":"x","Mission_ID":7,"OBJECTIVE":[1],"Metadata":"x"}`,
		`{"mission_id":"m-%d","objective":"x","executor_filter":{"region":"eu","agent_id":"a1"}}`,
		`{"mission_id":"m-%d","objective":"x","metadata":{"n":1e400}}`,
	} {
		expect(t, e.dispatch("s", fmt.Sprintf(body, i), execAuth), 202, "")
	}
	ds := e.missions.Dispatches()
	if ds[1].MissionID != "m-1" || ds[1].Objective != "x" || ds[1].Metadata != nil {
		t.Fatalf("unknown members leaked into the request: %+v", ds[1])
	}
	if ds[2].Filter.AgentID != "a1" {
		t.Fatalf("filter %+v", ds[2].Filter)
	}
	if string(ds[3].Metadata) != `{"n":1e400}` {
		t.Fatalf("metadata %s", ds[3].Metadata)
	}
}

func TestDispatchSizeLimit(t *testing.T) {
	e := newEnv(t)
	prefix, suffix := `{"mission_id":"m-1","objective":"x","metadata":{"pad":"`, `"}}`
	exact := prefix + strings.Repeat("y", MaxBodyBytes-len(prefix)-len(suffix)) + suffix
	expect(t, e.dispatch("s", exact+" ", execAuth), 413, "body_too_large")
	expect(t, e.dispatch("s", exact, execAuth), 202, "")
}

func TestDispatchIdempotent(t *testing.T) {
	e := newEnv(t)
	body := `{"mission_id":"m-1","objective":"echo hi","metadata":{"a":1,"b":[true,null]}}`
	first := e.dispatch("s-1", body, execAuth)
	expect(t, first, 202, "")
	// Another clock reading must not change the answer.
	e.missions.SetNow(func() time.Time { return missionEpoch.Add(time.Hour) })
	for _, variant := range []string{
		body,
		// The same logical body: other spacing and member order.
		"{ \"metadata\" : {\"b\": [ true , null ], \"a\": 1},\n\t\"objective\":\"echo hi\", \"mission_id\" : \"m-1\" }\n",
	} {
		r := e.dispatch("s-1", variant, execAuth)
		expect(t, r, 202, "")
		if string(r.body) != string(first.body) {
			t.Fatalf("repeat answered %s, first answer was %s", r.body, first.body)
		}
	}
	// The mission has moved on; the answer is still the one of acceptance.
	e.missions.SetState("m-1", ports.MissionRunning)
	r := e.dispatch("s-1", body, execAuth)
	expect(t, r, 202, "")
	if string(r.body) != string(first.body) {
		t.Fatalf("repeat of a running mission answered %s, first answer was %s", r.body, first.body)
	}
	if n := len(e.missions.Missions("")); n != 1 {
		t.Fatalf("%d missions, want 1", n)
	}
	// Anything else with the same mission_id is a conflict.
	for _, other := range []struct{ sid, body string }{
		{"s-1", `{"mission_id":"m-1","objective":"echo bye","metadata":{"a":1,"b":[true,null]}}`},
		{"s-1", `{"mission_id":"m-1","objective":"echo hi","metadata":{"a":1.0,"b":[true,null]}}`},
		{"s-1", `{"mission_id":"m-1","objective":"echo hi"}`},
		{"s-2", body},
	} {
		expect(t, e.dispatch(other.sid, other.body, execAuth), 409, "mission_conflict")
	}
}

func TestRequestHash(t *testing.T) {
	hash := func(body, sid string) string {
		t.Helper()
		req, _, apiErr := parseDispatch([]byte(body), sid)
		if apiErr != nil {
			t.Fatalf("%s: %v", body, apiErr)
		}
		return req.RequestHash
	}
	base := hash(`{"mission_id":"m","objective":"o","executor_filter":{"capabilities":["a","b"],"agent_id":"x"},"metadata":{"k":{"y":2,"x":1}},"extra":"e"}`, "s")
	for _, same := range []string{
		`{"extra":"e","metadata":{"k":{"x":1,"y":2}},"executor_filter":{"agent_id":"x","capabilities":["a","b"]},"objective":"o","mission_id":"m"}`,
		"\n{ \"mission_id\" : \"m\" ,\"objective\":\"o\",\r\n\"executor_filter\":{ \"capabilities\":[ \"a\" , \"b\" ],\"agent_id\":\"x\"},\"metadata\":{\"k\":{\"y\":2,\"x\":1}},\"extra\":\"e\"}\t",
		// Escapes are decoded before hashing.
		`{"mission_id":"\u006d","objective":"o","executor_filter":{"capabilities":["a","b"],"agent_id":"x"},"metadata":{"k":{"y":2,"x":1}},"extra":"e"}`,
	} {
		if h := hash(same, "s"); h != base {
			t.Errorf("same logical body, other hash: %s", same)
		}
	}
	for _, other := range []struct{ body, sid string }{
		{`{"mission_id":"m","objective":"o","executor_filter":{"capabilities":["b","a"],"agent_id":"x"},"metadata":{"k":{"y":2,"x":1}},"extra":"e"}`, "s"},
		{`{"mission_id":"m","objective":"o","executor_filter":{"capabilities":["a","b"],"agent_id":"x"},"metadata":{"k":{"y":2.0,"x":1}},"extra":"e"}`, "s"},
		{`{"mission_id":"m","objective":"o","executor_filter":{"capabilities":["a","b"],"agent_id":"x"},"metadata":{"k":{"y":2,"x":1}}}`, "s"},
		{`{"mission_id":"m","objective":"o","executor_filter":{"capabilities":["a","b"],"agent_id":"x"},"metadata":{"k":{"y":2,"x":1}},"extra":"e"}`, "s2"},
	} {
		if h := hash(other.body, other.sid); h == base {
			t.Errorf("another body hashes the same: %s (session %s)", other.body, other.sid)
		}
	}
}

func TestDispatchNeedsNoOperatorToken(t *testing.T) {
	e := newEnv(t, func(d *Deps) { d.Token = "" })
	expect(t, e.dispatch("s", okBody, execAuth), 202, "")
	// And the executor token opens nothing else.
	expect(t, e.callAuth("GET", "/api/v1/missions", "", execAuth), 401, "unauthorized")
}
