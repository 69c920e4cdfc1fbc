package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
)

// expectError checks a refused dispatch: its status, and its code when one
// is given (any of codes).
func expectError(t *testing.T, what string, r reply, status int, codes ...string) {
	t.Helper()
	if r.status != status {
		t.Errorf("%s: got %s, want %d %v", what, r, status, codes)
		return
	}
	if !sameKeys(r.body, "error", "code") || !nonEmptyString(r.body["error"]) {
		t.Errorf("%s: error body %s is not {error, code}", what, r.raw)
	}
	if len(codes) > 0 && !slices.Contains(codes, r.code()) {
		t.Errorf("%s: code %q, want one of %v", what, r.code(), codes)
	}
}

// TestContractDispatchStatusCodes: every status of POST
// /api/v1/sessions/{id}/dispatch, on the server states that cause them.
func TestContractDispatchStatusCodes(t *testing.T) {
	t.Parallel()
	good := func(id string) []byte { return []byte(fmt.Sprintf(`{"mission_id":%q,"objective":"true"}`, id)) }

	t.Run("503 integration not configured", func(t *testing.T) {
		t.Parallel()
		e := newContract(t, copts{agents: 1, noAIWG: true})
		expectError(t, "with a bearer", e.dispatchRaw("s1", good("m-off"), auth{token: "some-token"}), 503, "integration_disabled")
		expectError(t, "without a bearer", e.dispatchRaw("s1", good("m-off"), auth{none: true}), 503, "integration_disabled")
	})

	t.Run("503 executor not registered", func(t *testing.T) {
		t.Parallel()
		e := newContract(t, copts{agents: 1, noWaitResync: true, setup: func(f *fakeaiwg.Server) { f.SetExecutorRegisterStatus(404) }})
		eventually(t, patience, "executor registration attempted", func() bool { return len(e.fake.ExecutorRegistrations()) > 0 })
		e.addSecret("guessed-token")
		expectError(t, "with a bearer", e.dispatchRaw("s1", good("m-unreg"), auth{token: "guessed-token"}), 503, "executor_not_registered")
		expectError(t, "without a bearer", e.dispatchRaw("s1", good("m-unreg"), auth{none: true}), 503, "executor_not_registered")
	})

	t.Run("503 no agent connected", func(t *testing.T) {
		t.Parallel()
		e := newContract(t, copts{agents: 0})
		expectError(t, "no agent", e.dispatchRaw("s1", good("m-noagent"), auth{}), 503, "no_agent")
		// Honest capabilities: no runtime is configured, so no isolation tier.
		for _, reg := range e.fake.ExecutorRegistrations() {
			caps, _ := reg["capabilities"].([]any)
			var got []string
			for _, c := range caps {
				got = append(got, c.(string))
			}
			for _, c := range got {
				if strings.HasPrefix(c, "isolation:") {
					t.Errorf("capabilities %v claim %s with no agent and no host supervisor", got, c)
				}
			}
			for _, want := range []string{platformCap(), "resumable", "hitl"} {
				if !slices.Contains(got, want) {
					t.Errorf("capabilities %v lack %s", got, want)
				}
			}
		}
		if _, r := e.mission("m-noagent"); r.status != 404 {
			t.Errorf("a refused mission is on record: %s", r)
		}
		// Refused, the mission_id stays free: once an agent is there, it is accepted.
	})

	t.Run("connected executor", func(t *testing.T) {
		t.Parallel()
		e := newContract(t, copts{agents: 1})
		tok := e.fake.ExecutorToken()
		wrong := tok[:len(tok)-1] + string("0123456789abcdef"[(strings.IndexByte("0123456789abcdef", tok[len(tok)-1])+1)%16])
		e.addSecret(wrong)

		expectError(t, "401 missing bearer", e.dispatchRaw("s1", good("m-a"), auth{none: true}), 401, "unauthorized")
		expectError(t, "401 wrong bearer", e.dispatchRaw("s1", good("m-a"), auth{token: wrong}), 401, "unauthorized")
		expectError(t, "401 operator token instead of the executor token", e.dispatchRaw("s1", good("m-a"), auth{token: e.s().Token}), 401, "unauthorized")
		expectError(t, "401 token prefix", e.dispatchRaw("s1", good("m-a"), auth{token: tok[:8]}), 401, "unauthorized")
		// The bearer is checked before the body.
		expectError(t, "401 before 400", e.dispatchRaw("s1", []byte(`{"mission_id":`), auth{none: true}), 401, "unauthorized")

		expectError(t, "400 malformed JSON", e.dispatchRaw("s1", []byte(`{"mission_id": "m-a", "objective": "true"`), auth{}), 400, "invalid_json", "invalid_request")
		expectError(t, "400 not an object", e.dispatchRaw("s1", []byte(`["m-a", "true"]`), auth{}), 400, "invalid_json", "invalid_request")
		expectError(t, "400 empty body", e.dispatchRaw("s1", nil, auth{}), 400, "invalid_json", "invalid_request")
		expectError(t, "400 missing mission_id", e.dispatchRaw("s1", []byte(`{"objective":"true"}`), auth{}), 400, "invalid_request", "invalid_json")
		expectError(t, "400 missing objective", e.dispatchRaw("s1", []byte(`{"mission_id":"m-a"}`), auth{}), 400, "invalid_request", "invalid_json")
		expectError(t, "400 mission_id over 256 characters", e.dispatchRaw("s1", e.body(strings.Repeat("m", 257), "true"), auth{}), 400, "invalid_request", "invalid_json")
		expectError(t, "400 objective not a string", e.dispatchRaw("s1", []byte(`{"mission_id":"m-a","objective":["true"]}`), auth{}), 400, "invalid_request", "invalid_json")
		expectError(t, "400 empty objective", e.dispatchRaw("s1", []byte(`{"mission_id":"m-a","objective":""}`), auth{}), 400, "invalid_request", "invalid_json")

		huge := []byte(`{"mission_id":"m-huge","objective":"` + strings.Repeat("a", 1<<20+100) + `"}`)
		expectError(t, "413 body over 1 MiB", e.dispatchRaw("s1", huge, auth{}), 413, "body_too_large")
		expectError(t, "401 before 413", e.dispatchRaw("s1", huge, auth{none: true}), 401, "unauthorized")

		expectError(t, "404 agent not connected",
			e.dispatchRaw("s1", e.body("m-a", "true", "executor_filter", map[string]any{"agent_id": "host-99"}), auth{}), 404, "agent_not_connected", "agent_not_found")
		expectError(t, "503 no agent with the capabilities",
			e.dispatchRaw("s1", e.body("m-a", "true", "executor_filter", map[string]any{"capabilities": []string{"isolation:vm"}}), auth{}), 503, "no_agent")
		for _, id := range []string{"m-a", "m-huge"} {
			if _, r := e.mission(id); r.status != 404 {
				t.Errorf("refused dispatch left mission %s on record: %s", id, r)
			}
		}

		// 202: exactly {mission_id, executor_id, status: "assigned", estimated_start}.
		r := e.dispatchRaw("s1", e.body("m-a", "echo accepted", "executor_filter", map[string]any{"agent_id": "host-01", "capabilities": []string{"isolation:host"}}), auth{})
		if r.status != 202 {
			t.Fatalf("dispatch: %s", r)
		}
		if !sameKeys(r.body, "mission_id", "executor_id", "status", "estimated_start") || r.body["mission_id"] != "m-a" ||
			r.body["executor_id"] != e.identity() || r.body["status"] != "assigned" {
			t.Errorf("202 body %s", r.raw)
		}
		if es, _ := r.body["estimated_start"].(string); !tsRE.MatchString(es) {
			t.Errorf("estimated_start %q is not RFC 3339 UTC with milliseconds", es)
		}
		if end := e.waitEnd("m-a", patience); end.Event != evCompleted {
			t.Errorf("m-a ended %s %v", end.Event, end.Data)
		}
	})
}

// TestContractIdempotentDispatch: the same mission_id with the same body is
// answered 202 with the same answer, and nothing runs twice; with another
// body it is 409.
func TestContractIdempotentDispatch(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1})
	file := filepath.Join(e.tmp, "idem.txt")
	gatePath, wait := e.gate("idem-go")
	objective := fmt.Sprintf("echo ran >> %s; %s; echo idem-done", file, wait)
	body := e.body("m-idem", objective, "metadata", map[string]any{"n": 1, "tags": []string{"a", "b"}})

	// The first dispatch, three times at once.
	var wg sync.WaitGroup
	firsts := make([]reply, 3)
	for i := range firsts {
		wg.Go(func() { firsts[i] = e.dispatchRaw("sess-idem", body, auth{}) })
	}
	wg.Wait()
	first := firsts[0]
	if first.status != 202 {
		t.Fatalf("first dispatch: %s", first)
	}
	for i, r := range firsts[1:] {
		if r.status != 202 || string(r.raw) != string(first.raw) {
			t.Errorf("simultaneous first dispatch %d: %s, want %s", i+1, r, first.raw)
		}
	}
	// Concurrent repeats while it runs.
	repeats := make([]reply, 4)
	for i := range repeats {
		wg.Go(func() { repeats[i] = e.dispatchRaw("sess-idem", body, auth{}) })
	}
	wg.Wait()
	for i, r := range repeats {
		if r.status != 202 || string(r.raw) != string(first.raw) {
			t.Errorf("repeat %d while running: %s, want the first answer %s", i, r, first.raw)
		}
	}
	e.waitEvent("m-idem", evStarted, patience)
	// Member order and spacing do not make another body.
	obj, _ := json.Marshal(objective)
	reordered := fmt.Sprintf(`{ "objective" : %s,
		"metadata": {"n": 1, "tags": ["a","b"]}, "mission_id": "m-idem" }`, obj)
	if r := e.dispatchRaw("sess-idem", []byte(reordered), auth{}); r.status != 202 || string(r.raw) != string(first.raw) {
		t.Errorf("same body with other member order and spacing: %s, want %s", r, first.raw)
	}

	touch(t, gatePath)
	end := e.waitEnd("m-idem", patience)
	if end.Event != evCompleted {
		t.Fatalf("m-idem ended %s %v", end.Event, end.Data)
	}
	// After the end: still the same answer, still nothing started.
	if r := e.dispatchRaw("sess-idem", body, auth{}); r.status != 202 || string(r.raw) != string(first.raw) {
		t.Errorf("repeat after the end: %s, want %s", r, first.raw)
	}

	// Different bodies under the same mission_id: 409.
	for what, b := range map[string][]byte{
		"another objective": e.body("m-idem", "echo something else"),
		"another metadata":  e.body("m-idem", objective, "metadata", map[string]any{"n": 2, "tags": []string{"a", "b"}}),
		"no metadata":       e.body("m-idem", objective),
	} {
		expectError(t, "409 "+what, e.dispatchRaw("sess-idem", b, auth{}), 409, "mission_conflict")
	}
	expectError(t, "409 same body, another session", e.dispatchRaw("sess-other", body, auth{}), 409, "mission_conflict")
	// A known mission_id is judged before routing: 409, not 404.
	expectError(t, "409 before 404", e.dispatchRaw("sess-idem", e.body("m-idem", objective, "executor_filter", map[string]any{"agent_id": "host-99"}), auth{}), 409, "mission_conflict")

	// A barrier: a later mission ends, so a second start would have shown.
	e.dispatch("m-idem-barrier", "true")
	e.waitEnd("m-idem-barrier", patience)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "ran\n" {
		t.Errorf("the objective ran %d times: %q", strings.Count(string(b), "ran"), b)
	}
	fs := e.events("m-idem")
	if countEv(fs, evAssigned) != 1 || countEv(fs, evStarted) != 1 || countEv(fs, evCompleted) != 1 {
		t.Errorf("events %v, want one assigned, one started, one completed", evNames(fs))
	}
	m, r := e.mission("m-idem")
	if r.status != 200 || m.State != "completed" {
		t.Errorf("mission: %s", r)
	}
	if m.Metadata == nil || (*m.Metadata)["n"] != float64(1) {
		t.Errorf("metadata not kept as sent: %v", m.Metadata)
	}
}
