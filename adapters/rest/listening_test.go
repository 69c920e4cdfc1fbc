package rest

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// fakeListening is a ports.ListeningPortsReader in memory.
type fakeListening struct {
	mu sync.Mutex
	by map[string]ports.ListeningPorts
}

func (f *fakeListening) ListeningPorts(agentID string) ports.ListeningPorts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.by[agentID]
}

func TestListeningPortsKeepTheContract(t *testing.T) {
	at := time.Date(2026, 5, 9, 7, 13, 22, 5, time.UTC)
	lp := &fakeListening{by: map[string]ports.ListeningPorts{
		"a1": {UpdatedAt: at, Ports: []ports.ListeningPort{
			{Port: 22, Address: "0.0.0.0", Family: ports.FamilyIPv4},
			{Port: 5173, Address: "::1", Family: ports.FamilyIPv6, Process: "node"},
		}},
		"box": {UpdatedAt: at, Truncated: true, Ports: []ports.ListeningPort{{Port: 8080, Address: "127.0.0.1", Family: ports.FamilyIPv4, Process: "python3"}}},
	}}
	envs := newFakeEnvironments()
	e := newEnv(t, func(d *Deps) { d.Environments = envs; d.ListeningPorts = lp })
	if _, err := envs.Create(context.Background(), environment.Request{Name: "box", Runtime: "docker"}); err != nil {
		t.Fatal(err)
	}

	r := e.call("GET", "/api/v1/agents/a1/ports", "")
	expect(t, r, http.StatusOK, "")
	var got restapi.ListeningPortList
	r.decode(t, &got)
	if len(got.Ports) != 2 || got.Ports[0].Port != 22 || got.Ports[0].Process != nil || got.Ports[1].Family != "ipv6" ||
		got.Ports[1].Process == nil || *got.Ports[1].Process != "node" || got.Truncated || got.UpdatedAt == nil || !got.UpdatedAt.Equal(at) {
		t.Fatalf("agent a1's ports: %s", r.body)
	}
	// A known agent that reported nothing: an empty list, no updated_at.
	r = e.call("GET", "/api/v1/agents/off/ports", "")
	expect(t, r, http.StatusOK, "")
	got = restapi.ListeningPortList{}
	r.decode(t, &got)
	if got.Ports == nil || len(got.Ports) != 0 || got.UpdatedAt != nil {
		t.Fatalf("agent off's ports: %s", r.body)
	}
	expect(t, e.call("GET", "/api/v1/agents/nobody/ports", ""), http.StatusNotFound, "agent_not_found")

	r = e.call("GET", "/api/v1/environments/box/ports", "")
	expect(t, r, http.StatusOK, "")
	got = restapi.ListeningPortList{}
	r.decode(t, &got)
	if len(got.Ports) != 1 || got.Ports[0].Port != 8080 || !got.Truncated {
		t.Fatalf("environment box's ports: %s", r.body)
	}
	expect(t, e.call("GET", "/api/v1/environments/nope/ports", ""), http.StatusNotFound, "environment_not_found")
	expect(t, e.callAuth("GET", "/api/v1/agents/a1/ports", "", "Bearer wrong"), http.StatusUnauthorized, "")
	expect(t, e.callAuth("GET", "/api/v1/environments/box/ports", "", ""), http.StatusUnauthorized, "")

	// A server without environments knows none.
	bare := newEnv(t)
	expect(t, bare.call("GET", "/api/v1/environments/box/ports", ""), http.StatusNotFound, "environment_not_found")
	r = bare.call("GET", "/api/v1/agents/a1/ports", "")
	expect(t, r, http.StatusOK, "")
}
