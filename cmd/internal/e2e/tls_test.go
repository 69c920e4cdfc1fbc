package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// With AGENTIC_AGENT_TLS=auto the agent port speaks only TLS, with a
// certificate from the server's own CA: host agents get the CA and work;
// an agent that has only the CA connects over TLS; one without it is
// refused rather than connecting unverified; cleartext gets nothing.
func TestAgentPortOverTLS(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir, "AGENTIC_AGENT_TLS=auto")
	if r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "true"}); r.ExitCode != 0 {
		t.Fatalf("a host agent over TLS: %+v", r)
	}
	ca := filepath.Join(dataDir, "tls", "ca.pem")
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	addr := s.AgentAddr()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("TLS with the server's CA: %v", err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Errorf("negotiated %q, want h2", p)
	}
	c.Close()
	if err := connectAs(t, s, "host-01", "whatever"); err == nil {
		t.Fatal("cleartext h2c on the TLS port was answered")
	}

	agentSecret(t, dataDir, "remote-1", "remote-secret")
	startAgent(t, "remote-1", "remote-secret", "https://"+addr, "MANAGEMENT_CA="+ca)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := s.WaitAgents(ctx, "remote-1"); err != nil {
		t.Fatalf("an agent with only the CA: %v", err)
	}
	agentSecret(t, dataDir, "remote-2", "remote-secret")
	// System roots: the server's CA is not among them. Its log says why
	// once it has tried.
	unverified := startAgent(t, "remote-2", "remote-secret", "https://"+addr, "MANAGEMENT_CA=")
	eventually(t, patience, "the log of an agent that cannot verify the server saying why", func() bool { return strings.Contains(unverified.out.String(), "certificate") })
	unverified.stop()
	if a, err := s.Client().GetAgentWithResponse(ctx, "remote-2"); err != nil || a.StatusCode() != 404 {
		t.Fatalf("an agent that cannot verify the server registered: %v %s\n%s", err, a.Body, unverified.out)
	}
}
