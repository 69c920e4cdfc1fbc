package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
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
	addr := strings.TrimPrefix(s.AgentURL, "http://")
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

	hashes, err := filestore.NewAgentHashes(filepath.Join(dataDir, "secrets"))
	if err != nil {
		t.Fatal(err)
	}
	if err := hashes.Put("remote-1", "remote-secret"); err != nil {
		t.Fatal(err)
	}
	run := func(id, caFile string) (*exec.Cmd, *strings.Builder) {
		cmd := exec.Command(bins.Agent, "--config", "/nonexistent")
		cmd.Env = append(os.Environ(), "AGENT_ID="+id, "AGENT_SECRET=remote-secret", "MANAGEMENT_SERVER=https://"+addr, "MANAGEMENT_CA="+caFile)
		var log strings.Builder
		cmd.Stderr = &log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
		return cmd, &log
	}
	run("remote-1", ca)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitAgents(ctx, "remote-1"); err != nil {
		t.Fatalf("an agent with only the CA: %v", err)
	}
	if err := hashes.Put("remote-2", "remote-secret"); err != nil {
		t.Fatal(err)
	}
	cmd, log := run("remote-2", "") // system roots: the server's CA is not among them
	time.Sleep(2 * time.Second)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	if a, err := s.Client().GetAgentWithResponse(ctx, "remote-2"); err != nil || a.StatusCode() != 404 {
		t.Fatalf("an agent that cannot verify the server registered: %v %s\n%s", err, a.Body, log.String())
	}
	if !strings.Contains(log.String(), "certificate") {
		t.Fatalf("the agent's log does not say why:\n%s", log.String())
	}
}
