package e2e

// Shared machinery of the AIWG executor contract tests (contract_*_test.go):
// a fake aiwg serve, agentic-mgmt runs on one data dir (restarts included),
// a REST client that validates every answer against openapi.yaml, and the
// checks every executor stream must pass in every test (envelope, event
// data, resync first on each connection, per-mission order, no token in
// any log).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// Event names of the executor stream.
const (
	evResync       = "executor.resync"
	evAssigned     = "mission.assigned"
	evStarted      = "mission.started"
	evProgress     = "mission.progress"
	evHITLRequired = "mission.hitl_required"
	evResumed      = "mission.resumed"
	evSuspended    = "mission.suspended"
	evReconnected  = "mission.reconnected"
	evCompleted    = "mission.completed"
	evFailed       = "mission.failed"
	evAborted      = "mission.aborted"
)

var (
	tsRE    = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	snakeRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// copts configures a contract environment.
type copts struct {
	agents int
	// noAIWG leaves AIWG_SERVE_ENDPOINT unset (integration off).
	noAIWG bool
	env    []string
	// prepare runs on the data dir before agentic-mgmt first starts.
	prepare func(dataDir string)
	// setup runs on the fake before agentic-mgmt starts.
	setup func(*fakeaiwg.Server)
	// noWaitResync skips waiting for the first executor.resync.
	noWaitResync bool
	// endpoint, if set, turns the fake's URL into AIWG_SERVE_ENDPOINT.
	endpoint func(fakeURL string) string
	// lenientOrder relaxes the per-mission order check to what a SIGKILL
	// allows (an event whose state was stored may never be emitted).
	lenientOrder bool
}

// cenv is one contract test's world: a fake aiwg serve and the runs of
// agentic-mgmt on one data dir.
type cenv struct {
	t       *testing.T
	o       copts
	fake    *fakeaiwg.Server
	dataDir string
	tmp     string // scratch dir for objectives (gate files, pid files)

	mu      sync.Mutex
	runs    []*run
	secrets []string // strings no log line and no response may contain
}

// run is one agentic-mgmt process.
type run struct {
	s       *harness.Server
	stopped bool
}

func newContract(t *testing.T, o copts) *cenv {
	t.Helper()
	e := &cenv{t: t, o: o, dataDir: t.TempDir(), tmp: t.TempDir()}
	if o.prepare != nil {
		o.prepare(e.dataDir)
	}
	// Registered first, so it runs last: after every process is gone.
	t.Cleanup(e.finalChecks)
	if !o.noAIWG {
		fake, err := fakeaiwg.Start()
		if err != nil {
			t.Fatal(err)
		}
		e.fake = fake
		t.Cleanup(fake.Close)
		if o.setup != nil {
			o.setup(fake)
		}
	}
	t.Cleanup(func() {
		e.mu.Lock()
		runs := slices.Clone(e.runs)
		e.mu.Unlock()
		for _, r := range runs {
			if !r.stopped {
				r.s.Kill()
				r.stopped = true
			}
		}
		harness.KillHostAgents(e.dataDir)
		if t.Failed() {
			for i, r := range runs {
				t.Logf("agentic-mgmt run %d log:\n%s", i+1, r.s.Log())
			}
			logs, _ := filepath.Glob(filepath.Join(e.dataDir, "host-agents", "*.log"))
			for _, f := range logs {
				b, _ := os.ReadFile(f)
				t.Logf("%s:\n%s", filepath.Base(f), clipTail(string(b), 4000))
			}
		}
	})
	e.start()
	return e
}

func clipTail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// s is the current agentic-mgmt.
func (e *cenv) s() *harness.Server {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[len(e.runs)-1].s
}

// start runs agentic-mgmt (again, on the same data dir and ports) and
// waits for its host agents and, with the integration on, the first resync
// of this run.
func (e *cenv) start() *harness.Server {
	e.t.Helper()
	return e.startWith(true)
}

// startWith is start, waiting for the host agents only if waitAgents
// (after a restart they come back on their own reconnect backoff, ~5 s).
func (e *cenv) startWith(waitAgents bool) *harness.Server {
	e.t.Helper()
	opts := harness.Options{HostAgents: e.o.agents, DataDir: e.dataDir, Env: slices.Clone(e.o.env)}
	if e.fake != nil {
		ep := e.fake.URL()
		if e.o.endpoint != nil {
			ep = e.o.endpoint(ep)
		}
		opts.Env = append(opts.Env, "AIWG_SERVE_ENDPOINT="+ep)
	}
	e.mu.Lock()
	if n := len(e.runs); n > 0 {
		opts.BasePort = e.runs[n-1].s.Opts.BasePort
	}
	e.mu.Unlock()
	conns := 0
	if e.fake != nil {
		conns = e.fake.ExecutorConnections()
	}
	s, err := harness.Start(bins, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.mu.Lock()
	e.runs = append(e.runs, &run{s: s})
	e.secrets = append(e.secrets, s.Token)
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if waitAgents {
		e.waitAgents(patience)
	}
	if e.fake != nil && !e.o.noWaitResync {
		if _, err := e.fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.Conn > conns && f.Event == evResync }); err != nil {
			e.t.Fatalf("no executor.resync from run %d: %v", len(e.runs), err)
		}
	}
	return s
}

// waitAgents waits until every host agent is connected and heartbeating
// (ready, or busy with missions).
func (e *cenv) waitAgents(d time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := ctxFor(patience)
		resp, err := e.op().ListAgentsWithResponse(ctx, nil)
		cancel()
		up := 0
		if err == nil && resp.JSON200 != nil {
			for _, a := range resp.JSON200.Agents {
				if st := string(a.Status); strings.HasPrefix(a.Id, "host-") && (st == "ready" || st == "busy") {
					up++
				}
			}
		}
		if up >= e.o.agents {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("host agents not connected within %v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sigterm stops the current run with SIGTERM and returns its exit error.
func (e *cenv) sigterm() error {
	e.t.Helper()
	return e.stop(syscall.SIGTERM)
}

// stop sends sig to the current run and waits for it to exit (patience at
// most: a run that does not exit fails the test).
func (e *cenv) stop(sig syscall.Signal) error {
	e.t.Helper()
	e.mu.Lock()
	r := e.runs[len(e.runs)-1]
	e.mu.Unlock()
	exitErr, err := r.s.Stop(sig, patience)
	r.stopped = true
	if err != nil {
		e.t.Fatalf("%v\n%s", err, r.s.Log())
	}
	return exitErr
}

// kill stops the current run with SIGKILL.
func (e *cenv) kill() {
	e.mu.Lock()
	r := e.runs[len(e.runs)-1]
	e.mu.Unlock()
	r.s.Kill()
	r.stopped = true
}

func (e *cenv) secretList() []string {
	e.mu.Lock()
	out := slices.Clone(e.secrets)
	e.mu.Unlock()
	if e.fake != nil {
		out = append(out, e.fake.Tokens()...)
	}
	return out
}

// addSecret adds a string (a wrong bearer, say) that must never be logged.
func (e *cenv) addSecret(s string) {
	e.mu.Lock()
	e.secrets = append(e.secrets, s)
	e.mu.Unlock()
}

func (e *cenv) violation(err error) { e.t.Errorf("contract: %v", err) }

// client is a validating REST client of the current run with bearer token
// ("" sends none).
func (e *cenv) client(token string) *restapi.ClientWithResponses {
	return e.s().ContractClient(token, e.violation, e.secretList)
}

// op is the validating REST client of the current run, as the operator.
func (e *cenv) op() *restapi.ClientWithResponses { return e.client(e.s().Token) }

func (e *cenv) identity() string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dataDir, "identity"))
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func ctxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// reply is a REST answer: status, raw body and the body as a JSON object.
type reply struct {
	status int
	raw    []byte
	body   map[string]any
}

func newReply(status int, raw []byte) reply {
	r := reply{status: status, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, clipStr(string(r.raw), 400)) }

func (r reply) code() string { s, _ := r.body["code"].(string); return s }

func clipStr(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// auth says how a dispatch authenticates.
type auth struct {
	none  bool
	token string // "" with none false: the fake's current executor token
}

// dispatchRaw posts body to /api/v1/sessions/{session}/dispatch.
func (e *cenv) dispatchRaw(session string, body []byte, a auth) reply {
	e.t.Helper()
	r, err := e.tryDispatch(session, body, a)
	if err != nil {
		e.t.Fatalf("dispatch: %v", err)
	}
	return r
}

// tryDispatch is dispatchRaw for any goroutine: a failed request is an error.
func (e *cenv) tryDispatch(session string, body []byte, a auth) (reply, error) {
	ctx, cancel := ctxFor(patience)
	defer cancel()
	var editors []restapi.RequestEditorFn
	if !a.none {
		tok := a.token
		if tok == "" && e.fake != nil {
			tok = e.fake.ExecutorToken()
		}
		editors = append(editors, func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+tok)
			return nil
		})
	}
	resp, err := e.client("").DispatchMissionWithBodyWithResponse(ctx, session, "application/json", bytes.NewReader(body), editors...)
	if err != nil {
		return reply{}, err
	}
	return newReply(resp.StatusCode(), resp.Body), nil
}

// dispatch sends {"mission_id", "objective"} (plus extra members) and
// requires a 202.
func (e *cenv) dispatch(missionID, objective string, extra ...any) reply {
	e.t.Helper()
	r := e.dispatchRaw("sess-"+missionID, e.body(missionID, objective, extra...), auth{})
	if r.status != http.StatusAccepted {
		e.t.Fatalf("dispatch %s: %s", missionID, r)
	}
	return r
}

// body is a dispatch body; extra is key, value, key, value, ….
func (e *cenv) body(missionID, objective string, extra ...any) []byte {
	m := map[string]any{"mission_id": missionID, "objective": objective}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// waitEvent waits for the first frame of mission with event ev.
func (e *cenv) waitEvent(missionID, ev string, d time.Duration) fakeaiwg.Frame {
	e.t.Helper()
	ctx, cancel := ctxFor(d)
	defer cancel()
	f, err := e.fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.MissionID == missionID && f.Event == ev })
	if err != nil {
		e.t.Fatalf("no %s for %s within %v; its events: %v", ev, missionID, d, evNames(e.events(missionID)))
	}
	return f
}

func isTerminal(ev string) bool { return ev == evCompleted || ev == evFailed || ev == evAborted }

// waitEnd waits for the mission's terminal event.
func (e *cenv) waitEnd(missionID string, d time.Duration) fakeaiwg.Frame {
	e.t.Helper()
	ctx, cancel := ctxFor(d)
	defer cancel()
	f, err := e.fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.MissionID == missionID && isTerminal(f.Event) })
	if err != nil {
		e.t.Fatalf("%s did not end within %v; its events: %v", missionID, d, evNames(e.events(missionID)))
	}
	return f
}

// waitConnFirst waits for the first frame of an executor connection
// numbered above after.
func (e *cenv) waitConnFirst(after int, d time.Duration) fakeaiwg.Frame {
	e.t.Helper()
	ctx, cancel := ctxFor(d)
	defer cancel()
	f, err := e.fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.Conn > after })
	if err != nil {
		e.t.Fatalf("no frame on a new executor connection (after #%d) within %v", after, d)
	}
	return f
}

// dedupe drops frames byte-identical to an earlier one: delivery is
// at-least-once, so a frame sent again after a reconnect is the same frame.
func dedupe(fs []fakeaiwg.Frame) []fakeaiwg.Frame {
	seen := map[string]bool{}
	var out []fakeaiwg.Frame
	for _, f := range fs {
		if seen[string(f.Raw)] {
			continue
		}
		seen[string(f.Raw)] = true
		out = append(out, f)
	}
	return out
}

// events are the mission's frames, in arrival order, without repeats.
func (e *cenv) events(missionID string) []fakeaiwg.Frame {
	var out []fakeaiwg.Frame
	for _, f := range e.fake.Frames() {
		if f.MissionID == missionID && f.Event != evResync {
			out = append(out, f)
		}
	}
	return dedupe(out)
}

func evNames(fs []fakeaiwg.Frame) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = strings.TrimPrefix(f.Event, "mission.")
	}
	return out
}

func countEv(fs []fakeaiwg.Frame, ev string) int {
	n := 0
	for _, f := range fs {
		if f.Event == ev {
			n++
		}
	}
	return n
}

func onlyEv(fs []fakeaiwg.Frame, ev string) []fakeaiwg.Frame {
	var out []fakeaiwg.Frame
	for _, f := range fs {
		if f.Event == ev {
			out = append(out, f)
		}
	}
	return out
}

func indexOf(fs []fakeaiwg.Frame, ev string) int {
	for i, f := range fs {
		if f.Event == ev {
			return i
		}
	}
	return -1
}

// eventually polls cond every 20 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mission GETs /api/v1/missions/{id} as the operator.
func (e *cenv) mission(id string) (restapi.Mission, reply) {
	e.t.Helper()
	ctx, cancel := ctxFor(patience)
	defer cancel()
	resp, err := e.op().GetMissionWithResponse(ctx, id)
	if err != nil {
		e.t.Fatalf("get mission %s: %v", id, err)
	}
	r := newReply(resp.StatusCode(), resp.Body)
	if resp.JSON200 == nil {
		return restapi.Mission{}, r
	}
	return *resp.JSON200, r
}

// missionState is the state GET /api/v1/missions/{id} shows ("" if none).
func (e *cenv) missionState(id string) string {
	m, _ := e.mission(id)
	return string(m.State)
}

// gate is a file an objective waits for: `while [ ! -e F ]; do sleep 0.05; done`.
func (e *cenv) gate(name string) (path, wait string) {
	path = filepath.Join(e.tmp, name)
	return path, fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done", path)
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// platformCap is the platform capability this host must advertise.
func platformCap() string {
	arch := runtime.GOARCH
	switch arch {
	case "amd64":
		arch = "x64"
	case "386":
		arch = "ia32"
	}
	return "platform:linux/" + arch
}

// keys returns the sorted keys of m.
func ckeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// sameKeys reports whether m has exactly want's keys.
func sameKeys[V any](m map[string]V, want ...string) bool {
	sort.Strings(want)
	return slices.Equal(ckeys(m), want)
}

// intValue reads a JSON number that must be an integer.
func intValue(v any) (int, bool) {
	f, ok := v.(float64)
	if !ok || f != float64(int(f)) {
		return 0, false
	}
	return int(f), true
}

func nonEmptyString(v any) bool { s, ok := v.(string); return ok && s != "" }

// checkEnvelope checks one executor stream frame's envelope: exactly event,
// executor_id, mission_id (absent only on executor.resync), ts (RFC 3339,
// UTC, milliseconds) and data (an object).
func checkEnvelope(f fakeaiwg.Frame, executorID string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(f.Raw, &m); err != nil {
		return fmt.Errorf("frame is not a JSON object: %v: %s", err, f.Raw)
	}
	want := []string{"data", "event", "executor_id", "ts"}
	if f.Event != evResync {
		want = append(want, "mission_id")
	}
	if !sameKeys(m, want...) {
		return fmt.Errorf("envelope keys %v, want %v: %s", ckeys(m), want, f.Raw)
	}
	if f.Event == "" {
		return fmt.Errorf("no event name: %s", f.Raw)
	}
	if f.ExecutorID != executorID {
		return fmt.Errorf("executor_id %q, want %q: %s", f.ExecutorID, executorID, f.Raw)
	}
	if f.Event == evResync {
		if f.HasMissionID {
			return fmt.Errorf("executor.resync carries a mission_id: %s", f.Raw)
		}
	} else if f.MissionID == "" {
		return fmt.Errorf("mission_id missing or not a non-empty string: %s", f.Raw)
	}
	if !tsRE.MatchString(f.TS) {
		return fmt.Errorf("ts %q is not RFC 3339 UTC with exactly milliseconds: %s", f.TS, f.Raw)
	}
	if _, err := time.Parse(time.RFC3339, f.TS); err != nil {
		return fmt.Errorf("ts %q: %v", f.TS, err)
	}
	if f.Data == nil || !bytes.HasPrefix(bytes.TrimSpace(m["data"]), []byte("{")) {
		return fmt.Errorf("data is not an object: %s", f.Raw)
	}
	return nil
}

// checkData checks an event's data against the contract's table.
func checkData(f fakeaiwg.Frame) error {
	d := f.Data
	bad := func(why string) error { return fmt.Errorf("%s data %s: %s", f.Event, why, f.Raw) }
	state := func(want string) bool { return d["state"] == want }
	switch f.Event {
	case evResync:
		ids, ok := d["owned_mission_ids"].([]any)
		if !sameKeys(d, "owned_mission_ids", "protocol_version") || !ok || d["protocol_version"] != "1.0.0" {
			return bad(`is not exactly {owned_mission_ids: [...], protocol_version: "1.0.0"}`)
		}
		for _, id := range ids {
			if !nonEmptyString(id) {
				return bad("owned_mission_ids holds a non-string")
			}
		}
	case evAssigned:
		es, _ := d["estimated_start"].(string)
		if !sameKeys(d, "state", "estimated_start") || !state("assigned") || !tsRE.MatchString(es) {
			return bad(`is not exactly {state: "assigned", estimated_start: <ts>}`)
		}
	case evStarted:
		if !sameKeys(d, "state", "agent_runtime", "pty_session_id") || !state("running") ||
			!nonEmptyString(d["agent_runtime"]) || !nonEmptyString(d["pty_session_id"]) {
			return bad(`is not exactly {state: "running", agent_runtime, pty_session_id}`)
		}
	case evProgress:
		it, ok := intValue(d["iteration"])
		if _, isStr := d["summary"].(string); !sameKeys(d, "phase", "summary", "iteration") || d["phase"] != "execution" || !isStr || !ok || it < 1 {
			return bad(`is not exactly {phase: "execution", summary, iteration >= 1}`)
		}
	case evHITLRequired:
		if _, ok := d["context"].(string); !sameKeys(d, "hitl_id", "prompt", "context") || !nonEmptyString(d["hitl_id"]) || !nonEmptyString(d["prompt"]) || !ok {
			return bad("is not exactly {hitl_id, prompt, context}")
		}
	case evResumed:
		if !sameKeys(d, "state", "resumed_from") || !state("running") || (d["resumed_from"] != "hitl_required" && d["resumed_from"] != "suspended") {
			return bad(`is not exactly {state: "running", resumed_from: "hitl_required"|"suspended"}`)
		}
	case evSuspended:
		if !sameKeys(d, "state", "checkpoint_id", "reason") || !state("suspended") || !nonEmptyString(d["checkpoint_id"]) || d["reason"] != "mgmt_server_shutdown" {
			return bad(`is not exactly {state: "suspended", checkpoint_id, reason: "mgmt_server_shutdown"}`)
		}
	case evReconnected:
		if !sameKeys(d, "checkpoint_id") || !nonEmptyString(d["checkpoint_id"]) {
			return bad("is not exactly {checkpoint_id}")
		}
	case evCompleted:
		code, ok := intValue(d["exit_code"])
		if _, isStr := d["summary"].(string); !sameKeys(d, "state", "exit_code", "summary") || !state("done") || !ok || code != 0 || !isStr {
			return bad(`is not exactly {state: "done", exit_code: 0, summary}`)
		}
		if s, _ := d["summary"].(string); len(s) > 2048 || strings.Contains(s, "\x1b") {
			return bad("summary longer than 2 KiB or not ANSI-stripped")
		}
	case evFailed:
		// exit_code is optional; summary is not in the contract's table
		// but is tolerated (the tail of the output, as for completed).
		for _, k := range ckeys(d) {
			if !slices.Contains([]string{"state", "reason", "error", "exit_code", "summary"}, k) {
				return bad("has the unknown member " + k)
			}
		}
		reason, _ := d["reason"].(string)
		if !state("failed") || !snakeRE.MatchString(reason) || !nonEmptyString(d["error"]) {
			return bad(`lacks {state: "failed", reason: <snake_case>, error}`)
		}
		if v, has := d["exit_code"]; has {
			if _, ok := intValue(v); !ok {
				return bad("exit_code is not an integer")
			}
		}
		if v, has := d["summary"]; has {
			if s, ok := v.(string); !ok || len(s) > 2048 || strings.Contains(s, "\x1b") {
				return bad("summary is not a string of at most 2 KiB without ANSI")
			}
		}
	case evAborted:
		if !sameKeys(d, "state", "aborted_by", "reason") || !state("aborted") || d["aborted_by"] != "operator" || !nonEmptyString(d["reason"]) {
			return bad(`is not exactly {state: "aborted", aborted_by: "operator", reason}`)
		}
	default:
		return bad("unknown event")
	}
	return nil
}

// eventRank orders events by the mission state they report.
func eventRank(ev string) int {
	switch ev {
	case evAssigned:
		return 0
	case evCompleted, evFailed, evAborted:
		return 2
	default:
		return 1
	}
}

// stateRank orders mission states like eventRank.
func stateRank(st string) int {
	switch st {
	case "assigned":
		return 0
	case "completed", "failed", "aborted":
		return 2
	default:
		return 1
	}
}

// stateOfEnd is the mission state a terminal event reports.
func stateOfEnd(ev string) string {
	return map[string]string{evCompleted: "completed", evFailed: "failed", evAborted: "aborted"}[ev]
}

// checkOrder checks one mission's events (deduplicated, in arrival order)
// against the lifecycle: assigned first and once, started at most once and
// before what needs a running process, iterations counting up by one,
// nothing after the terminal event. lenient (after SIGKILLs: a state
// stored just before the kill may never have had its event emitted) only
// asks assigned at most first, nothing after the end, and no state going
// back.
func checkOrder(fs []fakeaiwg.Frame, lenient bool) error {
	if len(fs) == 0 {
		return nil
	}
	if fs[0].Event != evAssigned && !lenient {
		return fmt.Errorf("first event is %s, not mission.assigned", fs[0].Event)
	}
	started, ended, iter, rank := false, false, 0, 0
	for i, f := range fs {
		if ended {
			return fmt.Errorf("%s after the terminal event (#%d)", f.Event, i)
		}
		if r := eventRank(f.Event); r < rank {
			return fmt.Errorf("%s (#%d) goes back to an earlier state", f.Event, i)
		} else {
			rank = r
		}
		switch f.Event {
		case evAssigned:
			if i != 0 {
				return fmt.Errorf("mission.assigned again (#%d)", i)
			}
		case evStarted:
			if started {
				return fmt.Errorf("mission.started twice (#%d)", i)
			}
			started = true
		case evProgress, evHITLRequired, evCompleted:
			if !started && !lenient {
				return fmt.Errorf("%s (#%d) before mission.started", f.Event, i)
			}
			if f.Event == evProgress {
				it, _ := intValue(f.Data["iteration"])
				if !lenient && it != iter+1 || lenient && it <= iter {
					return fmt.Errorf("progress iteration %d after %d (#%d)", it, iter, i)
				}
				iter = it
			}
		}
		ended = isTerminal(f.Event)
	}
	return nil
}

// finalChecks run after every process of the test is gone.
func (e *cenv) finalChecks() {
	t := e.t
	// Tokens never appear in a log line.
	e.mu.Lock()
	runs := slices.Clone(e.runs)
	e.mu.Unlock()
	secrets := e.secretList()
	logs := map[string]string{}
	for i, r := range runs {
		logs[fmt.Sprintf("agentic-mgmt run %d", i+1)] = r.s.Log()
	}
	files, _ := filepath.Glob(filepath.Join(e.dataDir, "host-agents", "*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		logs[filepath.Base(f)] = string(b)
	}
	for name, log := range logs {
		for _, sec := range secrets {
			if sec == "" {
				continue
			}
			for _, line := range strings.Split(log, "\n") {
				if strings.Contains(line, sec) {
					t.Errorf("a token (%s…) appears in the %s: %s", sec[:min(6, len(sec))], name, line)
				}
			}
		}
	}
	if e.fake == nil {
		return
	}
	// Every frame: envelope and data; every connection: resync first;
	// every mission: its events in lifecycle order.
	frames := e.fake.Frames()
	id := ""
	if b, err := os.ReadFile(filepath.Join(e.dataDir, "identity")); err == nil {
		id = strings.TrimSpace(string(b))
	}
	firstOf := map[int]bool{}
	bad := 0
	for _, f := range frames {
		var err error
		if !firstOf[f.Conn] {
			firstOf[f.Conn] = true
			if f.Event != evResync {
				err = fmt.Errorf("first frame of executor connection #%d is %s, not executor.resync: %s", f.Conn, f.Event, f.Raw)
			}
		}
		if err == nil {
			err = checkEnvelope(f, id)
		}
		if err == nil {
			err = checkData(f)
		}
		if err != nil {
			if bad++; bad <= 10 {
				t.Errorf("executor stream: %v", err)
			}
		}
	}
	byMission := map[string][]fakeaiwg.Frame{}
	var order []string
	for _, f := range dedupe(frames) {
		if f.Event == evResync {
			continue
		}
		if _, ok := byMission[f.MissionID]; !ok {
			order = append(order, f.MissionID)
		}
		byMission[f.MissionID] = append(byMission[f.MissionID], f)
	}
	for _, m := range order {
		if err := checkOrder(byMission[m], e.o.lenientOrder); err != nil {
			t.Errorf("mission %s: events %v: %v", m, evNames(byMission[m]), err)
		}
	}
}

var regexpUUIDv7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// aiwgStatus GETs /api/v1/aiwg/status as the operator and requires a 200.
func (e *cenv) aiwgStatus() reply {
	e.t.Helper()
	ctx, cancel := ctxFor(patience)
	defer cancel()
	resp, err := e.op().GetAIWGStatusWithResponse(ctx)
	if err != nil {
		e.t.Fatalf("aiwg status: %v", err)
	}
	r := newReply(resp.StatusCode(), resp.Body)
	if r.status != http.StatusOK {
		e.t.Fatalf("aiwg status: %s", r)
	}
	return r
}

// reconnect POSTs /api/v1/aiwg/reconnect as the operator.
func (e *cenv) reconnect() reply {
	e.t.Helper()
	ctx, cancel := ctxFor(patience)
	defer cancel()
	resp, err := e.op().ReconnectAIWGWithResponse(ctx)
	if err != nil {
		e.t.Fatalf("aiwg reconnect: %v", err)
	}
	return newReply(resp.StatusCode(), resp.Body)
}

// killSession DELETEs /api/v1/sessions/{id} as the operator.
func (e *cenv) killSession(id string) reply {
	e.t.Helper()
	ctx, cancel := ctxFor(patience)
	defer cancel()
	resp, err := e.op().KillSessionWithResponse(ctx, id)
	if err != nil {
		e.t.Fatalf("kill session %s: %v", id, err)
	}
	return newReply(resp.StatusCode(), resp.Body)
}
