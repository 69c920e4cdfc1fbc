package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// TestContractMissionsREST: GET /api/v1/missions and
// /api/v1/missions/{id} agree with what the executor stream said about each
// mission, in every state this test can hold a mission in.
func TestContractMissionsREST(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1})
	gatePath, wait := e.gate("rest-go")
	e.dispatch("m-rest-ok", "echo one; echo two", "completion", "two printed", "long_running", false)
	e.dispatch("m-rest-fail", "echo failing; exit 4", "metadata", map[string]any{"ticket": "T-1", "n": 3})
	e.dispatch("m-rest-hitl", hitlObjective)
	e.dispatch("m-rest-run", wait+"; echo released", "long_running", true)
	e.waitEnd("m-rest-ok", patience)
	e.waitEnd("m-rest-fail", patience)
	e.waitEvent("m-rest-hitl", evHITLRequired, patience)
	e.waitEvent("m-rest-run", evStarted, patience)
	all := []string{"m-rest-ok", "m-rest-fail", "m-rest-hitl", "m-rest-run"}
	want := map[string]string{"m-rest-ok": "completed", "m-rest-fail": "failed", "m-rest-hitl": "hitl_required", "m-rest-run": "running"}
	e.checkMissionsAgree(t, all, want)

	ctx, cancel := ctxFor(patience)
	defer cancel()
	// Filters.
	for state, ids := range map[string][]string{"completed": {"m-rest-ok"}, "failed": {"m-rest-fail"}, "hitl_required": {"m-rest-hitl"}, "running": {"m-rest-run"}, "aborted": nil} {
		st := restapi.MissionState(state)
		r, err := e.op().ListMissionsWithResponse(ctx, &restapi.ListMissionsParams{State: &st})
		if err != nil || r.JSON200 == nil {
			t.Fatalf("list ?state=%s: %v %s", state, err, r.Body)
		}
		var got []string
		for _, m := range r.JSON200.Missions {
			got = append(got, m.MissionId)
			if string(m.State) != state {
				t.Errorf("?state=%s lists %s in %s", state, m.MissionId, m.State)
			}
		}
		if len(got) != len(ids) || (len(ids) > 0 && got[0] != ids[0]) {
			t.Errorf("?state=%s lists %v, want %v", state, got, ids)
		}
	}
	bogus := restapi.MissionState("sleeping")
	if r, err := e.op().ListMissionsWithResponse(ctx, &restapi.ListMissionsParams{State: &bogus}); err != nil || r.StatusCode() != 400 {
		t.Errorf("?state=sleeping: %v %d %s", err, r.StatusCode(), r.Body)
	}
	if _, r := e.mission("m-no-such-mission"); r.status != 404 || r.code() != "mission_not_found" {
		t.Errorf("unknown mission: %s", r)
	}
	if r, err := e.client("").ListMissionsWithResponse(ctx, nil); err != nil || r.StatusCode() != 401 {
		t.Errorf("list without a token: %v %d", err, r.StatusCode())
	}
	if r, err := e.client(e.fake.ExecutorToken()).GetMissionWithResponse(ctx, "m-rest-ok"); err != nil || r.StatusCode() != 401 {
		t.Errorf("the executor token reads missions: %v %d", err, r.StatusCode())
	}

	// Move the open ones on; they agree again.
	h := e.waitEvent("m-rest-hitl", evHITLRequired, time.Second)
	if ans, err := e.op().RespondHITLWithResponse(ctx, h.Data["hitl_id"].(string), restapi.HITLResponse{Text: "y"}); err != nil || ans.StatusCode() != 200 {
		t.Fatalf("respond: %v %d %s", err, ans.StatusCode(), ans.Body)
	}
	touch(t, gatePath)
	e.waitEnd("m-rest-hitl", patience)
	e.waitEnd("m-rest-run", patience)
	for _, id := range []string{"m-rest-hitl", "m-rest-run"} {
		want[id] = "completed"
	}
	e.checkMissionsAgree(t, all, want)
}

// checkMissionsAgree compares the REST view of each mission with its
// events, once the REST view has caught up with the wanted states.
func (e *cenv) checkMissionsAgree(t *testing.T, ids []string, want map[string]string) {
	t.Helper()
	for _, id := range ids {
		eventually(t, patience, id+" stored as "+want[id], func() bool { return e.missionState(id) == want[id] })
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	list, err := e.op().ListMissionsWithResponse(ctx, nil)
	if err != nil || list.JSON200 == nil {
		t.Fatalf("list missions: %v", err)
	}
	listed := map[string]restapi.Mission{}
	var prev time.Time
	for _, m := range list.JSON200.Missions {
		listed[m.MissionId] = m
		if m.CreatedAt.Before(prev) {
			t.Errorf("missions not oldest first: %s created %v after %v", m.MissionId, m.CreatedAt, prev)
		}
		prev = m.CreatedAt
	}
	var pos []int
	for _, id := range ids {
		for i, m := range list.JSON200.Missions {
			if m.MissionId == id {
				pos = append(pos, i)
			}
		}
	}
	for i := 1; i < len(pos); i++ {
		if pos[i] < pos[i-1] {
			t.Errorf("missions %v are not listed in dispatch order", ids)
		}
	}
	ms := func(ts time.Time) string { return ts.UTC().Format("2006-01-02T15:04:05.000Z") }
	for _, id := range ids {
		m, r := e.mission(id)
		if r.status != 200 {
			t.Errorf("get %s: %s", id, r)
			continue
		}
		l, ok := listed[id]
		if !ok {
			t.Errorf("%s is not listed", id)
		} else if l.State != m.State || l.UpdatedAt != m.UpdatedAt || ptrStr(l.LastEvent) != ptrStr(m.LastEvent) {
			t.Errorf("%s: the list (%s, %s) and GET (%s, %s) disagree", id, l.State, ptrStr(l.LastEvent), m.State, ptrStr(m.LastEvent))
		}
		fs := e.events(id)
		if len(fs) == 0 {
			t.Errorf("%s: no events", id)
			continue
		}
		if string(m.State) != want[id] {
			t.Errorf("%s: state %s, want %s", id, m.State, want[id])
		}
		if ptrStr(m.AgentId) != "host-01" || ptrStr(m.AiwgSessionId) != "sess-"+id || m.Objective == "" {
			t.Errorf("%s: agent_id %q, aiwg_session_id %q, objective %q", id, ptrStr(m.AgentId), ptrStr(m.AiwgSessionId), m.Objective)
		}
		if last := fs[len(fs)-1].Event; ptrStr(m.LastEvent) != last {
			t.Errorf("%s: last_event %q, the stream's last is %s", id, ptrStr(m.LastEvent), last)
		}
		a := fs[0]
		if m.EstimatedStart == nil || ms(*m.EstimatedStart) != a.Data["estimated_start"] {
			t.Errorf("%s: estimated_start %v, assigned said %v", id, m.EstimatedStart, a.Data["estimated_start"])
		}
		if ms(m.CreatedAt) > a.TS || m.UpdatedAt.Before(m.CreatedAt) {
			t.Errorf("%s: created_at %v, updated_at %v, assigned at %s", id, m.CreatedAt, m.UpdatedAt, a.TS)
		}
		if s := only1(fs, evStarted); s.Event != "" {
			if ptrStr(m.PtySessionId) != s.Data["pty_session_id"] || ptrStr(m.AgentRuntime) != s.Data["agent_runtime"] ||
				m.StartedAt == nil || ms(*m.StartedAt) != s.TS {
				t.Errorf("%s: pty_session_id %q, agent_runtime %q, started_at %v; started said %v at %s",
					id, ptrStr(m.PtySessionId), ptrStr(m.AgentRuntime), m.StartedAt, s.Data, s.TS)
			}
		}
		if n := countEv(fs, evProgress); m.Iteration == nil && n > 0 || m.Iteration != nil && *m.Iteration != n {
			t.Errorf("%s: iteration %v, %d progress events", id, m.Iteration, n)
		}
		end := fs[len(fs)-1]
		switch end.Event {
		case evCompleted, evFailed:
			if m.EndedAt == nil || ms(*m.EndedAt) != end.TS {
				t.Errorf("%s: ended_at %v, the end was at %s", id, m.EndedAt, end.TS)
			}
			if m.ExitCode == nil || float64(*m.ExitCode) != end.Data["exit_code"] {
				t.Errorf("%s: exit_code %v, the end said %v", id, m.ExitCode, end.Data["exit_code"])
			}
			if ptrStr(m.Summary) != end.Data["summary"] {
				t.Errorf("%s: summary %q, the end said %q", id, ptrStr(m.Summary), end.Data["summary"])
			}
			if end.Event == evFailed && (ptrStr(m.Reason) != end.Data["reason"] || ptrStr(m.Error) != end.Data["error"]) {
				t.Errorf("%s: reason %q error %q, failed said %v", id, ptrStr(m.Reason), ptrStr(m.Error), end.Data)
			}
			if m.Hitl != nil {
				t.Errorf("%s: an ended mission still shows a HITL request", id)
			}
		case evHITLRequired:
			if m.Hitl == nil || m.Hitl.HitlId != end.Data["hitl_id"] || m.Hitl.Prompt != end.Data["prompt"] || m.Hitl.Context != end.Data["context"] || deref(m.Hitl.MissionId) != id {
				t.Errorf("%s: hitl %+v, hitl_required said %v", id, m.Hitl, end.Data)
			}
		}
	}
	// What the dispatch carried is kept.
	if m, _ := e.mission("m-rest-ok"); ptrStr(m.Completion) != "two printed" {
		t.Errorf("completion not kept: %+v", m.Completion)
	}
	if m, _ := e.mission("m-rest-run"); m.LongRunning == nil || !*m.LongRunning {
		t.Errorf("long_running not kept: %v", m.LongRunning)
	}
	if m, _ := e.mission("m-rest-fail"); m.Metadata == nil || (*m.Metadata)["ticket"] != "T-1" || (*m.Metadata)["n"] != float64(3) {
		t.Errorf("metadata not kept: %v", m.Metadata)
	}
}

func ptrStr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
