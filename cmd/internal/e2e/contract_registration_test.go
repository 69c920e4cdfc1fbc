package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
)

// TestContractRegistrationPayloads: both registrations carry exactly the
// contract's members; the executor registers under this instance's
// identity; the capabilities are honest for one host agent; the status
// shows the registered, connected integration.
func TestContractRegistrationPayloads(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1, env: []string{"AIWG_SERVE_NAME=ct-reg", "AGENTIC_ADVERTISE_HOST=sandbox.example.test"}})
	id := e.identity()
	if !regexpUUIDv7.MatchString(id) {
		t.Errorf("identity %q is not a UUIDv7", id)
	}
	port := e.s().Opts.BasePort
	ctx, cancel := ctxFor(patience)
	defer cancel()
	health, err := e.op().GetHealthzWithResponse(ctx)
	if err != nil || health.JSON200 == nil {
		t.Fatalf("healthz: %v", err)
	}
	version := health.JSON200.Version

	wantCaps := func(what string, caps any) {
		t.Helper()
		list, ok := caps.([]any)
		if !ok {
			t.Errorf("%s capabilities are not an array: %v", what, caps)
			return
		}
		var got []string
		for _, c := range list {
			s, _ := c.(string)
			got = append(got, s)
		}
		for _, want := range []string{"isolation:host", platformCap(), "resumable", "hitl"} {
			if !slices.Contains(got, want) {
				t.Errorf("%s capabilities %v lack %s", what, got, want)
			}
		}
		for _, never := range []string{"isolation:container", "isolation:vm"} {
			if slices.Contains(got, never) {
				t.Errorf("%s capabilities %v claim %s with only a host agent", what, got, never)
			}
		}
		_, claudeErr := exec.LookPath("claude")
		if has := slices.Contains(got, "runtime:claude-code"); has != (claudeErr == nil) {
			t.Errorf("%s capabilities %v: runtime:claude-code is %v but claude on PATH is %v", what, got, has, claudeErr == nil)
		}
		if len(slices.Compact(slices.Sorted(slices.Values(got)))) != len(got) {
			t.Errorf("%s capabilities %v hold duplicates", what, got)
		}
	}

	sbx := e.fake.SandboxRegistrations()
	if len(sbx) == 0 {
		t.Fatal("no sandbox registration")
	}
	s := sbx[0]
	if !sameKeys(s, "name", "instance_id", "grpc_endpoint", "ws_endpoint", "http_endpoint", "capabilities", "version") {
		t.Errorf("sandbox registration members %v", ckeys(s))
	}
	for k, want := range map[string]string{
		"name":          "ct-reg",
		"instance_id":   id,
		"grpc_endpoint": fmt.Sprintf("http://sandbox.example.test:%d", port),
		"ws_endpoint":   fmt.Sprintf("ws://sandbox.example.test:%d", port+1),
		"http_endpoint": fmt.Sprintf("http://sandbox.example.test:%d", port+2),
		"version":       version,
	} {
		if s[k] != want {
			t.Errorf("sandbox registration %s = %v, want %q", k, s[k], want)
		}
	}
	wantCaps("sandbox", s["capabilities"])

	regs := e.fake.ExecutorRegistrations()
	if len(regs) == 0 {
		t.Fatal("no executor registration")
	}
	x := regs[0]
	if !sameKeys(x, "executor_id", "name", "version", "spec_version", "transport_endpoints", "capabilities") {
		t.Errorf("executor registration members %v", ckeys(x))
	}
	for k, want := range map[string]string{
		"executor_id":  id,
		"name":         "agentic-sandbox-ct-reg",
		"version":      version,
		"spec_version": "1.0.0",
	} {
		if x[k] != want {
			t.Errorf("executor registration %s = %v, want %q", k, x[k], want)
		}
	}
	te, _ := x["transport_endpoints"].(map[string]any)
	if !sameKeys(te, "rest", "ws") || te["rest"] != fmt.Sprintf("http://sandbox.example.test:%d", port+2) ||
		te["ws"] != fmt.Sprintf("ws://sandbox.example.test:%d", port+1) {
		t.Errorf("transport_endpoints %v", x["transport_endpoints"])
	}
	wantCaps("executor", x["capabilities"])
	if s["instance_id"] != x["executor_id"] {
		t.Errorf("instance_id %v != executor_id %v", s["instance_id"], x["executor_id"])
	}

	// The status of a registered, connected integration: every member, no token.
	eventually(t, patience, "status connected", func() bool {
		st := e.aiwgStatus()
		return st.body["connected"] == true
	})
	st := e.aiwgStatus()
	want := map[string]any{
		"configured":  true,
		"connected":   true,
		"endpoint":    e.fake.URL(),
		"sandbox_id":  "sbx-" + id,
		"executor_id": id,
	}
	for k, v := range want {
		if st.body[k] != v {
			t.Errorf("status %s = %v, want %v (%s)", k, st.body[k], v, st.raw)
		}
	}
	if v, has := st.body["executor_register_error"]; has && v != nil {
		t.Errorf("status executor_register_error = %v after a good registration", v)
	}
	for k := range st.body {
		if _, ok := want[k]; !ok && k != "executor_register_error" {
			t.Errorf("status has the unknown member %s", k)
		}
	}
	// The executor stream was opened for the registered id.
	first := e.waitConnFirst(0, patience)
	if first.ExecutorID != id {
		t.Errorf("executor stream frames carry executor_id %q, want %q", first.ExecutorID, id)
	}
}

// TestContractResyncFirstOnEveryConnect: whatever ends the executor stream
// (a close frame, a cut connection, POST /api/v1/aiwg/reconnect), the first
// frame of the next connection is executor.resync with the owned missions,
// and terminal missions are never owned.
func TestContractResyncFirstOnEveryConnect(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1})
	checkResync := func(f fakeaiwg.Frame, owned ...string) {
		t.Helper()
		if f.Event != evResync {
			t.Fatalf("first frame of connection #%d is %s: %s", f.Conn, f.Event, f.Raw)
		}
		if f.HasMissionID {
			t.Errorf("executor.resync has a mission_id: %s", f.Raw)
		}
		if err := checkData(f); err != nil {
			t.Error(err)
		}
		var got []string
		for _, v := range f.Data["owned_mission_ids"].([]any) {
			got = append(got, v.(string))
		}
		slices.Sort(got)
		slices.Sort(owned)
		if !slices.Equal(got, owned) {
			t.Errorf("connection #%d: owned_mission_ids %v, want %v", f.Conn, got, owned)
		}
	}
	frames := e.fake.Frames()
	if len(frames) == 0 {
		t.Fatal("no frames")
	}
	checkResync(frames[0])
	if raw := string(frames[0].Raw); !strings.Contains(raw, `"owned_mission_ids":[]`) {
		t.Errorf("owned_mission_ids of an executor with no mission is not []: %s", raw)
	}

	gatePath, wait := e.gate("resync-go")
	e.dispatch("m-resync", wait+"; echo resync-done")
	e.waitEvent("m-resync", evStarted, patience)

	reconnectBy := map[string]func(){
		"close frame": e.fake.DropExecutorStream,
		"cut TCP":     e.fake.KillExecutorStream,
		"POST /api/v1/aiwg/reconnect": func() {
			r := e.reconnect()
			if r.status != 202 {
				t.Errorf("reconnect: %s", r)
			}
		},
	}
	for _, how := range []string{"close frame", "cut TCP", "POST /api/v1/aiwg/reconnect"} {
		n := e.fake.ExecutorConnections()
		reconnectBy[how]()
		f := e.waitConnFirst(n, patience)
		checkResync(f, "m-resync")
		// Then the owned mission's reconnected and resumed.
		ctx, cancel := ctxFor(patience)
		_, err := e.fake.WaitFrame(ctx, func(g fakeaiwg.Frame) bool {
			return g.Conn == f.Conn && g.MissionID == "m-resync" && g.Event == evResumed
		})
		cancel()
		if err != nil {
			t.Fatalf("%s: no mission.resumed on connection #%d", how, f.Conn)
		}
		var onConn []string
		for _, g := range e.fake.Frames() {
			if g.Conn == f.Conn {
				onConn = append(onConn, g.Event)
			}
		}
		i := slices.Index(onConn, evReconnected)
		if i < 1 || i+1 >= len(onConn) || onConn[i+1] != evResumed {
			t.Errorf("%s: connection #%d: %v, want executor.resync … mission.reconnected, mission.resumed", how, f.Conn, onConn)
		}
	}

	// A mission that ended is no longer owned.
	touch(t, gatePath)
	e.waitEnd("m-resync", patience)
	eventually(t, patience, "mission stored as completed", func() bool { return e.missionState("m-resync") == "completed" })
	n := e.fake.ExecutorConnections()
	e.fake.DropExecutorStream()
	checkResync(e.waitConnFirst(n, patience))
}

// TestContractEventEnvelope checks the envelope of every frame of a stream
// that carries each kind of event this test can cause cheaply: resync on
// two connections, assigned, started, progress, completed, failed, aborted.
func TestContractEventEnvelope(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1})
	e.dispatch("m-env-ok", "echo envelope")
	e.dispatch("m-env-fail", "echo no; exit 3")
	e.dispatch("m-env-abort", "echo abort-me; exec sleep 3600")
	e.waitEnd("m-env-ok", patience)
	e.waitEnd("m-env-fail", patience)
	started := e.waitEvent("m-env-abort", evStarted, patience)
	if r := e.killSession(started.Data["pty_session_id"].(string)); r.status != 202 {
		t.Fatalf("kill: %s", r)
	}
	e.waitEnd("m-env-abort", patience)
	// A mission still running across a reconnect gets reconnected and resumed.
	gatePath, wait := e.gate("env-go")
	e.dispatch("m-env-run", wait)
	e.waitEvent("m-env-run", evStarted, patience)
	n := e.fake.ExecutorConnections()
	e.fake.DropExecutorStream()
	e.waitConnFirst(n, patience)
	e.waitEvent("m-env-run", evResumed, patience)
	touch(t, gatePath)
	e.waitEnd("m-env-run", patience)

	id := e.identity()
	seen := map[string]bool{}
	for _, f := range e.fake.Frames() {
		seen[f.Event] = true
		if err := checkEnvelope(f, id); err != nil {
			t.Error(err)
		}
		// Every member of the envelope, by name and JSON type.
		var m map[string]any
		if err := json.Unmarshal(f.Raw, &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range m {
			ok := false
			switch k {
			case "event", "executor_id", "mission_id", "ts":
				_, ok = v.(string)
			case "data":
				_, ok = v.(map[string]any)
			}
			if !ok {
				t.Errorf("envelope member %s = %v (%T): %s", k, v, v, f.Raw)
			}
		}
		if ts, err := time.Parse(time.RFC3339Nano, f.TS); err == nil && (ts.Before(time.Now().Add(-10*time.Minute)) || ts.After(time.Now().Add(time.Minute))) {
			t.Errorf("ts %s is not the time of the event", f.TS)
		}
	}
	for _, ev := range []string{evResync, evAssigned, evStarted, evProgress, evCompleted, evFailed, evAborted, evReconnected, evResumed} {
		if !seen[ev] {
			t.Errorf("no %s was seen, so its envelope went unchecked", ev)
		}
	}
	if c := countEv(e.fake.Frames(), evResync); c < 2 {
		t.Errorf("%d resyncs, want one per connection (2)", c)
	}
}
