package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// storedMissions reads <dataDir>/missions.json: a JSON object with a
// "missions" array; it returns each mission's state by id.
func storedMissions(t *testing.T, dataDir string) (map[string]string, error) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "missions.json"))
	if err != nil {
		return nil, err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	raw, ok := doc["missions"]
	if !ok {
		return nil, errNoMissionsArray
	}
	var ms []map[string]any
	if err := json.Unmarshal(raw, &ms); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range ms {
		id, _ := m["mission_id"].(string)
		st, _ := m["state"].(string)
		out[id] = st
	}
	return out, nil
}

var errNoMissionsArray = errors.New(`missions.json has no "missions" array`)

// TestContractSigtermSuspendRestartResume: SIGTERM suspends the running
// mission (event flushed before exit, exit 0 within 2 s, stored suspended)
// while its process goes on; the next start registers with the same
// identity, resyncs with the mission owned, reconnects and resumes it, and
// the mission's real completion arrives.
func TestContractSigtermSuspendRestartResume(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1})
	id := e.identity()
	// The objective runs until the test lets it end, after the restart.
	gatePath, wait := e.gate("restart-go")
	objective := wait + "; echo finished"
	first := e.dispatch("m-restart", objective)
	e.waitEvent("m-restart", evStarted, patience)
	if st, err := storedMissions(t, e.dataDir); err != nil || st["m-restart"] != "running" {
		t.Errorf("missions.json while running: %v %v", st, err)
	}
	agentPIDs := harness.HostAgentPIDs(e.dataDir)

	// It exits without waiting for the mission, which cannot end yet.
	if exitErr := e.sigterm(); exitErr != nil {
		t.Errorf("agentic-mgmt exited with %v after SIGTERM, want 0", exitErr)
	}
	// The suspension reached aiwg serve before the process was gone.
	var suspended fakeaiwg.Frame
	for _, f := range e.fake.Frames() {
		if f.MissionID == "m-restart" && f.Event == evSuspended {
			suspended = f
		}
	}
	if suspended.Event == "" {
		t.Fatalf("no mission.suspended received before exit; events %v", evNames(e.events("m-restart")))
	}
	checkpoint, _ := suspended.Data["checkpoint_id"].(string)
	if suspended.Data["state"] != "suspended" || suspended.Data["reason"] != "mgmt_server_shutdown" || checkpoint == "" {
		t.Errorf("suspended %v", suspended.Data)
	}
	if st, err := storedMissions(t, e.dataDir); err != nil || st["m-restart"] != "suspended" {
		t.Errorf("missions.json after exit: %v %v, want m-restart suspended", st, err)
	}
	for agent, pid := range agentPIDs {
		if !harness.Alive(pid) {
			t.Errorf("host agent %s (pid %d) died with agentic-mgmt", agent, pid)
		}
	}
	if end := e.events("m-restart"); isTerminal(end[len(end)-1].Event) {
		t.Fatalf("the mission ended before the restart (%v)", evNames(end))
	}

	sbx, regs, conns := len(e.fake.SandboxRegistrations()), len(e.fake.ExecutorRegistrations()), e.fake.ExecutorConnections()
	// The resync does not wait for the host agent, which comes back on its
	// own reconnect backoff (about 5 s).
	e.startWith(false)
	if got := e.fake.SandboxRegistrations(); len(got) <= sbx || got[len(got)-1]["instance_id"] != id {
		t.Errorf("no new sandbox registration with instance_id %s", id)
	}
	if got := e.fake.ExecutorRegistrations(); len(got) <= regs || got[len(got)-1]["executor_id"] != id {
		t.Errorf("no new executor registration with executor_id %s", id)
	}
	if e.identity() != id {
		t.Errorf("identity changed across the restart: %s → %s", id, e.identity())
	}
	resync := e.waitConnFirst(conns, patience)
	if resync.Event != evResync {
		t.Fatalf("first frame after restart: %s", resync.Raw)
	}
	owned := resync.Data["owned_mission_ids"].([]any)
	if !slices.Contains(owned, any("m-restart")) {
		t.Errorf("resync after restart owns %v, want m-restart", owned)
	}
	rec := e.waitEvent("m-restart", evReconnected, patience)
	if rec.Data["checkpoint_id"] != checkpoint {
		t.Errorf("reconnected checkpoint_id %v, want the suspended one %s", rec.Data["checkpoint_id"], checkpoint)
	}
	res := e.waitEvent("m-restart", evResumed, patience)
	if res.Data["state"] != "running" || res.Data["resumed_from"] != "suspended" {
		t.Errorf("resumed %v", res.Data)
	}
	eventually(t, patience, "mission stored as running again after the resync", func() bool {
		st, err := storedMissions(t, e.dataDir)
		return err == nil && st["m-restart"] != "suspended"
	})
	if st, _ := storedMissions(t, e.dataDir); st["m-restart"] != "running" {
		t.Errorf("missions.json after the resync: m-restart %s, want running", st["m-restart"])
	}

	// The same dispatch again, after the restart: the same answer, nothing new.
	if again := e.dispatchRaw("sess-m-restart", e.body("m-restart", objective), auth{}); again.status != 202 || string(again.raw) != string(first.raw) {
		t.Errorf("re-dispatch after restart: %s, want %s", again, first.raw)
	}

	touch(t, gatePath)
	end := e.waitEnd("m-restart", patience)
	if s, _ := end.Data["summary"].(string); end.Event != evCompleted || end.Data["exit_code"] != float64(0) || !strings.Contains(s, "finished") {
		t.Fatalf("ended %s %v, want the real completion (exit 0, finished); events %v", end.Event, end.Data, evNames(e.events("m-restart")))
	}
	fs := e.events("m-restart")
	wantOrder := []string{evAssigned, evStarted, evSuspended, evReconnected, evResumed, evCompleted}
	var got []string
	for _, f := range fs {
		if f.Event != evProgress {
			got = append(got, f.Event)
		}
	}
	if !slices.Equal(got, wantOrder) {
		t.Errorf("events %v, want %v (progress aside)", evNames(fs), wantOrder)
	}
	eventually(t, patience, "mission stored as completed", func() bool {
		st, err := storedMissions(t, e.dataDir)
		return err == nil && st["m-restart"] == "completed"
	})
	if m, r := e.mission("m-restart"); string(m.State) != "completed" || m.ExitCode == nil || *m.ExitCode != 0 {
		t.Errorf("GET mission: %s", r)
	}
}

// TestContractShutdownWithStreamDown: SIGINT while aiwg serve is
// unreachable still exits 0 with the mission stored suspended;
// its mission.suspended is delivered after the next start's resync, before
// the mission's reconnected and resumed, and the mission goes on to its end.
func TestContractShutdownWithStreamDown(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1})
	gatePath, wait := e.gate("down-go")
	e.dispatch("m-down", wait+"; echo down-done")
	e.waitEvent("m-down", evStarted, patience)
	pidFile := filepath.Join(e.tmp, "down-abort.pid")
	e.dispatch("m-down-abort", fmt.Sprintf("echo $$ > %s; exec sleep 3600", pidFile))
	abortStarted := e.waitEvent("m-down-abort", evStarted, patience)
	e.fake.SetExecutorStreamStatus(503)
	e.fake.DropExecutorStream()
	eventually(t, patience, "stream down", func() bool { return e.aiwgStatus().body["connected"] == false })

	if exitErr := e.stop(syscall.SIGINT); exitErr != nil {
		t.Errorf("SIGINT: exit %v, want 0", exitErr)
	}
	if st, err := storedMissions(t, e.dataDir); err != nil || st["m-down"] != "suspended" {
		t.Errorf("missions.json after exit: %v %v, want m-down suspended", st, err)
	}
	if n := countEv(e.events("m-down"), evSuspended); n != 0 {
		t.Fatalf("mission.suspended reached a refused stream?")
	}

	e.fake.SetExecutorStreamStatus(0)
	conns := e.fake.ExecutorConnections()
	e.startWith(false)
	resync := e.waitConnFirst(conns, patience)
	if resync.Event != evResync || !slices.Contains(resync.Data["owned_mission_ids"].([]any), any("m-down")) {
		t.Errorf("first frame after restart: %s", resync.Raw)
	}
	e.waitEvent("m-down", evResumed, patience)
	fs := e.events("m-down")
	sus, rec, res := indexOf(fs, evSuspended), indexOf(fs, evReconnected), indexOf(fs, evResumed)
	if !(sus >= 0 && sus < rec && rec < res) || fs[sus].Conn <= conns {
		t.Errorf("events %v: want the held mission.suspended delivered after the resync, before reconnected, resumed", evNames(fs))
	}
	touch(t, gatePath)
	if end := e.waitEnd("m-down", patience); end.Event != evCompleted {
		t.Errorf("ended %s %v", end.Event, end.Data)
	}

	// A session started by the previous run can be killed by this one.
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 || !harness.Alive(pid) {
		t.Fatalf("the objective of m-down-abort (pid %d) did not survive the restart", pid)
	}
	if r := e.killSession(abortStarted.Data["pty_session_id"].(string)); r.status != 202 {
		t.Fatalf("kill after restart: %s", r)
	}
	if end := e.waitEnd("m-down-abort", patience); end.Event != evAborted {
		t.Errorf("m-down-abort ended %s %v, want aborted", end.Event, end.Data)
	}
	eventually(t, patience, fmt.Sprintf("pid %d gone", pid), func() bool { return !harness.Alive(pid) })
}

// TestContractHITLSurvivesRestart: a mission waiting for a human when
// agentic-mgmt is stopped still waits for one after the next start: aiwg
// serve hears hitl_required again after the resync, GET /api/v1/hitl lists
// it, and an answer reaches the process, which completes.
func TestContractHITLSurvivesRestart(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1})
	e.dispatch("m-hitl-restart", hitlObjective)
	h := e.waitEvent("m-hitl-restart", evHITLRequired, patience)
	if exitErr := e.sigterm(); exitErr != nil {
		t.Errorf("SIGTERM: %v", exitErr)
	}
	conns := e.fake.ExecutorConnections()
	e.startWith(false)
	e.waitConnFirst(conns, patience)
	e.waitEvent("m-hitl-restart", evResumed, patience)

	// Still waiting for the human: announced again, listed, answerable.
	hitlID, _ := h.Data["hitl_id"].(string)
	ctx, cancel := ctxFor(patience)
	defer cancel()
	again, err := e.fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool {
		return f.MissionID == "m-hitl-restart" && f.Event == evHITLRequired && f.Conn > conns && string(f.Raw) != string(h.Raw)
	})
	if err != nil {
		m, _ := e.mission("m-hitl-restart")
		t.Errorf("no mission.hitl_required after the restart; events %v; the mission shows state %s with hitl %v",
			evNames(e.events("m-hitl-restart")), m.State, m.Hitl != nil)
	} else if again.Data["hitl_id"] != hitlID {
		t.Logf("announced again under a new hitl_id %v", again.Data["hitl_id"])
		hitlID, _ = again.Data["hitl_id"].(string)
	}
	e.waitAgents(patience)
	ctx, cancel = ctxFor(patience)
	defer cancel()
	list, err := e.op().ListHITLWithResponse(ctx, nil)
	if err != nil || list.JSON200 == nil {
		t.Fatalf("list hitl: %v", err)
	}
	listed := false
	for _, r := range list.JSON200.Requests {
		listed = listed || r.HitlId == hitlID
	}
	if !listed {
		t.Errorf("GET /api/v1/hitl does not list %s after the restart: %s", hitlID, list.Body)
	}
	ans, err := e.op().RespondHITLWithResponse(ctx, hitlID, restapi.HITLResponse{Text: "y"})
	if err != nil || ans.StatusCode() != 200 {
		t.Fatalf("answering %s after the restart: %v %d %s; the mission can no longer be answered", hitlID, err, ans.StatusCode(), ans.Body)
	}
	end := e.waitEnd("m-hitl-restart", patience)
	if s, _ := end.Data["summary"].(string); end.Event != evCompleted || !strings.Contains(s, "answer=y") {
		t.Errorf("ended %s %v, want completed with answer=y", end.Event, end.Data)
	}
}
