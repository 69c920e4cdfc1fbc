package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

const hitlObjective = `printf 'Proceed? [y/N] '; read a; echo "answer=$a"`

// TestContractHITL: a prompt on a session nobody watches becomes
// mission.hitl_required; it is answered once over the executor stream
// (mission.hitl_responded) and once through REST after GET /api/v1/hitl
// lists it; each answer reaches the process's stdin, the mission resumes
// (resumed_from hitl_required) and completes with the answer in its summary.
func TestContractHITL(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1})

	expectHITL := func(t *testing.T, id string) (string, map[string]any) {
		t.Helper()
		h := e.waitEvent(id, evHITLRequired, patience)
		hitlID, _ := h.Data["hitl_id"].(string)
		prompt, _ := h.Data["prompt"].(string)
		if hitlID == "" || !strings.Contains(prompt, "Proceed? [y/N]") {
			t.Fatalf("%s: hitl_required %v", id, h.Data)
		}
		if _, ok := h.Data["context"].(string); !ok {
			t.Errorf("%s: hitl_required context %v is not a string", id, h.Data["context"])
		}
		// The mission waits for a human.
		m, r := e.mission(id)
		if string(m.State) != "hitl_required" || m.Hitl == nil || m.Hitl.HitlId != hitlID || m.Hitl.Prompt != prompt {
			t.Errorf("%s: GET mission while waiting: %s", id, r)
		}
		return hitlID, h.Data
	}
	expectResumedAndDone := func(t *testing.T, id string) {
		t.Helper()
		res := e.waitEvent(id, evResumed, patience)
		if res.Data["state"] != "running" || res.Data["resumed_from"] != "hitl_required" {
			t.Errorf("%s: resumed %v", id, res.Data)
		}
		end := e.waitEnd(id, patience)
		if s, _ := end.Data["summary"].(string); end.Event != evCompleted || !strings.Contains(s, "answer=y") {
			t.Errorf("%s: ended %s %v, want completed with answer=y", id, end.Event, end.Data)
		}
		fs := e.events(id)
		h, r, c := indexOf(fs, evHITLRequired), indexOf(fs, evResumed), indexOf(fs, evCompleted)
		if !(h >= 0 && h < r && r < c) || countEv(fs, evHITLRequired) != 1 || countEv(fs, evResumed) != 1 {
			t.Errorf("%s: events %v, want … hitl_required, resumed, … completed (once each)", id, evNames(fs))
		}
	}

	t.Run("answered over the executor stream", func(t *testing.T) {
		t.Parallel()
		e.dispatch("m-hitl-ws", hitlObjective)
		hitlID, _ := expectHITL(t, "m-hitl-ws")
		// Frames about unknown requests or without text are ignored and do
		// not break the stream.
		conns := e.fake.ExecutorConnections()
		for _, bad := range []any{
			map[string]any{"event": "mission.hitl_responded", "data": map[string]any{"hitl_id": "no-such-hitl", "text": "n"}},
			map[string]any{"event": "mission.hitl_responded", "data": map[string]any{"hitl_id": hitlID}},
			map[string]any{"event": "mission.something_new", "data": map[string]any{}},
		} {
			if err := e.fake.SendToExecutor(bad); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.fake.SendRawToExecutor([]byte(`{not json`)); err != nil {
			t.Fatal(err)
		}
		if err := e.fake.SendToExecutor(map[string]any{
			"event": "mission.hitl_responded",
			"data":  map[string]any{"hitl_id": hitlID, "text": "y"},
		}); err != nil {
			t.Fatal(err)
		}
		expectResumedAndDone(t, "m-hitl-ws")
		if n := e.fake.ExecutorConnections(); n != conns {
			t.Errorf("the executor stream reconnected (%d → %d) after inbound frames", conns, n)
		}
	})

	t.Run("answered through REST", func(t *testing.T) {
		t.Parallel()
		e.dispatch("m-hitl-rest", hitlObjective)
		hitlID, data := expectHITL(t, "m-hitl-rest")
		started := e.waitEvent("m-hitl-rest", evStarted, patience)
		ctx, cancel := ctxFor(patience)
		defer cancel()
		list, err := e.op().ListHITLWithResponse(ctx, nil)
		if err != nil || list.JSON200 == nil {
			t.Fatalf("list hitl: %v", err)
		}
		var found *restapi.HITLRequest
		for i, h := range list.JSON200.Requests {
			if h.HitlId == hitlID {
				found = &list.JSON200.Requests[i]
			}
		}
		if found == nil {
			t.Fatalf("GET /api/v1/hitl does not list %s: %s", hitlID, list.Body)
		}
		if deref(found.MissionId) != "m-hitl-rest" || found.Prompt != data["prompt"] || found.Context != data["context"] ||
			found.AgentId == nil || *found.AgentId != "host-01" || found.SessionId == nil || *found.SessionId != started.Data["pty_session_id"] {
			t.Errorf("listed request %s", list.Body)
		}
		// Answering needs the operator token.
		noTok, err := e.client("").RespondHITLWithResponse(ctx, hitlID, restapi.HITLResponse{Text: "y"})
		if err != nil || noTok.StatusCode() != 401 {
			t.Errorf("respond without a token: %v %d", err, noTok.StatusCode())
		}
		ans, err := e.op().RespondHITLWithResponse(ctx, hitlID, restapi.HITLResponse{Text: "y"})
		if err != nil || ans.JSON200 == nil {
			t.Fatalf("respond: %v %d %s", err, ans.StatusCode(), ans.Body)
		}
		if ans.JSON200.HitlId != hitlID || deref(ans.JSON200.MissionId) != "m-hitl-rest" || ans.JSON200.State == nil || string(*ans.JSON200.State) != "running" {
			t.Errorf("respond answered %s", ans.Body)
		}
		expectResumedAndDone(t, "m-hitl-rest")
		// Answered: no longer listed, and not answerable again.
		list, err = e.op().ListHITLWithResponse(ctx, nil)
		if err != nil || list.JSON200 == nil {
			t.Fatalf("list hitl: %v", err)
		}
		for _, h := range list.JSON200.Requests {
			if h.HitlId == hitlID {
				t.Errorf("answered request still listed: %s", list.Body)
			}
		}
		again, err := e.op().RespondHITLWithResponse(ctx, hitlID, restapi.HITLResponse{Text: "y"})
		if err != nil || (again.StatusCode() != 404 && again.StatusCode() != 409) {
			t.Errorf("second answer: %v %d %s, want 404 or 409", err, again.StatusCode(), again.Body)
		}
		unknown, err := e.op().RespondHITLWithResponse(ctx, "no-such-hitl", restapi.HITLResponse{Text: "y"})
		if err != nil || unknown.StatusCode() != 404 {
			t.Errorf("unknown request: %v %d %s, want 404", err, unknown.StatusCode(), unknown.Body)
		}
	})
}

// TestContractHITLAcrossReconnect: a mission waiting for a human when the
// executor stream is lost still waits after the reconnect: its
// hitl_required (same hitl_id) is announced again after the resync pair,
// and an answer on the new connection completes it.
func TestContractHITLAcrossReconnect(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1})
	e.dispatch("m-hitl-drop", hitlObjective)
	h := e.waitEvent("m-hitl-drop", evHITLRequired, patience)
	n := e.fake.ExecutorConnections()
	e.fake.DropExecutorStream()
	first := e.waitConnFirst(n, patience)
	ctx, cancel := ctxFor(patience)
	defer cancel()
	// Announced again: not the first frame sent once more (delivery is
	// at-least-once), a new one.
	again, err := e.fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool {
		return f.Conn == first.Conn && f.MissionID == "m-hitl-drop" && f.Event == evHITLRequired && string(f.Raw) != string(h.Raw)
	})
	if err != nil {
		t.Fatalf("hitl_required not announced again after the reconnect; events %v", evNames(e.events("m-hitl-drop")))
	}
	if again.Data["hitl_id"] != h.Data["hitl_id"] || again.Data["prompt"] != h.Data["prompt"] {
		t.Errorf("announced again as %v, first as %v", again.Data, h.Data)
	}
	var onConn []string
	for _, f := range e.events("m-hitl-drop") {
		if f.Conn == first.Conn {
			onConn = append(onConn, f.Event)
		}
	}
	if fmt.Sprint(onConn) != fmt.Sprint([]string{evReconnected, evResumed, evHITLRequired}) {
		t.Errorf("after the reconnect: %v, want reconnected, resumed, hitl_required", onConn)
	}
	if m, r := e.mission("m-hitl-drop"); string(m.State) != "hitl_required" {
		t.Errorf("mission after the reconnect: %s", r)
	}
	if err := e.fake.SendToExecutor(map[string]any{"event": "mission.hitl_responded", "data": map[string]any{"hitl_id": h.Data["hitl_id"], "text": "y"}}); err != nil {
		t.Fatal(err)
	}
	end := e.waitEnd("m-hitl-drop", patience)
	if s, _ := end.Data["summary"].(string); end.Event != evCompleted || !strings.Contains(s, "answer=y") {
		t.Errorf("ended %s %v", end.Event, end.Data)
	}
}

// TestContractAbort: DELETE /api/v1/sessions/{pty_session_id} kills the
// objective's process and ends the mission as mission.aborted, once.
func TestContractAbort(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1})
	pidFile := filepath.Join(e.tmp, "abort.pid")
	e.dispatch("m-abort", fmt.Sprintf("echo $$ > %s; echo sleeping; exec sleep 3600", pidFile))
	started := e.waitEvent("m-abort", evStarted, patience)
	session, _ := started.Data["pty_session_id"].(string)
	var pid int
	eventually(t, patience, "objective wrote its pid", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	if !harness.Alive(pid) {
		t.Fatalf("objective pid %d is not running", pid)
	}
	ctx, cancel := ctxFor(patience)
	defer cancel()
	// The operator token is needed.
	if r, err := e.client("").KillSessionWithResponse(ctx, session); err != nil || r.StatusCode() != 401 {
		t.Errorf("kill without a token: %v %d", err, r.StatusCode())
	}
	if !harness.Alive(pid) {
		t.Fatal("the process died on an unauthenticated kill")
	}
	if r := e.killSession("no-such-session"); r.status != 404 {
		t.Errorf("kill of an unknown session: %s, want 404", r)
	}

	r := e.killSession(session)
	if r.status != 202 || r.body["session_id"] != session || r.body["mission_id"] != "m-abort" {
		t.Fatalf("kill: %s", r)
	}
	end := e.waitEnd("m-abort", patience)
	if end.Event != evAborted || end.Data["state"] != "aborted" || end.Data["aborted_by"] != "operator" || !nonEmptyString(end.Data["reason"]) {
		t.Errorf("ended with %s %v, want mission.aborted by operator", end.Event, end.Data)
	}
	eventually(t, patience, fmt.Sprintf("objective pid %d gone", pid), func() bool { return !harness.Alive(pid) })
	eventually(t, patience, "mission stored as aborted", func() bool { return e.missionState("m-abort") == "aborted" })
	if r := e.killSession(session); r.status != 409 && r.status != 404 {
		t.Errorf("second kill: %s, want 409 (ended) or 404", r)
	}

	// The process's exit does not turn the abort into another end: a later
	// mission ends, and m-abort still has one terminal event.
	e.dispatch("m-abort-barrier", "true")
	e.waitEnd("m-abort-barrier", patience)
	fs := e.events("m-abort")
	if n := countEv(fs, evAborted) + countEv(fs, evCompleted) + countEv(fs, evFailed); n != 1 {
		t.Errorf("m-abort events %v, want exactly one terminal event", evNames(fs))
	}
	if m, r := e.mission("m-abort"); string(m.State) != "aborted" {
		t.Errorf("mission after the process exit: %s", r)
	}

	// A mission waiting for a human is aborted too, and its request closes.
	e.dispatch("m-abort-hitl", hitlObjective)
	h := e.waitEvent("m-abort-hitl", evHITLRequired, patience)
	hs := e.waitEvent("m-abort-hitl", evStarted, time.Second)
	if r := e.killSession(hs.Data["pty_session_id"].(string)); r.status != 202 {
		t.Fatalf("kill: %s", r)
	}
	if end := e.waitEnd("m-abort-hitl", patience); end.Event != evAborted {
		t.Errorf("ended %s %v, want aborted", end.Event, end.Data)
	}
	list, err := e.op().ListHITLWithResponse(ctx, nil)
	if err != nil || list.JSON200 == nil {
		t.Fatalf("list hitl: %v", err)
	}
	for _, r := range list.JSON200.Requests {
		if deref(r.MissionId) == "m-abort-hitl" {
			t.Errorf("the aborted mission's HITL request is still listed: %s", list.Body)
		}
	}
	if r, err := e.op().RespondHITLWithResponse(ctx, h.Data["hitl_id"].(string), restapi.HITLResponse{Text: "y"}); err != nil || (r.StatusCode() != 404 && r.StatusCode() != 409) {
		t.Errorf("answering an aborted mission: %v %d %s", err, r.StatusCode(), r.Body)
	}
	if m, r := e.mission("m-abort-hitl"); string(m.State) != "aborted" || m.Hitl != nil {
		t.Errorf("aborted mission: %s", r)
	}
}

// TestContractHITLAnsweredAtOnce: aiwg serve may answer a prompt the
// moment it hears mission.hitl_required (an auto-approving policy does).
// Such an answer must not be lost: every mission resumes and completes.
// The window this probes is short, so the test is probabilistic; it is hit
// more often under load.
func TestContractHITLAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1})
	const n = 30
	// The auto-approver answers each hitl_required as soon as it is recorded.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		next, answered := 0, map[string]bool{}
		for {
			frames := e.fake.Frames()
			for ; next < len(frames); next++ {
				f := frames[next]
				if f.Event != evHITLRequired || !strings.HasPrefix(f.MissionID, "m-hitl-fast-") || answered[f.MissionID] {
					continue
				}
				answered[f.MissionID] = true
				if err := e.fake.SendToExecutor(map[string]any{"event": "mission.hitl_responded", "data": map[string]any{"hitl_id": f.Data["hitl_id"], "text": "y"}}); err != nil {
					t.Errorf("answer %s: %v", f.MissionID, err)
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	// All prompt at the same instant, so the prompts are detected in a burst.
	gatePath, wait := e.gate("fast-go")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("m-hitl-fast-%02d", i)
		e.dispatch(ids[i], wait+"; "+hitlObjective)
	}
	for _, id := range ids {
		e.waitEvent(id, evStarted, patience)
	}
	touch(t, gatePath)
	ctx, cancel := ctxFor(patience)
	defer cancel()
	for _, id := range ids {
		f, err := e.fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.MissionID == id && isTerminal(f.Event) })
		if err != nil {
			m, _ := e.mission(id)
			t.Errorf("%s never ended: events %v, state %s; the answer sent right after hitl_required was lost", id, evNames(e.events(id)), m.State)
			continue
		}
		if s, _ := f.Data["summary"].(string); f.Event != evCompleted || !strings.Contains(s, "answer=y") {
			t.Errorf("%s ended %s %v", id, f.Event, f.Data)
		}
	}
}
