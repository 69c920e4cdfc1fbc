package e2e

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// agentPorts is GET /api/v1/agents/{id}/ports.
func agentPorts(t *testing.T, s *harness.Server, agentID string) restapi.ListeningPortList {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	resp, err := s.Client().ListAgentPortsWithResponse(ctx, agentID)
	if err != nil {
		t.Fatal(err)
	}
	if resp.JSON200 == nil {
		t.Fatalf("ports of %s: status %d: %s", agentID, resp.StatusCode(), resp.Body)
	}
	return *resp.JSON200
}

// listed returns the entries of l on port.
func listed(l restapi.ListeningPortList, port int) []restapi.ListeningPort {
	var out []restapi.ListeningPort
	for _, p := range l.Ports {
		if p.Port == port {
			out = append(out, p)
		}
	}
	return out
}

// Ports seen: a server started inside the agent's environment appears in
// its ports list with its process's name, and goes when it stops; the
// change stream names `ports` both times.
func TestListeningPortsFollowAServerStartedAndStopped(t *testing.T) {
	s := startServer(t, 1, "")
	// A port free on this machine (host agents share its network).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}

	// The agent's list arrives with its connection.
	testkit.Eventually(t, patience, "host-01's first ports report", func() bool {
		return agentPorts(t, s, "host-01").UpdatedAt != nil
	})
	if got := listed(agentPorts(t, s, "host-01"), port); len(got) != 0 {
		t.Fatalf("port %d listed before anything listens on it: %+v", port, got)
	}

	cs := watchChanges(t, s, "?interval_ms=50")
	<-cs.events // hello
	bg := restapi.SessionType("background")
	sess := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &bg, Command: "busybox", Args: &[]string{"nc", "-l", "-p", strconv.Itoa(port)}})
	cs.waitFor(t, "ports")
	var seen []restapi.ListeningPort
	testkit.Eventually(t, patience, "the listener in host-01's ports", func() bool {
		seen = listed(agentPorts(t, s, "host-01"), port)
		return len(seen) > 0
	})
	for _, p := range seen {
		if p.Process == nil || *p.Process != "busybox" {
			t.Fatalf("port %d listed without its process busybox: %+v", port, seen)
		}
		if p.Family != "ipv4" && p.Family != "ipv6" {
			t.Fatalf("family %q", p.Family)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if r, err := s.Client().KillSessionWithResponse(ctx, sess.SessionId); err != nil || r.StatusCode() >= 300 {
		t.Fatalf("kill: %v %v", err, r)
	}
	cs.waitFor(t, "ports")
	testkit.Eventually(t, patience, "the stopped listener gone from host-01's ports", func() bool {
		return len(listed(agentPorts(t, s, "host-01"), port)) == 0
	})

	// Unknown agents and environments are 404s.
	if r, err := s.Client().ListAgentPortsWithResponse(ctx, "nobody"); err != nil || r.StatusCode() != http.StatusNotFound {
		t.Fatalf("an unknown agent: %v %v", err, r)
	}
	if r, err := s.Client().ListEnvironmentPortsWithResponse(ctx, "nowhere"); err != nil || r.StatusCode() != http.StatusNotFound {
		t.Fatalf("an unknown environment: %v %v", err, r)
	}
}
