package rest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// FuzzExecRequestDecoding posts arbitrary bodies to exec: never a panic,
// never a 5xx, always a JSON error on 4xx, always within the contract.
func FuzzExecRequestDecoding(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `"x"`, `{"command":"echo"}`, `{"command":"echo","args":["a"]}`,
		`{"command":"x","pty":true,"cols":80,"rows":24,"term":"xterm"}`, `{"command":"x","stdin":"in"}`,
		`{"command":"x","timeout_seconds":86400,"max_output_bytes":67108864}`, `{"command":"x","env":{"A":"B"}}`,
		`{"command":1}`, `{"command":"x","cols":-1}`, `{"command":"x"}{}`, `{"command":"x","extra":1}`,
		`{"command":"\u0000"}`, `{"command":"x","env":{"":""}}`, `{"command":"x","max_output_bytes":1e30}`,
		`{"command":"x","args":[null]}`, `{"command":"x","args":null}`, `{`, "\xff\xfe", `{"COMMAND":"x"}`,
	} {
		f.Add([]byte(seed))
	}
	// A fresh link per input, so a long fuzz run does not pile up commands.
	handler := func() http.Handler {
		link := resttest.NewLink()
		link.AddAgent(ports.AgentInfo{ID: "a1", Status: "ready"})
		// Every command ends at once, whatever it is, so the fuzzer never waits.
		link.SetScript(func(c *resttest.Command) {
			c.Stdout(c.Spec.Command)
			c.Exit(0)
		})
		return New(Deps{Link: link, Agents: link, Token: testToken}).Handler()
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, rec := fuzzSend(handler(), "POST", "/api/v1/agents/a1/exec", testToken, body)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.Bytes())
		}
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.Bytes())
		}
		checkContract(t, req, rec.Code, rec.Header(), rec.Body.Bytes())
	})
}

// FuzzDispatchDecoding posts arbitrary bodies to dispatch with a valid
// executor token: never a panic, never a 5xx but the use case's 503
// no_agent, always a JSON error within the contract.
func FuzzDispatchDecoding(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `"x"`, `1`, `{`, "\xff\xfe", `{"mission_id":"m","objective":"o"}{}`,
		`{"mission_id":"m","objective":"o"}`, `{"mission_id":"m"}`, `{"objective":"o"}`, `{"mission_id":"","objective":"o"}`,
		`{"mission_id":1,"objective":"o"}`, `{"mission_id":"m","objective":null}`, `{"mission_id":"m","objective":"\u0000"}`,
		`{"mission_id":"m","objective":"o","completion":"c","long_running":true,"executor_filter":{"executor_id":"e","capabilities":["hitl"],"agent_id":"a1"},"metadata":{"k":"v"}}`,
		`{"mission_id":"m","objective":"o","completion":null,"long_running":null,"executor_filter":null,"metadata":null}`,
		`{"mission_id":"m","objective":"o","executor_filter":{"agent_id":"off"}}`,
		`{"mission_id":"m","objective":"o","executor_filter":{"capabilities":["isolation:vm"]}}`,
		`{"mission_id":"m","objective":"o","executor_filter":{"capabilities":[1,null]}}`,
		`{"mission_id":"m","objective":"o","metadata":{"n":1e400,"m":-0.0e-999,"deep":[[[[[{}]]]]]}}`,
		`{"mission_id":"m","objective":"o","metadata":[]}`, `{"mission_id":"m","objective":"o","long_running":"yes"}`,
		`{"mission_id":"m","objective":"o","extra":{"x":[1,2,3]},"Mission_ID":5,"OBJECTIVE":{}}`,
		`{"mission_id":"\ud800","objective":"o\xff"}`, `{"mission_id":"m","mission_id":"n","objective":"o"}`,
	} {
		f.Add([]byte(seed))
	}
	handler := func() http.Handler {
		link := resttest.NewLink()
		link.AddAgent(ports.AgentInfo{ID: "a1", Status: "ready"})
		link.AddAgent(ports.AgentInfo{ID: "off", Status: "disconnected"})
		return New(Deps{
			Link: link, Agents: link, Token: testToken,
			Missions: resttest.NewMissions(link),
			Executor: resttest.NewExecutor("exec-1", testExecToken),
		}).Handler()
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, rec := fuzzSend(handler(), "POST", "/api/v1/sessions/s-1/dispatch", testExecToken, body)
		checkContract(t, req, rec.Code, rec.Header(), rec.Body.Bytes())
		var e restapi.Error
		switch rec.Code {
		case http.StatusAccepted, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		case http.StatusNotFound, http.StatusServiceUnavailable:
			_ = json.Unmarshal(rec.Body.Bytes(), &e)
			if want := map[int]string{404: "agent_not_connected", 503: "no_agent"}[rec.Code]; e.Code != want {
				t.Fatalf("status %d code %q for %q: %s", rec.Code, e.Code, body, rec.Body.Bytes())
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.Bytes())
		}
	})
}

// fakePools accepts every pool the REST layer lets through, checking what
// that layer promises: a name and no negative resource.
type fakePools struct{ t *testing.T }

func (f fakePools) PutPool(_ context.Context, p ports.Pool) (environment.PoolStatus, error) {
	r := p.Spec.Resources
	if p.Name == "" || r.CPUs < 0 || r.MemoryMB < 0 || r.PIDs < 0 || r.DiskGB < 0 || p.Idle.IdleAfter < 0 || p.Idle.DeleteAfter < 0 {
		f.t.Fatalf("the REST layer let through %+v", p)
	}
	return environment.PoolStatus{Pool: p}, nil
}
func (fakePools) DeletePool(context.Context, string) error   { return environment.ErrPoolNotFound }
func (fakePools) Pools() []environment.PoolStatus            { return nil }
func (fakePools) Pool(string) (environment.PoolStatus, bool) { return environment.PoolStatus{}, false }

// FuzzPoolRequestDecoding puts arbitrary bodies under arbitrary pool names:
// never a panic, never a 5xx, always within the contract.
func FuzzPoolRequestDecoding(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `{"runtime":"host","size":1}`, `{"runtime":"docker","size":2,"spec":{"image":"x","network":"none"}}`,
		`{"runtime":"x","size":-1}`, `{"runtime":"x","size":1e9}`, `{"runtime":"x","size":1,"spec":{"resources":{"cpus":-1}}}`,
		`{"runtime":"x","size":1,"spec":{"resources":{"memory_mb":-5}}}`, `{"runtime":"x","size":1,"spec":{"allowed_hosts":[null]}}`,
		`{"runtime":"x","size":1,"extra":true}`, `{"runtime":"x","size":"1"}`, `{`, "\xff",
		`{"runtime":"x","size":1,"idle_after":"30m","delete_after":"24h"}`, `{"runtime":"x","size":1,"idle_after":"-1s"}`,
		`{"runtime":"x","size":1,"delete_after":"soon"}`, `{"runtime":"x","size":1,"idle_after":"9999999999h"}`, `{"runtime":"x","size":1,"idle_after":5}`,
	} {
		f.Add("p", []byte(seed))
	}
	f.Add("../x", []byte(`{"runtime":"host","size":1}`))
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		h := New(Deps{Token: testToken, Pools: fakePools{t}}).Handler()
		req, rec := fuzzSend(h, "PUT", "/api/v1/pools/"+url.PathEscape(name), testToken, body)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q %q: %s", rec.Code, name, body, rec.Body.Bytes())
		}
		checkContract(t, req, rec.Code, rec.Header(), rec.Body.Bytes())
	})
}

// fuzzSend sends body as JSON to path with token through h, as the fuzzers
// do, and returns the request (for checkContract) and its answer.
func fuzzSend(h http.Handler, method, path, token string, body []byte) (*http.Request, *httptest.ResponseRecorder) {
	req := httptest.NewRequest(method, path, strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return req, rec
}
