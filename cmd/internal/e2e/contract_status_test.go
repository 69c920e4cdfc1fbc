package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// TestContractIntegrationOff: without AIWG_SERVE_ENDPOINT the status is
// exactly {"configured": false}, dispatch and reconnect are 503, and the
// mission and HITL lists are empty.
func TestContractIntegrationOff(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1, noAIWG: true})
	st := e.aiwgStatus()
	var exact map[string]json.RawMessage
	if err := json.Unmarshal(st.raw, &exact); err != nil || len(exact) != 1 || string(exact["configured"]) != "false" {
		t.Errorf(`status %s, want exactly {"configured": false}`, st.raw)
	}
	expectError(t, "dispatch", e.dispatchRaw("s1", []byte(`{"mission_id":"m-off","objective":"true"}`), auth{token: "x"}), 503, "integration_disabled")
	r := e.reconnect()
	expectError(t, "reconnect", r, 503, "integration_disabled")

	ctx, cancel := ctxFor(patience)
	defer cancel()
	ms, err := e.op().ListMissionsWithResponse(ctx, nil)
	if err != nil || ms.JSON200 == nil || len(ms.JSON200.Missions) != 0 || !strings.Contains(string(ms.Body), `"missions":[]`) {
		t.Errorf("missions: %v %s", err, ms.Body)
	}
	hs, err := e.op().ListHITLWithResponse(ctx, nil)
	if err != nil || hs.JSON200 == nil || len(hs.JSON200.Requests) != 0 {
		t.Errorf("hitl: %v %s", err, hs.Body)
	}
	// The published contract is what the server serves.
	spec, err := http.Get(e.s().RESTURL + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(spec.Body)
	spec.Body.Close()
	if !bytes.Equal(served, restapi.Spec) {
		t.Errorf("GET /openapi.yaml (%d bytes) is not the openapi.yaml the client was generated from (%d bytes)", len(served), len(restapi.Spec))
	}
	// The rest of the server works.
	ex, err := e.op().ExecCommandWithResponse(ctx, "host-01", restapi.ExecRequest{Command: "echo", Args: &[]string{"still serving"}})
	if err != nil || ex.JSON200 == nil || ex.JSON200.Stdout != "still serving\n" {
		t.Errorf("exec: %v %s", err, ex.Body)
	}
}

// TestContractExecutorRegistrationRefused: aiwg serve answers 404 to the
// executor registration. The status says so (configured, an
// executor_register_error, no token anywhere), the sandbox side registers
// and connects anyway, dispatch is 503, the server keeps serving, the
// registration is retried, and once aiwg serve accepts it the executor
// connects and the error clears.
func TestContractExecutorRegistrationRefused(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1, noWaitResync: true, setup: func(f *fakeaiwg.Server) { f.SetExecutorRegisterStatus(404) }})
	id := e.identity()
	eventually(t, patience, "sandbox registered and its stream open", func() bool {
		return len(e.fake.SandboxRegistrations()) > 0 && e.fake.SandboxStreamConnected()
	})
	eventually(t, patience, "executor registration attempted and refused", func() bool {
		st := e.aiwgStatus()
		return nonEmptyString(st.body["executor_register_error"])
	})
	st := e.aiwgStatus()
	if st.body["configured"] != true || st.body["connected"] == true || st.body["sandbox_id"] != "sbx-"+id || st.body["endpoint"] != e.fake.URL() {
		t.Errorf("status %s", st.raw)
	}
	if v, has := st.body["executor_id"]; has && v != "" && v != id {
		t.Errorf("status executor_id %v", v)
	}
	if msg, _ := st.body["executor_register_error"].(string); !strings.Contains(msg, "404") {
		t.Errorf("executor_register_error %q does not say what aiwg serve answered", msg)
	}
	for _, tok := range e.fake.Tokens() {
		if strings.Contains(string(st.raw), tok) {
			t.Errorf("status quotes a token: %s", st.raw)
		}
	}
	if strings.Contains(strings.ToLower(string(st.raw)), "token=") {
		t.Errorf("status shows a token parameter: %s", st.raw)
	}

	// The default display name, and endpoints on the listen host.
	sbx := e.fake.SandboxRegistrations()[0]
	if sbx["name"] != "agentic-sandbox" || !strings.HasPrefix(sbx["http_endpoint"].(string), "http://127.0.0.1:") {
		t.Errorf("sandbox registration %v", sbx)
	}
	if x := e.fake.ExecutorRegistrations()[0]; x["name"] != "agentic-sandbox-agentic-sandbox" || x["executor_id"] != id {
		t.Errorf("executor registration %v", x)
	}

	expectError(t, "dispatch", e.dispatchRaw("s1", []byte(`{"mission_id":"m-unreg","objective":"true"}`), auth{token: "x"}), 503, "executor_not_registered")
	ctx, cancel := ctxFor(patience)
	defer cancel()
	ex, err := e.op().ExecCommandWithResponse(ctx, "host-01", restapi.ExecRequest{Command: "sh", Args: &[]string{"-c", "echo works; exit 3"}})
	if err != nil || ex.JSON200 == nil || ex.JSON200.Stdout != "works\n" || ex.JSON200.ExitCode != 3 {
		t.Errorf("exec through REST: %v %s", err, ex.Body)
	}
	// Retried later (1 s, then 2 s).
	eventually(t, patience, "executor registration retried", func() bool { return len(e.fake.ExecutorRegistrations()) >= 2 })
	if e.fake.ExecutorConnections() != 0 {
		t.Errorf("an executor stream was opened without a registration")
	}

	// aiwg serve learns the executor API: the next attempt (sped up by
	// POST /api/v1/aiwg/reconnect) registers, connects and resyncs.
	e.fake.SetExecutorRegisterStatus(0)
	if r := e.reconnect(); r.status != 202 {
		t.Fatalf("reconnect: %s", r)
	}
	first := e.waitConnFirst(0, patience)
	if first.Event != evResync {
		t.Errorf("first frame: %s", first.Raw)
	}
	eventually(t, patience, "status connected, error cleared", func() bool {
		st := e.aiwgStatus()
		v, has := st.body["executor_register_error"]
		return st.body["connected"] == true && (!has || v == nil)
	})
	e.dispatch("m-after-404", "echo registered at last")
	if end := e.waitEnd("m-after-404", patience); end.Event != evCompleted {
		t.Errorf("mission after registration: %s %v", end.Event, end.Data)
	}
}

// TestContractTokensNeverInLogs runs what handles tokens the most (both
// registrations again and again, streams refused with 401, dropped, cut,
// dispatches with wrong and right bearers, a shutdown) and then looks for
// every token issued, the operator token and the wrong bearers in every
// log line of agentic-mgmt and of its host agents (the same check runs
// after every contract test).
func TestContractTokensNeverInLogs(t *testing.T) {
	t.Parallel()
	// The endpoint carries credentials (sent as basic auth): a secret too.
	e := newContract(t, copts{agents: 1, endpoint: func(u string) string {
		return strings.Replace(u, "http://", "http://aiwg-user:pw-9d8c7b6a5f@", 1)
	}})
	e.addSecret("pw-9d8c7b6a5f")
	if st := e.aiwgStatus(); st.body["endpoint"] == nil || strings.Contains(string(st.raw), "pw-9d8c7b6a5f") {
		t.Errorf("status shows the endpoint's password: %s", st.raw)
	}
	tok := e.fake.ExecutorToken()
	wrong := "not-" + tok
	e.addSecret(wrong)
	expectError(t, "wrong bearer", e.dispatchRaw("s1", []byte(`{"mission_id":"m-tok","objective":"true"}`), auth{token: wrong}), 401, "unauthorized")
	e.dispatch("m-tok", "echo ok")
	e.waitEnd("m-tok", patience)

	// The executor stream's token is refused: the client registers again
	// and gets a new token.
	regs := len(e.fake.ExecutorRegistrations())
	e.fake.SetExecutorStreamStatus(401)
	e.fake.KillExecutorStream()
	eventually(t, patience, "registered again after a 401", func() bool { return len(e.fake.ExecutorRegistrations()) >= regs+2 })
	e.fake.SetExecutorStreamStatus(0)
	n := e.fake.ExecutorConnections()
	e.reconnect()
	e.waitConnFirst(n, patience)
	e.fake.DropSandboxStream()
	eventually(t, patience, "sandbox stream back", func() bool { return e.fake.SandboxStreamConnected() })
	n = e.fake.ExecutorConnections()
	e.fake.DropExecutorStream()
	e.waitConnFirst(n, patience)
	if tok2 := e.fake.ExecutorToken(); tok2 == tok {
		t.Errorf("no new executor token was issued")
	}
	// The old token no longer dispatches; the new one does.
	expectError(t, "old token", e.dispatchRaw("s1", []byte(`{"mission_id":"m-tok2","objective":"true"}`), auth{token: tok}), 401, "unauthorized")
	e.dispatch("m-tok2", "true")
	e.waitEnd("m-tok2", patience)
	st := e.aiwgStatus()
	for _, s := range e.secretList() {
		if strings.Contains(string(st.raw), s) {
			t.Errorf("status quotes a token: %s", st.raw)
		}
	}
	if exitErr := e.sigterm(); exitErr != nil {
		t.Errorf("SIGTERM: %v", exitErr)
	}
	if len(e.fake.Tokens()) < 4 {
		t.Errorf("only %d tokens issued; the test did not exercise re-registration", len(e.fake.Tokens()))
	}
	// The log check itself runs in finalChecks, after every process is gone.
}

// TestContractSandboxRegistrationRetried: the sandbox registration is
// retried until it lands, without holding up the executor side, and made
// again after its stream is lost.
func TestContractSandboxRegistrationRetried(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1, setup: func(f *fakeaiwg.Server) { f.SetSandboxRegisterStatus(503) }})
	// The executor side is up (newContract waited for its resync) and works.
	e.dispatch("m-sbx", "echo executor side works")
	if end := e.waitEnd("m-sbx", patience); end.Event != evCompleted {
		t.Errorf("ended %s %v", end.Event, end.Data)
	}
	eventually(t, patience, "sandbox registration retried", func() bool { return len(e.fake.SandboxRegistrations()) >= 2 })
	if st := e.aiwgStatus(); nonEmptyString(st.body["sandbox_id"]) || e.fake.SandboxStreamConnected() {
		t.Errorf("sandbox shown registered while aiwg serve refuses it: %s", st.raw)
	}
	e.fake.SetSandboxRegisterStatus(0)
	eventually(t, patience, "sandbox registered and connected", func() bool {
		return e.fake.SandboxStreamConnected() && e.aiwgStatus().body["sandbox_id"] == "sbx-"+e.identity()
	})
	// Lost stream: registered again, then connected again.
	n := len(e.fake.SandboxRegistrations())
	e.fake.DropSandboxStream()
	eventually(t, patience, "sandbox registered again after its stream was lost", func() bool {
		return len(e.fake.SandboxRegistrations()) > n && e.fake.SandboxStreamConnected()
	})
	for _, r := range e.fake.SandboxRegistrations() {
		if r["instance_id"] != e.identity() {
			t.Errorf("sandbox registration with instance_id %v", r["instance_id"])
		}
	}
}
