package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// A host agent shares the server's network: a preview or a port-forward
// through it must not reach the server's own listeners (agent port, client
// WebSocket, REST) from inside, even for a caller with the operator token.
func TestPreviewCannotReachTheServersOwnPorts(t *testing.T) {
	s := startServer(t, 1, "")
	waitAgents(t, s, "host-01")
	// An environment on the host runtime: its agent shares the network too.
	const env = "own-ports"
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if r, err := s.Client().CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: "host", Name: env}); err != nil || r.StatusCode() >= 300 {
		t.Fatalf("create environment: %v %v", err, r)
	}
	testkit.Eventually(t, patience, env+" ready", func() bool {
		r, err := s.Client().GetEnvironmentWithResponse(ctx, env)
		return err == nil && r.JSON200 != nil && r.JSON200.State == restapi.EnvReady
	})
	rest, err := url.Parse(s.RESTURL)
	if err != nil {
		t.Fatal(err)
	}
	_, agentPort, _ := net.SplitHostPort(s.AgentAddr())
	_, restPort, _ := net.SplitHostPort(rest.Host)
	// Every request goes to the REST listener, whatever the URL's host.
	client := &http.Client{
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, rest.Host)
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	for _, port := range []string{agentPort, restPort} {
		for _, u := range []string{
			"http://" + port + "-host-01.localhost:" + restPort + "/api/v1/agents",
			s.RESTURL + "/preview/host-01/" + port + "/api/v1/agents",
			"http://" + port + "-" + env + ".localhost:" + restPort + "/api/v1/agents",
			s.RESTURL + "/api/v1/environments/" + env + "/ports/" + port + "/forward",
		} {
			req, _ := http.NewRequest("GET", u, nil)
			if strings.HasSuffix(u, "/forward") {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "agentic-port-forward")
			}
			req.Header.Set("Authorization", "Bearer "+s.Token)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct{ Code string }
			_ = json.Unmarshal(body, &e)
			if resp.StatusCode != http.StatusForbidden || e.Code != "port_refused" {
				t.Errorf("%s: %d %s, want 403 port_refused", u, resp.StatusCode, body)
			}
		}
	}
}
