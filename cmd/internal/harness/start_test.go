package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A LISTEN_ADDR of port 0 in Env (the kubernetes engine's 0.0.0.0:0) puts
// the agent port on that host at the base port, over TLS as off loopback,
// where another address than 127.0.0.1 reaches it (as pods reach the
// bridge's), and the operator API stays where AGENTIC_OPERATOR_HOST says.
func TestStartListensOnTheHostOfEnvsPortZero(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bins, err := BuildShared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	s, err := Start(bins, Options{DataDir: dataDir, Env: []string{"LISTEN_ADDR=0.0.0.0:0", "AGENTIC_OPERATOR_HOST=127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	port := strconv.Itoa(s.Opts.BasePort)
	if s.Opts.BasePort == 0 || s.AgentURL != "https://127.0.0.1:"+port {
		t.Errorf("agent URL %q, base port %d; want https at the base port", s.AgentURL, s.Opts.BasePort)
	}
	ca, err := os.ReadFile(filepath.Join(dataDir, "tls", "ca.pem"))
	if err != nil {
		t.Fatalf("no CA: the agent port's TLS is not on: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	// 127.0.0.2 is not 127.0.0.1: only a listener on every address answers there.
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", net.JoinHostPort("127.0.0.2", port),
		&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("the agent port on another address: %v\n%s", err, s.Log())
	}
	conn.Close()
	rest := strconv.Itoa(s.Opts.BasePort + 2)
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.2", rest), 30*time.Second); err == nil {
		c.Close()
		t.Error("the REST port answers off AGENTIC_OPERATOR_HOST")
	} else if !strings.Contains(err.Error(), "refused") {
		t.Errorf("REST on 127.0.0.2: %v; want the connection refused", err)
	}
}
