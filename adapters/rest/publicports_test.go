package rest

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/changes"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// publicEnv is a REST server with environment "dev" (agent dev, listening
// on 5173 over IPv4 and IPv6 and on 8080), the agent a1 of no environment
// (listening on 22), a public marks store and a change hub.
type publicEnv struct {
	*env
	envs   *fakeEnvironments
	marks  *portsfake.PublicPorts
	hub    *changes.Hub
	listen *fakeListening
}

func newPublicEnv(t *testing.T, edit ...func(*Deps)) *publicEnv {
	t.Helper()
	envs := newFakeEnvironments()
	if _, err := envs.Create(context.Background(), environment.Request{Name: "dev", Runtime: "docker"}); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 5, 9, 7, 0, 0, 0, time.UTC)
	lp := &fakeListening{by: map[string]ports.ListeningPorts{
		"dev": {UpdatedAt: at, Ports: []ports.ListeningPort{
			{Port: 5173, Address: "127.0.0.1", Family: ports.FamilyIPv4, Process: "node"},
			{Port: 5173, Address: "::1", Family: ports.FamilyIPv6, Process: "node"},
			{Port: 8080, Address: "0.0.0.0", Family: ports.FamilyIPv4},
		}},
		"a1": {UpdatedAt: at, Ports: []ports.ListeningPort{{Port: 22, Address: "0.0.0.0", Family: ports.FamilyIPv4}}},
	}}
	marks := portsfake.NewPublicPorts()
	hub := changes.NewHub()
	e := newEnv(t, append([]func(*Deps){func(d *Deps) {
		d.Environments, d.ListeningPorts, d.PublicPorts, d.Changes = envs, lp, marks, hub
	}}, edit...)...)
	e.link.AddAgent(ports.AgentInfo{ID: "dev", Status: "ready", Runtime: "docker", Hostname: "dev"})
	// The store drops marks by the server's clock, as the real one by the wall's.
	marks.Now = e.clock.Now
	return &publicEnv{env: e, envs: envs, marks: marks, hub: hub, listen: lp}
}

func (e *publicEnv) ports(path string) restapi.ListeningPortList {
	e.t.Helper()
	r := e.call("GET", path, "")
	expect(e.t, r, http.StatusOK, "")
	var l restapi.ListeningPortList
	r.decode(e.t, &l)
	return l
}

// TestPublicPortsMarkAndUnmark: PUT makes a port public for the ttl asked
// (an hour without one), the lists show it on every address of the port,
// DELETE ends it (and answers 204 again), and each change names `ports` on
// the change stream.
func TestPublicPortsMarkAndUnmark(t *testing.T) {
	e := newPublicEnv(t)
	now := e.clock.Now()
	watcher, stop := e.hub.Watch()
	defer stop()
	portsChanged := func(what string) {
		t.Helper()
		testkit.Receive(t, 15*time.Second, watcher.Wake(), what+" named no change")
		if k := watcher.Take(); k&ports.ChangePorts == 0 {
			t.Fatalf("%s: changed %v, want ports", what, k)
		}
	}

	r := e.call("PUT", "/api/v1/environments/dev/ports/5173/public", "")
	expect(t, r, http.StatusOK, "")
	var p restapi.PublicPort
	r.decode(t, &p)
	if p.Port != 5173 || !p.Public || !p.PublicUntil.Equal(now.Add(time.Hour)) {
		t.Fatalf("PUT without a body: %s, want public for an hour from %v", r.body, now)
	}
	portsChanged("PUT")
	r = e.call("PUT", "/api/v1/environments/dev/ports/8080/public", `{"ttl_seconds": 120}`)
	expect(t, r, http.StatusOK, "")
	r.decode(t, &p)
	if p.Port != 8080 || !p.PublicUntil.Equal(now.Add(2*time.Minute)) {
		t.Fatalf("PUT with ttl 120: %s", r.body)
	}
	portsChanged("PUT with a ttl")
	expect(t, e.call("PUT", "/api/v1/environments/dev/ports/8080/public", `{}`), http.StatusOK, "")
	portsChanged("PUT {}")
	if until, ok := e.marks.PublicUntil("dev", 8080, now); !ok || !until.Equal(now.Add(time.Hour)) {
		t.Fatalf("after PUT {}: %v %v, want the default hour (the mark replaced)", until, ok)
	}

	l := e.ports("/api/v1/environments/dev/ports")
	if len(l.Ports) != 3 {
		t.Fatalf("ports: %+v", l.Ports)
	}
	for _, lp := range l.Ports {
		if !lp.Public || lp.PublicUntil == nil || !lp.PublicUntil.Equal(now.Add(time.Hour)) {
			t.Fatalf("port %d on %s: public %v until %v, want public for an hour", lp.Port, lp.Address, lp.Public, lp.PublicUntil)
		}
	}

	expect(t, e.call("DELETE", "/api/v1/environments/dev/ports/5173/public", ""), http.StatusNoContent, "")
	portsChanged("DELETE")
	expect(t, e.call("DELETE", "/api/v1/environments/dev/ports/5173/public", ""), http.StatusNoContent, "")
	expect(t, e.call("DELETE", "/api/v1/environments/dev/ports/3000/public", ""), http.StatusNoContent, "")
	l = e.ports("/api/v1/environments/dev/ports")
	for _, lp := range l.Ports {
		if public := lp.Port == 8080; lp.Public != public || (lp.PublicUntil != nil) != public {
			t.Fatalf("after DELETE of 5173, port %d: public %v until %v", lp.Port, lp.Public, lp.PublicUntil)
		}
	}

	// A mark ends by itself.
	e.clock.Advance(time.Hour)
	for _, lp := range e.ports("/api/v1/environments/dev/ports").Ports {
		if lp.Public || lp.PublicUntil != nil {
			t.Fatalf("an hour later, port %d is still public", lp.Port)
		}
	}
}

// TestPublicPortsRefusals: an unknown environment, a port or ttl out of
// range, a body that is not the request's, a full environment, a server
// without a store, and no token.
func TestPublicPortsRefusals(t *testing.T) {
	e := newPublicEnv(t)
	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"PUT", "/api/v1/environments/nope/ports/5173/public", "", http.StatusNotFound, "environment_not_found"},
		{"DELETE", "/api/v1/environments/nope/ports/5173/public", "", http.StatusNotFound, "environment_not_found"},
		{"PUT", "/api/v1/environments/dev/ports/0/public", "", http.StatusBadRequest, "invalid_request"},
		{"PUT", "/api/v1/environments/dev/ports/65536/public", "", http.StatusBadRequest, "invalid_request"},
		{"DELETE", "/api/v1/environments/dev/ports/0/public", "", http.StatusBadRequest, "invalid_request"},
		{"PUT", "/api/v1/environments/dev/ports/5173/public", `{"ttl_seconds": 59}`, http.StatusBadRequest, "invalid_request"},
		{"PUT", "/api/v1/environments/dev/ports/5173/public", `{"ttl_seconds": 2592001}`, http.StatusBadRequest, "invalid_request"},
		{"PUT", "/api/v1/environments/dev/ports/5173/public", `{"ttl_seconds": "1h"}`, http.StatusBadRequest, ""},
		{"PUT", "/api/v1/environments/dev/ports/5173/public", `{"ttl": 60}`, http.StatusBadRequest, "invalid_request"},
		{"PUT", "/api/v1/environments/dev/ports/5173/public", `{"ttl_seconds": 60`, http.StatusBadRequest, "invalid_json"},
		{"PUT", "/api/v1/environments/dev/ports/5173/public", `[]`, http.StatusBadRequest, "invalid_json"},
	} {
		expect(t, e.call(c.method, c.path, c.body), c.status, c.code)
	}
	if got := e.marks.Public("dev", e.clock.Now()); len(got) != 0 {
		t.Fatalf("refused requests marked %+v", got)
	}
	// The bounds themselves pass.
	expect(t, e.call("PUT", "/api/v1/environments/dev/ports/1/public", `{"ttl_seconds": 60}`), http.StatusOK, "")
	expect(t, e.call("PUT", "/api/v1/environments/dev/ports/65535/public", `{"ttl_seconds": 2592000}`), http.StatusOK, "")

	for p := range ports.MaxPublicPortsPerEnvironment - 2 {
		if err := e.marks.SetPublic("dev", uint16(2000+p), e.clock.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, e.call("PUT", "/api/v1/environments/dev/ports/5173/public", ""), http.StatusConflict, "too_many_public_ports")

	expect(t, e.callAuth("PUT", "/api/v1/environments/dev/ports/5173/public", "", ""), http.StatusUnauthorized, "unauthorized")
	expect(t, e.callAuth("DELETE", "/api/v1/environments/dev/ports/1/public", "", "Bearer nope"), http.StatusUnauthorized, "unauthorized")
	if _, ok := e.marks.PublicUntil("dev", 1, e.clock.Now()); !ok {
		t.Fatal("an unauthorized DELETE removed the mark")
	}

	bare := newPublicEnv(t, func(d *Deps) { d.PublicPorts = nil })
	expect(t, bare.call("PUT", "/api/v1/environments/dev/ports/5173/public", ""), http.StatusServiceUnavailable, "store_unavailable")
	expect(t, bare.call("DELETE", "/api/v1/environments/dev/ports/5173/public", ""), http.StatusNoContent, "")
}

// TestPortsListsNamePreviewURLs: each port of an environment (and of its
// agent) names its preview URL, on the scheme and port the request came
// to; an agent of no environment has none, and no port of it is public.
func TestPortsListsNamePreviewURLs(t *testing.T) {
	e := newPublicEnv(t)
	port := mustPort(t, e.srv.Listener.Addr().String())
	want := map[int]string{5173: "http://5173-dev.localhost:" + port + "/", 8080: "http://8080-dev.localhost:" + port + "/"}
	for _, path := range []string{"/api/v1/environments/dev/ports", "/api/v1/agents/dev/ports"} {
		for _, lp := range e.ports(path).Ports {
			if lp.PreviewUrl == nil || *lp.PreviewUrl != want[lp.Port] || lp.Public {
				t.Fatalf("%s: port %d: preview %v, public %v; want %s, private", path, lp.Port, deref(lp.PreviewUrl), lp.Public, want[lp.Port])
			}
		}
	}
	for _, lp := range e.ports("/api/v1/agents/a1/ports").Ports {
		if lp.PreviewUrl != nil || lp.Public || lp.PublicUntil != nil {
			t.Fatalf("agent a1 (no environment's): %+v", lp)
		}
	}
	expect(t, e.call("PUT", "/api/v1/environments/dev/ports/8080/public", ""), http.StatusOK, "")
	for _, lp := range e.ports("/api/v1/agents/dev/ports").Ports {
		if lp.Public != (lp.Port == 8080) {
			t.Fatalf("the environment's agent's list: port %d public %v", lp.Port, lp.Public)
		}
	}

	// Over TLS, with a domain of its own (written any way), and a Host
	// without a port (a proxy on 443 in front).
	d := Deps{Link: e.link, Agents: e.link, Token: testToken, Clock: e.clock, Environments: e.envs, ListeningPorts: e.listen,
		PublicPorts: e.marks, PreviewDomain: ".Preview.Example.COM."}
	tlsSrv := httptest.NewTLSServer(New(d).Handler())
	t.Cleanup(tlsSrv.Close)
	for _, c := range []struct{ host, want string }{
		{"", "https://8080-dev.preview.example.com:" + mustPort(t, tlsSrv.Listener.Addr().String()) + "/"},
		{"sandbox.example.com", "https://8080-dev.preview.example.com/"},
		{"[::1]:9443", "https://8080-dev.preview.example.com:9443/"},
	} {
		req, err := http.NewRequest("GET", tlsSrv.URL+"/api/v1/environments/dev/ports", nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.host != "" {
			req.Host = c.host
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := tlsSrv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		checkContract(t, req, resp.StatusCode, resp.Header, b)
		r := response{status: resp.StatusCode, body: b}
		expect(t, r, http.StatusOK, "")
		var l restapi.ListeningPortList
		r.decode(t, &l)
		found := false
		for _, lp := range l.Ports {
			if lp.Port == 8080 {
				found = lp.PreviewUrl != nil && *lp.PreviewUrl == c.want && lp.Public
				if !found {
					t.Fatalf("Host %q: port 8080's preview %v (public %v), want %s", c.host, deref(lp.PreviewUrl), lp.Public, c.want)
				}
			}
		}
		if !found || resp.TLS == nil {
			t.Fatalf("Host %q: no port 8080 over TLS: %s", c.host, b)
		}
	}
}

// TestDeletingAnEnvironmentForgetsItsPublicPorts: a new environment of
// the same name starts private.
func TestDeletingAnEnvironmentForgetsItsPublicPorts(t *testing.T) {
	e := newPublicEnv(t)
	expect(t, e.call("PUT", "/api/v1/environments/dev/ports/5173/public", ""), http.StatusOK, "")
	if err := e.marks.SetPublic("other", 5173, e.clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	expect(t, e.call("DELETE", "/api/v1/environments/dev", ""), http.StatusNoContent, "")
	if got := e.marks.Public("dev", e.clock.Now()); len(got) != 0 {
		t.Fatalf("the deleted environment's marks: %+v", got)
	}
	if _, ok := e.marks.PublicUntil("other", 5173, e.clock.Now()); !ok {
		t.Fatal("another environment's mark went too")
	}
	if _, err := e.envs.Create(context.Background(), environment.Request{Name: "dev", Runtime: "docker"}); err != nil {
		t.Fatal(err)
	}
	for _, lp := range e.ports("/api/v1/environments/dev/ports").Ports {
		if lp.Public {
			t.Fatalf("the new dev's port %d is public", lp.Port)
		}
	}
}

func mustPort(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}
