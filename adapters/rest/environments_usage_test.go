package rest

import (
	"crypto/rand"
	"net/http"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
)

// An environment's usage of its injected secrets is in its answers (get
// and list, through the spec-validating client) once the registry records
// a request, and absent before.
func TestEnvironmentUsageIsShown(t *testing.T) {
	envs := newFakeEnvironments()
	envs.injected = inject.NewRegistry(nil)
	e := newEnv(t, func(d *Deps) { d.Environments = envs })
	expect(t, e.call("POST", "/api/v1/environments", `{"runtime":"docker","name":"box"}`), http.StatusAccepted, "")
	spec, err := inject.ParseSpec("api.anthropic.com", "x-api-key", "", "ANTHROPIC_BASE_URL")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envs.injected.Register("box", []inject.Secret{{Name: "ANTHROPIC_API_KEY", Spec: spec, Value: "sk"}}, inject.Limits{}, func(b []byte) error { _, err := rand.Read(b); return err }); err != nil {
		t.Fatal(err)
	}

	type usageOf struct {
		Name  string         `json:"name"`
		Usage map[string]any `json:"usage"`
	}
	var before usageOf
	r := e.call("GET", "/api/v1/environments/box", "")
	expect(t, r, http.StatusOK, "")
	r.decode(t, &before)
	if before.Usage != nil {
		t.Fatalf("before any request the environment shows usage %v", before.Usage)
	}

	envs.injected.Record("box", inject.Response{Model: "claude-sonnet-4-5", InputTokens: 11, OutputTokens: 22, CacheReadInputTokens: 7})
	envs.injected.AddBytes("box", 1234, 56789)
	want := map[string]any{"requests": 1.0, "input_tokens": 11.0, "output_tokens": 22.0,
		"cache_creation_input_tokens": 0.0, "cache_read_input_tokens": 7.0, "bytes_sent": 1234.0, "bytes_received": 56789.0}
	check := func(where string, got usageOf) {
		t.Helper()
		if len(got.Usage) != len(want)+1 {
			t.Fatalf("%s: usage %v", where, got.Usage)
		}
		for k, v := range want {
			if got.Usage[k] != v {
				t.Fatalf("%s: usage.%s = %v, want %v", where, k, got.Usage[k], v)
			}
		}
		if c, _ := got.Usage["cost_usd"].(float64); c <= 0 {
			t.Fatalf("%s: usage.cost_usd = %v", where, got.Usage["cost_usd"])
		}
	}
	var one usageOf
	r = e.call("GET", "/api/v1/environments/box", "")
	expect(t, r, http.StatusOK, "")
	r.decode(t, &one)
	check("get", one)
	var list struct {
		Environments []usageOf `json:"environments"`
	}
	r = e.call("GET", "/api/v1/environments", "")
	expect(t, r, http.StatusOK, "")
	r.decode(t, &list)
	if len(list.Environments) != 1 {
		t.Fatalf("list %+v", list)
	}
	check("list", list.Environments[0])
}
