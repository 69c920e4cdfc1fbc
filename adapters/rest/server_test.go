package rest

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func TestAuth(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name, auth string
		status     int
	}{
		{"missing", "", 401},
		{"wrong", "Bearer nope", 401},
		{"prefix of the token", "Bearer " + testToken[:5], 401},
		{"token plus more", "Bearer " + testToken + "x", 401},
		{"not bearer", "Basic " + testToken, 401},
		{"no scheme", testToken, 401},
		{"right", "Bearer " + testToken, 200},
		{"scheme case-insensitive", "bearer " + testToken, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.callAuth("GET", "/api/v1/agents", "", tc.auth)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if tc.status == 401 {
				expect(t, r, 401, "unauthorized")
				if r.header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			}
		})
	}
	// Auth comes before routing, so unknown /api routes reveal nothing.
	expect(t, e.callAuth("GET", "/api/v1/nope", "", ""), 401, "unauthorized")
	expect(t, e.callAuth("POST", "/api/v1/agents/a1/exec", `{"command":"echo"}`, "Bearer x"), 401, "unauthorized")
	if len(e.link.Commands()) != 0 {
		t.Fatal("an unauthorized exec started a command")
	}
	for _, p := range []string{"/healthz", "/readyz", "/openapi.yaml"} {
		if r := e.callAuth("GET", p, "", ""); r.status != 200 {
			t.Errorf("GET %s without token: %d", p, r.status)
		}
	}
}

func TestEmptyTokenRefusesEverything(t *testing.T) {
	e := newEnv(t, func(d *Deps) { d.Token = "" })
	expect(t, e.callAuth("GET", "/api/v1/agents", "", "Bearer "), 401, "unauthorized")
	expect(t, e.callAuth("GET", "/api/v1/agents", "", ""), 401, "unauthorized")
}

func TestHealthAndReadiness(t *testing.T) {
	ready := true
	e := newEnv(t, func(d *Deps) {
		d.Readiness = func() []ReadinessCheck {
			return []ReadinessCheck{{Name: "registry", Ready: true}, {Name: "store", Ready: ready, Detail: "disk full"}}
		}
	})
	var h restapi.Health
	r := e.callAuth("GET", "/healthz", "", "")
	expect(t, r, 200, "")
	r.decode(t, &h)
	if h.Status != "ok" || h.Version != "1.2.3" {
		t.Fatalf("health %+v", h)
	}
	var rd restapi.Readiness
	r = e.callAuth("GET", "/readyz", "", "")
	expect(t, r, 200, "")
	r.decode(t, &rd)
	if !rd.Ready || len(rd.Components) != 2 {
		t.Fatalf("readiness %+v", rd)
	}
	ready = false
	r = e.callAuth("GET", "/readyz", "", "")
	expect(t, r, 503, "")
	r.decode(t, &rd)
	if rd.Ready || rd.Components[1].Ready || rd.Components[1].Detail == nil || *rd.Components[1].Detail != "disk full" {
		t.Fatalf("readiness %+v", rd)
	}

	// Without checks the server is ready, with an empty list.
	e2 := newEnv(t)
	r = e2.callAuth("GET", "/readyz", "", "")
	expect(t, r, 200, "")
	if !strings.Contains(string(r.body), `"components":[]`) {
		t.Fatalf("body %s", r.body)
	}
}

func TestOpenAPISpecServed(t *testing.T) {
	e := newEnv(t)
	r := e.callAuth("GET", "/openapi.yaml", "", "")
	expect(t, r, 200, "")
	if ct := r.header.Get("Content-Type"); ct != "application/yaml" {
		t.Errorf("content type %q", ct)
	}
	if !bytes.Equal(r.body, restapi.Spec) {
		t.Error("the served spec differs from restapi.Spec")
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t)
	expect(t, e.callAuth("GET", "/metrics", "", ""), 404, "not_found")
	e2 := newEnv(t, func(d *Deps) {
		d.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, "agentic_up 1")
		})
	})
	r := e2.callAuth("GET", "/metrics", "", "")
	expect(t, r, 200, "")
	if string(r.body) != "agentic_up 1\n" {
		t.Fatalf("metrics %q", r.body)
	}
}

func TestUnknownRouteAndWrongMethod(t *testing.T) {
	e := newEnv(t)
	expect(t, e.callAuth("GET", "/nope", "", ""), 404, "not_found")
	expect(t, e.call("GET", "/api/v1/nope", ""), 404, "not_found")
	expect(t, e.call("GET", "/api/v1/agents/a1/exec/more", ""), 404, "not_found")
	r := e.call("DELETE", "/api/v1/agents", "")
	expect(t, r, 405, "method_not_allowed")
	if !strings.Contains(r.header.Get("Allow"), "GET") {
		t.Errorf("Allow %q", r.header.Get("Allow"))
	}
	expect(t, e.call("GET", "/api/v1/agents/a1/exec", ""), 405, "method_not_allowed")
	expect(t, e.callAuth("POST", "/healthz", "{}", ""), 405, "method_not_allowed")
}

func TestAgents(t *testing.T) {
	e := newEnv(t)
	hb := time.Date(2026, 5, 9, 7, 0, 0, 0, time.FixedZone("x", 3600))
	e.link.AddAgent(ports.AgentInfo{
		ID: "b2", Status: "busy", Runtime: "container", Hostname: "box", IPAddress: "10.0.0.2",
		AgentVersion: "0.3.0", Labels: map[string]string{"role": "ci"}, Capabilities: []string{"isolation:container"},
		System:      ports.SystemInfo{OS: "linux", Arch: "amd64", CPUCores: 4, MemoryBytes: 1 << 33},
		Metrics:     &ports.Metrics{CPUPercent: 12.5, LoadAvg1: 0.5},
		ConnectedAt: hb.Add(-time.Hour), LastHeartbeat: hb, RunningCommands: 2,
	})
	e.link.AddAgent(ports.AgentInfo{ID: "weird", Status: "draining", Runtime: "", Hostname: "w"})

	var list restapi.AgentList
	r := e.call("GET", "/api/v1/agents", "")
	expect(t, r, 200, "")
	r.decode(t, &list)
	var ids []string
	for _, a := range list.Agents {
		ids = append(ids, a.Id)
	}
	if strings.Join(ids, ",") != "a1,b2,off,weird" {
		t.Fatalf("agents %v, want sorted by id", ids)
	}
	b2 := list.Agents[1]
	if b2.Status != restapi.Busy || b2.Runtime != restapi.Container || b2.RunningCommands != 2 ||
		*b2.IpAddress != "10.0.0.2" || b2.Labels["role"] != "ci" || *b2.SystemInfo.CpuCores != 4 ||
		*b2.Metrics.CpuPercent != 12.5 || !b2.LastHeartbeat.Equal(hb) || b2.DisconnectedAt != nil {
		t.Fatalf("b2 = %+v", b2)
	}
	if list.Agents[3].Status != restapi.Stale || list.Agents[3].Runtime != restapi.Unknown {
		t.Fatalf("unknown status/runtime must map into the enums: %+v", list.Agents[3])
	}

	r = e.call("GET", "/api/v1/agents/a1", "")
	expect(t, r, 200, "")
	for _, field := range []string{"connected_at", "last_heartbeat", "disconnected_at", "metrics", "system_info"} {
		if strings.Contains(string(r.body), field) {
			t.Errorf("zero %s must be omitted: %s", field, r.body)
		}
	}
	if !strings.Contains(string(r.body), `"labels":{}`) {
		t.Errorf("labels must be an object: %s", r.body)
	}
	expect(t, e.call("GET", "/api/v1/agents/ghost", ""), 404, "agent_not_found")
	expect(t, e.call("GET", "/api/v1/agents/"+strings.Repeat("x", 200), ""), 400, "invalid_request") // over the spec's maxLength

	// Pages: limit and the cursor of the previous page; an agent that
	// comes between pages moves nobody across a boundary.
	page := func(q string) (ids []string, next string) {
		t.Helper()
		var l restapi.AgentList
		r := e.call("GET", "/api/v1/agents"+q, "")
		expect(t, r, 200, "")
		r.decode(t, &l)
		for _, a := range l.Agents {
			ids = append(ids, a.Id)
		}
		if l.NextCursor != nil {
			next = *l.NextCursor
		}
		return ids, next
	}
	ids1, next := page("?limit=2")
	if strings.Join(ids1, ",") != "a1,b2" || next != "b2" {
		t.Fatalf("first page %v next %q", ids1, next)
	}
	e.link.AddAgent(ports.AgentInfo{ID: "a0", Status: "ready"}) // before the cursor: not on later pages
	ids2, next := page("?limit=2&cursor=" + next)
	if strings.Join(ids2, ",") != "off,weird" || next != "" {
		t.Fatalf("second page %v next %q", ids2, next)
	}
	if ids, next := page("?limit=5&cursor=zzz"); len(ids) != 0 || next != "" {
		t.Fatalf("past the end: %v %q", ids, next)
	}
	for _, q := range []string{"?limit=0", "?limit=1001", "?limit=x"} {
		expect(t, e.call("GET", "/api/v1/agents"+q, ""), 400, "")
	}
}

func TestBodyErrors(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name, body, code, mention string
	}{
		{"empty", "", "invalid_json", "empty"},
		{"blank", "  \n", "invalid_json", "empty"},
		{"malformed", `{"command":`, "invalid_json", "JSON"},
		{"syntax", `{"command" "x"}`, "invalid_json", "malformed"},
		{"array", `[1]`, "invalid_json", "object"},
		{"null", `null`, "invalid_json", "object"},
		{"string", `"x"`, "invalid_json", "object"},
		{"trailing data", `{"command":"echo"} {}`, "invalid_json", "after"},
		{"unknown field", `{"command":"echo","shell":true}`, "invalid_request", `"shell"`},
		{"wrong case", `{"Command":"echo"}`, "invalid_request", `"Command"`},
		{"wrong type", `{"command":"echo","cols":"80"}`, "invalid_request", "cols"},
		{"fraction", `{"command":"echo","timeout_seconds":1.5}`, "invalid_request", "timeout_seconds"},
		{"args not array", `{"command":"echo","args":"a b"}`, "invalid_request", "args"},
		{"env not strings", `{"command":"echo","env":{"A":1}}`, "invalid_request", "env"},
		{"missing command", `{}`, "invalid_request", "command"},
		{"empty command", `{"command":""}`, "invalid_request", "command"},
		{"null command", `{"command":null}`, "invalid_request", "command"},
		{"cols 0", `{"command":"echo","cols":0}`, "invalid_request", "cols"},
		{"cols 1001", `{"command":"echo","pty":true,"cols":1001}`, "invalid_request", "cols"},
		{"rows 0", `{"command":"echo","rows":0}`, "invalid_request", "rows"},
		{"timeout -1", `{"command":"echo","timeout_seconds":-1}`, "invalid_request", "timeout_seconds"},
		{"timeout 86401", `{"command":"echo","timeout_seconds":86401}`, "invalid_request", "timeout_seconds"},
		{"max output 0", `{"command":"echo","max_output_bytes":0}`, "invalid_request", "max_output_bytes"},
		{"max output 64MiB+1", `{"command":"echo","max_output_bytes":67108865}`, "invalid_request", "max_output_bytes"},
		{"huge number", `{"command":"echo","cols":1e400}`, "invalid_request", "cols"},
		{"env name with =", `{"command":"echo","env":{"A=B":"c"}}`, "invalid_request", "env"},
		{"NUL in command", `{"command":"ec\u0000ho"}`, "invalid_request", "command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/api/v1/agents/a1/exec", "/api/v1/agents/a1/commands"} {
				r := e.call("POST", path, tc.body)
				expect(t, r, 400, tc.code)
				var er restapi.Error
				r.decode(t, &er)
				if !strings.Contains(er.Error, tc.mention) {
					t.Errorf("%s: message %q does not mention %q", path, er.Error, tc.mention)
				}
			}
		})
	}
	if n := len(e.link.Commands()); n != 0 {
		t.Fatalf("%d commands started by bad requests", n)
	}
}

func TestBodyTooLarge(t *testing.T) {
	e := newEnv(t)
	c := startSleeping(t, e, `{"command":"sleep","pty":true}`)
	big := `{"command":"echo","args":["` + strings.Repeat("x", MaxBodyBytes) + `"]}`
	for _, path := range []string{
		"/api/v1/agents/a1/exec", "/api/v1/agents/a1/commands",
		"/api/v1/commands/" + c.ID() + "/stdin", "/api/v1/commands/" + c.ID() + "/resize",
		"/api/v1/commands/" + c.ID() + "/signal",
	} {
		expect(t, e.call("POST", path, big), 413, "body_too_large")
	}
	// Exactly 1 MiB is still accepted.
	prefix, suffix := `{"command":"echo","args":["`, `"]}`
	exact := prefix + strings.Repeat("y", MaxBodyBytes-len(prefix)-len(suffix)) + suffix
	r := e.call("POST", "/api/v1/agents/a1/exec", exact)
	expect(t, r, 200, "")
	// One more byte is not.
	expect(t, e.call("POST", "/api/v1/agents/a1/exec", exact+" "), 413, "body_too_large")
}

func TestExecPortErrors(t *testing.T) {
	e := newEnv(t)
	e.link.AddAgent(ports.AgentInfo{ID: "gone", Status: "ready"})
	e.link.SetGone("gone")
	body := `{"command":"echo"}`
	expect(t, e.call("POST", "/api/v1/agents/ghost/exec", body), 404, "agent_not_found")
	expect(t, e.call("POST", "/api/v1/agents/off/exec", body), 409, "agent_not_connected")
	expect(t, e.call("POST", "/api/v1/agents/gone/exec", body), 502, "agent_gone")
	expect(t, e.call("POST", "/api/v1/agents/"+strings.Repeat("x", 129)+"/exec", body), 400, "invalid_request") // over the spec's maxLength
	expect(t, e.call("POST", "/api/v1/agents/ghost/commands", body), 404, "agent_not_found")
	expect(t, e.call("POST", "/api/v1/agents/off/commands", body), 409, "agent_not_connected")
	expect(t, e.call("POST", "/api/v1/agents/gone/commands", body), 502, "agent_gone")
}

func exec(t *testing.T, e *env, body string) restapi.ExecResult {
	t.Helper()
	r := e.call("POST", "/api/v1/agents/a1/exec", body)
	expect(t, r, 200, "")
	var res restapi.ExecResult
	r.decode(t, &res)
	return res
}

func TestExecResults(t *testing.T) {
	e := newEnv(t)
	res := exec(t, e, `{"command":"both"}`)
	if res.Stdout != "out\n" || res.Stderr != "err\n" || res.Encoding != restapi.Utf8 || res.ExitCode != 0 ||
		!res.Success || res.Truncated || res.AgentId != "a1" || res.CommandId == "" || res.Signal != nil || res.Error != nil {
		t.Fatalf("both: %+v", res)
	}
	res = exec(t, e, `{"command":"fail","args":["3","boom"]}`)
	if res.ExitCode != 3 || res.Success || res.Stderr != "boom\n" || res.Stdout != "" {
		t.Fatalf("fail: %+v", res)
	}
	res = exec(t, e, `{"command":"no-such-program"}`)
	if res.ExitCode != 127 || res.Error == nil || !strings.Contains(*res.Error, "not found") || res.Success {
		t.Fatalf("missing program: %+v", res)
	}
	// Binary output switches both streams to base64.
	res = exec(t, e, `{"command":"binary"}`)
	out, err := base64.StdEncoding.DecodeString(res.Stdout)
	if res.Encoding != restapi.Base64 || err != nil || !bytes.Equal(out, []byte{0xff, 0xfe, 0}) || res.Stderr != "" {
		t.Fatalf("binary: %+v (%v)", res, err)
	}
	e.link.SetScript(func(c *resttest.Command) {
		c.Stdout("ok")
		c.Stderr("\xff")
		c.Finish(ports.CommandResult{ExitCode: 143, Signal: 15, TimedOut: true, Duration: 1500 * time.Millisecond})
	})
	res = exec(t, e, `{"command":"x"}`)
	if res.Encoding != restapi.Base64 || res.Stdout != base64.StdEncoding.EncodeToString([]byte("ok")) ||
		res.Signal == nil || *res.Signal != 15 || !res.TimedOut || res.DurationMs != 1500 || res.Success {
		t.Fatalf("timed out: %+v", res)
	}
}

func TestExecSpec(t *testing.T) {
	e := newEnv(t)
	exec(t, e, `{"command":"echo","args":["a","b"],"env":{"K":"V"},"working_dir":"/tmp","run_as":"nobody"}`)
	c := e.nextCommand()
	want := ports.CommandSpec{Command: "echo", Args: []string{"a", "b"}, Env: map[string]string{"K": "V"},
		WorkingDir: "/tmp", RunAs: "nobody", Timeout: DefaultExecTimeout}
	if fmt.Sprint(c.Spec) != fmt.Sprint(want) || c.Opts.Detached || c.Opts.OnOutput == nil {
		t.Fatalf("spec %+v, want %+v (detached %v)", c.Spec, want, c.Opts.Detached)
	}
	exec(t, e, `{"command":"echo","timeout_seconds":0}`)
	if c := e.nextCommand(); c.Spec.Timeout != DefaultExecTimeout {
		t.Errorf("timeout 0 on exec: %v, want the default", c.Spec.Timeout)
	}
	exec(t, e, `{"command":"echo","timeout_seconds":7}`)
	if c := e.nextCommand(); c.Spec.Timeout != 7*time.Second {
		t.Errorf("timeout %v", c.Spec.Timeout)
	}
	// PTY defaults, and PTY output lands on stdout.
	res := exec(t, e, `{"command":"both","pty":true}`)
	c = e.nextCommand()
	if !c.Spec.PTY || c.Spec.Cols != 80 || c.Spec.Rows != 24 || c.Spec.Term != "xterm-256color" || c.Spec.StdinOpen {
		t.Errorf("pty spec %+v", c.Spec)
	}
	if res.Stdout != "out\nerr\n" || res.Stderr != "" {
		t.Errorf("pty output %+v", res)
	}
	exec(t, e, `{"command":"echo","pty":true,"cols":120,"rows":40,"term":"vt100"}`)
	if c := e.nextCommand(); c.Spec.Cols != 120 || c.Spec.Rows != 40 || c.Spec.Term != "vt100" {
		t.Errorf("pty spec %+v", c.Spec)
	}
	// stdin is written and closed.
	res = exec(t, e, `{"command":"cat","stdin":"hello\n"}`)
	c = e.nextCommand()
	if in, eof := c.Stdin(); in != "hello\n" || !eof || !c.Spec.StdinOpen || res.Stdout != "hello\n" {
		t.Errorf("stdin %q eof %v open %v, out %q", in, eof, c.Spec.StdinOpen, res.Stdout)
	}
}

func TestExecTruncation(t *testing.T) {
	e := newEnv(t)
	res := exec(t, e, `{"command":"spam","args":["100"],"max_output_bytes":10}`)
	if res.Stdout != strings.Repeat("x", 10) || !res.Truncated {
		t.Fatalf("%+v", res)
	}
	res = exec(t, e, `{"command":"spam","args":["10"],"max_output_bytes":10}`)
	if res.Stdout != strings.Repeat("x", 10) || res.Truncated {
		t.Fatalf("exactly the limit is not truncated: %+v", res)
	}
	e.link.SetScript(func(c *resttest.Command) {
		for range 5 {
			c.Stdout("abcd")
		}
		c.Stderr("ok")
		c.Exit(0)
	})
	res = exec(t, e, `{"command":"x","max_output_bytes":6}`)
	if res.Stdout != "abcdab" || res.Stderr != "ok" || !res.Truncated {
		t.Fatalf("%+v", res)
	}
}

func TestExecCallerGoneKillsCommand(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/api/v1/agents/a1/exec", strings.NewReader(`{"command":"sleep"}`))
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := e.srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	c := e.nextCommand()
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the request succeeded although it was cancelled")
	}
	testkit.Receive(t, 15*time.Second, c.Ended(), "the command still runs after its caller went away")
	if kills, ctxGone := c.Killed(); kills == 0 && !ctxGone {
		t.Fatal("the command ended, but neither by Kill nor by its context")
	}
}

func TestExecStdinFailureKills(t *testing.T) {
	e := newEnv(t)
	e.link.SetScript(func(c *resttest.Command) { <-c.Ended() })
	e.link.SetOnStart(func(c *resttest.Command) { c.SetStdinError(ports.ErrAgentGone) })
	expect(t, e.call("POST", "/api/v1/agents/a1/exec", `{"command":"cat","stdin":"x"}`), 502, "agent_gone")
	c := e.nextCommand()
	<-c.Ended()
	if kills, _ := c.Killed(); kills != 1 {
		t.Fatalf("a command whose stdin could not be written was not killed (kills = %d)", kills)
	}
}

// Paths with empty or dot segments get a JSON 404, never a redirect.
func TestUncleanPathsAreNotRedirected(t *testing.T) {
	e := newEnv(t)
	e.srv.Client().CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, p := range []string{"/api/v1//agents", "/api/v1/./agents", "/api/v1/x/../agents", "//healthz", "/api/v1/agents/.."} {
		r := e.call("GET", p, "")
		expect(t, r, http.StatusNotFound, "not_found")
	}
	expect(t, e.call("GET", "/api/v1/agents", ""), http.StatusOK, "")
}
