// Package runtimetest runs the ports.Runtime conformance suite against every
// runtime adapter on its real engine, with a real agent service in-process
// that the environments' real agents connect to.
package runtimetest

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/system"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/tlsca"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// Link is a live agent service listening on loopback TCP and on a unix socket.
type Link struct {
	Service     *agentrpc.Service
	Credentials ports.AgentCredentials
	Bootstrap   ports.AgentBootstrap
	Dir         string

	handler http.Handler
}

var (
	buildOnce sync.Once
	bins      harness.Binaries
	buildErr  error
)

// AgentBinary is the static agentic-agent, built once for every test
// package that runs the binaries (harness.BuildShared).
func AgentBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		bins, buildErr = harness.BuildShared(ctx)
	})
	if buildErr != nil {
		t.Fatalf("build binaries: %v", buildErr)
	}
	return bins.Agent
}

// StartLink starts an agent service for one test; dir holds its secrets and
// link/agent.sock, and must be searchable by the runtime (a VM's QEMU, a
// container's bind mount).
func StartLink(t *testing.T, dir string) *Link {
	t.Helper()
	creds, err := filestore.NewAgentHashes(filepath.Join(dir, "secrets"))
	if err != nil {
		t.Fatal(err)
	}
	svc := agentrpc.New(agentrpc.Config{
		Credentials: creds, Clock: clock.Wall{}, IDs: system.UUIDv7{},
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		HeartbeatInterval: time.Second, DisconnectGrace: time.Minute,
	})
	ctx, cancel := context.WithCancel(context.Background())
	go svc.Run(ctx)
	mux := http.NewServeMux()
	svc.Mount(mux, true)
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second}

	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The socket alone in its directory: containers mount the directory.
	if err := os.MkdirAll(filepath.Join(dir, "link"), 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "link", "agent.sock")
	_ = os.Remove(sock) // an earlier link's on the same dir (a server restart)
	unix, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	// Agents in containers and VMs run as other users.
	_ = os.Chmod(sock, 0o666)
	for _, ln := range []net.Listener{tcp, unix} {
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("agent link: %v", err)
			}
		}()
	}
	t.Cleanup(func() {
		svc.CloseStreams()
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
		cancel()
	})
	return &Link{
		Service: svc, Credentials: creds, Dir: dir, handler: mux,
		Bootstrap: ports.AgentBootstrap{
			Binary:    AgentBinary(t),
			ServerURL: "http://" + tcp.Addr().String(),
			Socket:    sock,
		},
	}
}

// Harness is the conformance harness for rt over this link.
func (l *Link) Harness(rt ports.Runtime, base ports.EnvironmentSpec, leftovers func(t *testing.T, name string) []string) portstest.RuntimeHarness {
	return portstest.RuntimeHarness{
		Runtime: rt, Link: l.Service, Files: l.Service, Agents: l.Service, Credentials: l.Credentials,
		Bootstrap: l.Bootstrap, Spec: base, Leftovers: leftovers,
	}
}

// ServeTLS also serves the link over TLS on every address of the machine,
// as a server reachable off loopback does, with a certificate of its own CA
// for hosts. It returns the port and the CA's PEM.
func (l *Link) ServeTLS(t *testing.T, hosts []string) (port int, caPEM []byte) {
	t.Helper()
	ca, err := tlsca.Open(filepath.Join(l.Dir, "tls"), hosts, nil)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err = os.ReadFile(ca.CAPath())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: l.handler, TLSConfig: ca.TLSConfig(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("agent link (TLS): %v", err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return ln.Addr().(*net.TCPAddr).Port, caPEM
}
