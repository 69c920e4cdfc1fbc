package main

import (
	"errors"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/aiwg"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest"
)

func readyByName(checks []rest.ReadinessCheck) map[string]bool {
	out := map[string]bool{}
	for _, c := range checks {
		out[c.Name] = c.Ready
	}
	return out
}

func TestReadinessFailsUntilListenersServeAndTheLinksAreUp(t *testing.T) {
	rts := &Runtimes{Unreachable: map[string]error{"docker": errors.New("no socket")}, explicit: true}
	off := provideReadiness(Config{}, nil, aiwg.New(aiwg.Config{}), rts)
	got := readyByName(off.Checks())
	for _, name := range []string{listenerAgentRPC, listenerREST, listenerWS, "runtime_docker"} {
		if ready, ok := got[name]; !ok || ready {
			t.Errorf("%s: ready %v shown %v before it serves / answers; want shown and not ready", name, ready, ok)
		}
	}
	if !got["aiwg"] {
		t.Error("aiwg with the integration off must not make the server unready")
	}
	for _, name := range []string{listenerAgentRPC, listenerREST, listenerWS} {
		off.setServing(name, true)
	}
	if got := readyByName(off.Checks()); !got[listenerREST] || !got[listenerWS] || !got[listenerAgentRPC] {
		t.Errorf("serving listeners not ready: %v", got)
	}
	off.setServing(listenerWS, false)
	if readyByName(off.Checks())[listenerWS] {
		t.Error("a listener that stopped serving is still ready")
	}

	// Configured but never connected: missions cannot arrive.
	on := provideReadiness(Config{}, nil, aiwg.New(aiwg.Config{Endpoint: "http://127.0.0.1:1"}), &Runtimes{})
	if readyByName(on.Checks())["aiwg"] {
		t.Error("aiwg configured and not connected is shown ready")
	}
}
