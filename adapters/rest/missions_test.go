package rest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// dispatchOK dispatches a mission and returns its record.
func (e *env) dispatchOK(id, body string) ports.Mission {
	e.t.Helper()
	if body == "" {
		body = fmt.Sprintf(`{"mission_id":%q,"objective":"echo %s"}`, id, id)
	}
	expect(e.t, e.dispatch("s-1", body, execAuth), 202, "")
	m, err := e.missions.Mission(id)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func listMissions(t *testing.T, e *env, query string) []restapi.Mission {
	t.Helper()
	r := e.call("GET", "/api/v1/missions"+query, "")
	expect(t, r, 200, "")
	var l restapi.MissionList
	r.decode(t, &l)
	return l.Missions
}

func missionIDs(ms []restapi.Mission) string {
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.MissionId)
	}
	return strings.Join(ids, ",")
}

func TestMissionsListAndFilter(t *testing.T) {
	e := newEnv(t)
	r := e.call("GET", "/api/v1/missions", "")
	expect(t, r, 200, "")
	if strings.TrimSpace(string(r.body)) != `{"missions":[]}` {
		t.Fatalf("empty list %s", r.body)
	}
	for i, id := range []string{"m-b", "m-a", "m-c"} {
		e.missions.SetNow(func() time.Time { return missionEpoch.Add(time.Duration(i) * time.Second) })
		e.dispatchOK(id, "")
	}
	e.missions.SetState("m-a", ports.MissionRunning)
	e.missions.SetState("m-c", ports.MissionRunning)
	if got := missionIDs(listMissions(t, e, "")); got != "m-b,m-a,m-c" {
		t.Fatalf("missions %s, want oldest first", got)
	}
	if got := missionIDs(listMissions(t, e, "?state=running")); got != "m-a,m-c" {
		t.Fatalf("running %s", got)
	}
	if got := missionIDs(listMissions(t, e, "?state=assigned")); got != "m-b" {
		t.Fatalf("assigned %s", got)
	}
	if got := missionIDs(listMissions(t, e, "?state=completed")); got != "" {
		t.Fatalf("completed %s", got)
	}
	for _, q := range []string{"?state=bogus", "?state=", "?state=RUNNING"} {
		expect(t, e.call("GET", "/api/v1/missions"+q, ""), 400, "invalid_request")
	}
	expect(t, e.callAuth("GET", "/api/v1/missions", "", ""), 401, "unauthorized")
}

func TestGetMission(t *testing.T) {
	e := newEnv(t)
	exit := 3
	e.missions.Put(ports.Mission{
		ID: "full", Objective: "make", Completion: "done", LongRunning: true, AIWGSessionID: "as-1",
		Metadata: []byte(`{"n":12345678901234567890,"f":1.50,"o":{"k":[1,"x"]}}`),
		State:    ports.MissionFailed, AgentID: "a1", SessionID: "sess-9", AgentRuntime: "host", CheckpointID: "ck-1",
		HITL:     &ports.HITLRequest{ID: "h-1", Prompt: "Proceed? [y/N]", Context: "ctx", CreatedAt: missionEpoch},
		ExitCode: &exit, Summary: "tail", Reason: "non_zero_exit", Error: "exit status 3", Iteration: 4,
		EstimatedStart: missionEpoch, CreatedAt: missionEpoch, UpdatedAt: missionEpoch.Add(time.Minute),
		StartedAt: missionEpoch.Add(time.Second), EndedAt: missionEpoch.Add(2 * time.Second), LastEvent: "mission.failed",
	})
	r := e.call("GET", "/api/v1/missions/full", "")
	expect(t, r, 200, "")
	var m restapi.Mission
	r.decode(t, &m)
	if m.MissionId != "full" || m.State != restapi.MissionStateFailed || *m.PtySessionId != "sess-9" || *m.AgentId != "a1" ||
		*m.AiwgSessionId != "as-1" || *m.ExitCode != 3 || *m.CheckpointId != "ck-1" || !*m.LongRunning ||
		m.Hitl == nil || m.Hitl.HitlId != "h-1" || deref(m.Hitl.MissionId) != "full" || *m.Hitl.SessionId != "sess-9" ||
		!m.EndedAt.Equal(missionEpoch.Add(2*time.Second)) || *m.LastEvent != "mission.failed" || *m.Iteration != 4 {
		t.Fatalf("mission %+v", m)
	}
	// Metadata comes back as it was stored: big and written-out numbers unchanged.
	if !strings.Contains(string(r.body), `"metadata":{"f":1.50,"n":12345678901234567890,"o":{"k":[1,"x"]}}`) {
		t.Fatalf("metadata not verbatim: %s", r.body)
	}

	e.missions.Put(ports.Mission{ID: "min", Objective: "true", State: ports.MissionAssigned, CreatedAt: missionEpoch, UpdatedAt: missionEpoch})
	r = e.call("GET", "/api/v1/missions/min", "")
	expect(t, r, 200, "")
	for _, field := range []string{"started_at", "ended_at", "estimated_start", "metadata", "hitl", "exit_code", "pty_session_id", "agent_id"} {
		if strings.Contains(string(r.body), `"`+field+`"`) {
			t.Errorf("empty %s must be omitted: %s", field, r.body)
		}
	}
	// Broken stored metadata is left out rather than failing the request.
	e.missions.Put(ports.Mission{ID: "bad-md", Objective: "x", State: ports.MissionAssigned, Metadata: []byte(`[1]`), CreatedAt: missionEpoch, UpdatedAt: missionEpoch})
	r = e.call("GET", "/api/v1/missions/bad-md", "")
	expect(t, r, 200, "")
	if strings.Contains(string(r.body), "metadata") {
		t.Errorf("metadata %s", r.body)
	}

	expect(t, e.call("GET", "/api/v1/missions/ghost", ""), 404, "mission_not_found")
	expect(t, e.call("GET", "/api/v1/missions/"+strings.Repeat("m", 257), ""), 400, "invalid_request") // over the spec's maxLength

	// A dispatched mission is found with what dispatch stored.
	e.dispatchOK("m-d", `{"mission_id":"m-d","objective":"x","metadata":{"b":2,"a":1}}`)
	r = e.call("GET", "/api/v1/missions/m-d", "")
	expect(t, r, 200, "")
	r.decode(t, &m)
	if m.State != restapi.MissionStateAssigned || *m.AiwgSessionId != "s-1" || *m.PtySessionId == "" || (*m.Metadata)["a"] == nil {
		t.Fatalf("dispatched mission %+v", m)
	}
}

func TestGetMissionStoreUnavailable(t *testing.T) {
	e := newEnv(t)
	e.missions.SetMissionError(fmt.Errorf("reading the archive: %w", ports.ErrStoreUnavailable))
	expect(t, e.call("GET", "/api/v1/missions/m-1", ""), 503, "store_unavailable")
}

func TestRespondHITLStoreUnavailable(t *testing.T) {
	e := newEnv(t)
	e.missions.SetRespondError(fmt.Errorf("writing missions.json: %w", ports.ErrStoreUnavailable))
	expect(t, e.call("POST", "/api/v1/hitl/h-1/respond", `{"text":"y"}`), 503, "store_unavailable")
}

func TestMissionsWithoutService(t *testing.T) {
	e := newEnv(t, func(d *Deps) { d.Missions = nil })
	if ms := listMissions(t, e, ""); len(ms) != 0 {
		t.Fatalf("missions %v", ms)
	}
	expect(t, e.call("GET", "/api/v1/missions/m-1", ""), 404, "mission_not_found")
	r := e.call("GET", "/api/v1/hitl", "")
	expect(t, r, 200, "")
	if strings.TrimSpace(string(r.body)) != `{"requests":[]}` {
		t.Fatalf("hitl %s", r.body)
	}
	expect(t, e.call("POST", "/api/v1/hitl/h-1/respond", `{"text":"y"}`), 404, "hitl_not_found")
	expect(t, e.call("DELETE", "/api/v1/sessions/nope", ""), 404, "session_not_found")
	// Commands are still sessions that can be killed.
	c := startSleeping(t, e, `{"command":"sleep"}`)
	r = e.call("DELETE", "/api/v1/sessions/"+c.ID(), "")
	expect(t, r, 202, "")
	<-c.Ended()
}

func TestHITL(t *testing.T) {
	e := newEnv(t)
	e.dispatchOK("m-1", "")
	e.dispatchOK("m-2", "")
	m1, _ := e.missions.Mission("m-1")
	e.missions.RaiseHITL("m-2", ports.HITLRequest{ID: "h-2", Prompt: "Continue? (yes/no)", Context: "a\nb", CreatedAt: missionEpoch.Add(time.Second)})
	e.missions.RaiseHITL("m-1", ports.HITLRequest{ID: "h-1", Prompt: "Do you want to proceed?", Context: "ctx", CreatedAt: missionEpoch})

	r := e.call("GET", "/api/v1/hitl", "")
	expect(t, r, 200, "")
	var l restapi.HITLList
	r.decode(t, &l)
	if len(l.Requests) != 2 || l.Requests[0].HitlId != "h-1" || l.Requests[1].HitlId != "h-2" {
		t.Fatalf("requests %+v, want h-1 then h-2 (oldest first)", l.Requests)
	}
	h := l.Requests[0]
	if deref(h.MissionId) != "m-1" || h.Prompt != "Do you want to proceed?" || h.Context != "ctx" || *h.AgentId != "a1" ||
		*h.SessionId != m1.SessionID || !h.CreatedAt.Equal(missionEpoch) {
		t.Fatalf("request %+v", h)
	}

	// Body errors: strict, like every operator body.
	for _, body := range []string{`{}`, `{"text":null}`, `{"text":1}`, `{"text":"y","extra":1}`, `{"Text":"y"}`, `[]`, `{`,
		`{"text":"` + strings.Repeat("x", maxHITLTextLen+1) + `"}`} {
		r := e.call("POST", "/api/v1/hitl/h-1/respond", body)
		if r.status != 400 {
			t.Fatalf("body %.40s: status %d %s", body, r.status, r.body)
		}
	}
	if n := len(e.missions.Answers()); n != 0 {
		t.Fatalf("%d answers from bad bodies", n)
	}

	r = e.call("POST", "/api/v1/hitl/h-1/respond", `{"text":"yes"}`)
	expect(t, r, 200, "")
	var a restapi.HITLAnswered
	r.decode(t, &a)
	if a.HitlId != "h-1" || deref(a.MissionId) != "m-1" || a.State == nil || *a.State != restapi.MissionStateRunning {
		t.Fatalf("answered %+v", a)
	}
	if ans := e.missions.Answers(); len(ans) != 1 || ans[0].Text != "yes" || ans[0].HITLID != "h-1" {
		t.Fatalf("answers %+v", ans)
	}
	expect(t, e.call("POST", "/api/v1/hitl/h-1/respond", `{"text":"yes"}`), 409, "hitl_not_open")
	expect(t, e.call("POST", "/api/v1/hitl/ghost/respond", `{"text":"yes"}`), 404, "hitl_not_found")
	expect(t, e.call("POST", "/api/v1/hitl/"+strings.Repeat("h", 129)+"/respond", `{"text":"yes"}`), 400, "invalid_request") // over the spec's maxLength

	r = e.call("GET", "/api/v1/hitl", "")
	r.decode(t, &l)
	if len(l.Requests) != 1 || l.Requests[0].HitlId != "h-2" {
		t.Fatalf("open after the answer: %+v", l.Requests)
	}

	// An empty answer is an answer: ENTER.
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{ports.ErrAgentNotConnected, 409, "agent_not_connected"},
		{ports.ErrAgentGone, 502, "agent_gone"},
		{ports.ErrCommandEnded, 409, "hitl_not_open"},
		{fmt.Errorf("x: %w", ports.ErrHITLNotOpen), 409, "hitl_not_open"},
	} {
		e.missions.SetRespondError(tc.err)
		expect(t, e.call("POST", "/api/v1/hitl/h-2/respond", `{"text":""}`), tc.status, tc.code)
	}
	e.missions.SetRespondError(nil)
	expect(t, e.call("POST", "/api/v1/hitl/h-2/respond", `{"text":""}`), 200, "")
	if ans := e.missions.Answers(); len(ans) != 2 || ans[1].Text != "" {
		t.Fatalf("answers %+v", ans)
	}
	expect(t, e.callAuth("POST", "/api/v1/hitl/h-2/respond", `{"text":""}`, execAuth), 401, "unauthorized")
}

func TestKillSession(t *testing.T) {
	e := newEnv(t)
	m := e.dispatchOK("m-1", "")
	r := e.call("DELETE", "/api/v1/sessions/"+m.SessionID, "")
	expect(t, r, 202, "")
	var k restapi.SessionKilled
	r.decode(t, &k)
	if k.SessionId != m.SessionID || k.MissionId == nil || *k.MissionId != "m-1" || k.Status != "kill_sent" {
		t.Fatalf("killed %+v", k)
	}
	if got, _ := e.missions.Mission("m-1"); got.State != ports.MissionAborted {
		t.Fatalf("mission %s after kill", got.State)
	}
	expect(t, e.call("DELETE", "/api/v1/sessions/"+m.SessionID, ""), 409, "command_ended")
	expect(t, e.call("DELETE", "/api/v1/sessions/ghost", ""), 404, "session_not_found")
	expect(t, e.call("DELETE", "/api/v1/sessions/"+strings.Repeat("s", 129), ""), 400, "invalid_request") // over the spec's maxLength

	// A command of this API is a session too; it has no mission.
	c := startSleeping(t, e, `{"command":"sleep"}`)
	r = e.call("DELETE", "/api/v1/sessions/"+c.ID(), "")
	expect(t, r, 202, "")
	if strings.Contains(string(r.body), "mission_id") {
		t.Fatalf("a plain command has no mission: %s", r.body)
	}
	<-c.Ended()
	if kills, _ := c.Killed(); kills != 1 {
		t.Fatalf("kills %d", kills)
	}
	expect(t, e.call("DELETE", "/api/v1/sessions/"+c.ID(), ""), 409, "command_ended")

	m2 := e.dispatchOK("m-2", "")
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{ports.ErrAgentGone, 502, "agent_gone"},
		{ports.ErrAgentNotConnected, 409, "agent_not_connected"},
		{fmt.Errorf("stream: %w", ports.ErrCommandEnded), 409, "command_ended"},
		{fmt.Errorf("boom"), 502, "agent_error"},
	} {
		e.missions.SetKillError(tc.err)
		expect(t, e.call("DELETE", "/api/v1/sessions/"+m2.SessionID, ""), tc.status, tc.code)
	}
	expect(t, e.callAuth("DELETE", "/api/v1/sessions/"+m2.SessionID, "", execAuth), 401, "unauthorized")
}

func TestAIWGStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		deps func(*Deps)
		edit func(*env)
	}{
		{"no link", func(d *Deps) { d.Executor = nil }, nil},
		{"link not configured", nil, func(e *env) { e.exec.SetConfigured(false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.deps)
			if tc.edit != nil {
				tc.edit(e)
			}
			r := e.call("GET", "/api/v1/aiwg/status", "")
			expect(t, r, 200, "")
			if got := strings.TrimSpace(string(r.body)); got != `{"configured":false}` {
				t.Fatalf("status with the integration off: %s", got)
			}
			expect(t, e.call("POST", "/api/v1/aiwg/reconnect", ""), 503, "integration_disabled")
		})
	}

	e := newEnv(t)
	r := e.call("GET", "/api/v1/aiwg/status", "")
	expect(t, r, 200, "")
	want := `{"configured":true,"connected":true,"endpoint":"http://aiwg.test:7337","sandbox_id":"sbx-1","executor_id":"exec-1","executor_register_error":null}`
	if got := strings.TrimSpace(string(r.body)); got != want {
		t.Fatalf("status %s, want %s", got, want)
	}
	e.exec.SetRegistered(false)
	e.exec.SetStatus(ports.ExecutorStatus{Endpoint: "http://aiwg.test:7337", SandboxID: "sbx-1",
		ExecutorRegisterError: "POST /api/v1/executors/register: 404 Not Found"})
	r = e.call("GET", "/api/v1/aiwg/status", "")
	expect(t, r, 200, "")
	var st restapi.AIWGStatus
	r.decode(t, &st)
	if !st.Configured || *st.Connected || *st.ExecutorId != "" || st.ExecutorRegisterError == nil ||
		*st.ExecutorRegisterError != "POST /api/v1/executors/register: 404 Not Found" {
		t.Fatalf("status %s", r.body)
	}
	// checkContract fails any response holding a token; the fake link holds one.
	if strings.Contains(string(r.body), testExecToken) || strings.Contains(string(r.body), "token") {
		t.Fatalf("status mentions a token: %s", r.body)
	}
	expect(t, e.callAuth("GET", "/api/v1/aiwg/status", "", ""), 401, "unauthorized")
	expect(t, e.callAuth("GET", "/api/v1/aiwg/status", "", execAuth), 401, "unauthorized")
}

func TestAIWGReconnect(t *testing.T) {
	e := newEnv(t)
	expect(t, e.callAuth("POST", "/api/v1/aiwg/reconnect", "", ""), 401, "unauthorized")
	if n := e.exec.Reconnects(); n != 0 {
		t.Fatalf("unauthorized reconnect reached the link (%d)", n)
	}
	r := e.call("POST", "/api/v1/aiwg/reconnect", "")
	expect(t, r, 202, "")
	var st restapi.AIWGStatus
	r.decode(t, &st)
	if !st.Configured || *st.ExecutorId != "exec-1" {
		t.Fatalf("status %s", r.body)
	}
	if n := e.exec.Reconnects(); n != 1 {
		t.Fatalf("reconnects %d", n)
	}
}
