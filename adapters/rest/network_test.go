package rest

import (
	"net/http"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A network mode is parsed where it enters: an unknown word is a 400
// before any runtime is asked; a known one, or none, goes through as is.
func TestNetworkModeParsedAtTheEdge(t *testing.T) {
	envs := newFakeEnvironments()
	e := newEnv(t, func(d *Deps) { d.Environments = envs; d.Pools = fakePools{t} })
	for _, body := range []string{
		`{"runtime":"docker","name":"a","network":"carrier-pigeon"}`,
		`{"runtime":"docker","name":"a","network":"None"}`,
	} {
		expect(t, e.call("POST", "/api/v1/environments", body), http.StatusBadRequest, "invalid_request")
	}
	expect(t, e.call("PUT", "/api/v1/pools/p", `{"runtime":"docker","size":1,"spec":{"network":"wifi"}}`), http.StatusBadRequest, "invalid_request")
	expect(t, e.call("PUT", "/api/v1/pools/p", `{"runtime":"docker","size":1,"spec":{"network":"proxy"}}`), http.StatusOK, "")
	for _, body := range []string{`{"runtime":"docker","name":"b","network":"none"}`, `{"runtime":"docker","name":"c","network":""}`, `{"runtime":"docker","name":"d"}`} {
		expect(t, e.call("POST", "/api/v1/environments", body), http.StatusAccepted, "")
	}
}

func TestNetworkModeOf(t *testing.T) {
	for in, want := range map[string]ports.NetworkMode{"": "", "none": ports.NetworkNone, "proxy": ports.NetworkProxy, "host": ports.NetworkHost} {
		if got, err := networkMode(&in); err != nil || got != want {
			t.Errorf("networkMode(%q) = %q, %v", in, got, err)
		}
	}
	if got, err := networkMode(nil); err != nil || got != "" {
		t.Errorf("networkMode(nil) = %q, %v", got, err)
	}
}

// Every state the environments use case can report is a word of the
// contract's EnvironmentState (toEnvironment would report it as failed).
func TestEnvironmentStatesAreTheContracts(t *testing.T) {
	for _, s := range environment.States {
		if !restapi.EnvironmentState(s).Valid() {
			t.Errorf("state %q is not in openapi.yaml's EnvironmentState", s)
		}
	}
}
