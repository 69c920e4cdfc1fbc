package main

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/kubernetes"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/tlsca"
	"github.com/agentic-sandbox/agentic-sandbox/internal/ociimage"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// writeKubeconfig writes a kubeconfig of a cluster nobody serves (New does
// not contact it) and returns its path; split writes it as two files that
// only work merged, as a KUBECONFIG list.
func writeKubeconfig(t *testing.T, split bool) string {
	t.Helper()
	dir := t.TempDir()
	clusters := "clusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:1\"}\nusers:\n- name: u\n  user: {token: t}\n"
	contexts := "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
	head := "apiVersion: v1\nkind: Config\n"
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(head+body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if split {
		return write("clusters", clusters) + string(os.PathListSeparator) + write("contexts", contexts)
	}
	return write("kubeconfig", clusters+contexts)
}

// Pods dial the agent port over TLS at AGENTIC_ADVERTISE_HOST: a server
// listening on loopback, advertising no address pods can dial, or with the
// agent port's TLS off cannot make the runtime, and says what to set.
func TestKubernetesRuntimeRefusesAnAgentPortPodsCannotReach(t *testing.T) {
	kc := "KUBECONFIG=" + writeKubeconfig(t, false)
	for _, c := range []struct {
		env  []string
		want []string
	}{
		{nil, []string{"LISTEN_ADDR", "0.0.0.0:8120", "AGENTIC_ADVERTISE_HOST"}},
		{[]string{"LISTEN_ADDR=localhost:9000", "AGENTIC_ADVERTISE_HOST=10.246.0.1", "AGENTIC_AGENT_TLS=auto"}, []string{"LISTEN_ADDR", "0.0.0.0:9000"}},
		{[]string{"LISTEN_ADDR=0.0.0.0:8120"}, []string{`AGENTIC_ADVERTISE_HOST "0.0.0.0"`}},
		{[]string{"LISTEN_ADDR=:8120"}, []string{`AGENTIC_ADVERTISE_HOST ""`}},
		{[]string{"LISTEN_ADDR=0.0.0.0:8120", "AGENTIC_ADVERTISE_HOST=127.0.0.1"}, []string{"AGENTIC_ADVERTISE_HOST"}},
		{[]string{"LISTEN_ADDR=0.0.0.0:8120", "AGENTIC_ADVERTISE_HOST=10.246.0.1", "AGENTIC_AGENT_TLS=off"}, []string{"AGENTIC_AGENT_TLS", "auto"}},
	} {
		cfg, err := load(t, nil, append([]string{kc}, c.env...)...)
		if err != nil {
			t.Fatal(err)
		}
		e, _ := catalogEntry(kubernetes.RuntimeName)
		_, _, err = e.New(cfg, runtimeDeps{})
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v; want an error saying %q", c.env, err, w)
			}
		}
	}

	// The reason is what a request naming the runtime is told.
	cfg, err := load(t, nil, kc, "AGENTIC_RUNTIMES=kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	rts, done := provideRuntimes(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	defer done()
	if why := rts.unavailable(kubernetes.RuntimeName); !strings.Contains(why, "set LISTEN_ADDR to an address pods reach") || !strings.Contains(why, "KUBECONFIG") {
		t.Errorf("unavailable: %q; want the refusal and how to get the runtime", why)
	}
}

// A server pods can reach makes the runtime from its settings: the server
// URL at the advertised host over TLS, the CA of AGENTIC_AGENT_TLS=auto
// (made on a first start, before the agent port's TLS) with a certificate
// for that host, and the capabilities the settings declare.
func TestKubernetesRuntimeFromTheSettings(t *testing.T) {
	for _, split := range []bool{false, true} {
		cfg, err := load(t, nil, "KUBECONFIG="+writeKubeconfig(t, split), "LISTEN_ADDR=0.0.0.0:8120", "AGENTIC_ADVERTISE_HOST=10.246.0.1",
			"AGENTIC_K8S_RUNTIME_CLASSES=gvisor=runsc", "AGENTIC_K8S_NETWORK_POLICY=enforced")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.AgentTLS != "auto" {
			t.Fatalf("AGENTIC_AGENT_TLS %q off loopback; want auto", cfg.AgentTLS)
		}
		if u, err := podServerURL(cfg); err != nil || u != "https://10.246.0.1:8120" {
			t.Errorf("server URL %q, %v", u, err)
		}
		e, _ := catalogEntry(kubernetes.RuntimeName)
		rt, _, err := e.New(cfg, runtimeDeps{})
		if err != nil {
			t.Fatalf("KUBECONFIG split %v: %v", split, err)
		}
		caps := rt.Capabilities()
		if caps.Runtime != kubernetes.RuntimeName || !slices.Equal(caps.Tiers, []string{ports.TierGVisor}) || caps.NetworkModes[0] != ports.NetworkNone ||
			!slices.Contains(caps.NetworkModes, ports.NetworkProxy) {
			t.Errorf("capabilities %+v; want the gvisor tier and the closed network modes", caps)
		}
		ca, err := os.ReadFile(cfg.agentCA())
		if err != nil {
			t.Fatalf("no CA made for the pods: %v", err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		server, err := os.ReadFile(filepath.Join(filepath.Dir(cfg.agentCA()), "server.pem"))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(server)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "10.246.0.1"}); err != nil {
			t.Errorf("the agent port's certificate does not serve the host pods dial: %v", err)
		}
		// The server's own TLS, made after the runtimes, uses the same CA.
		a, err := tlsca.Open(filepath.Dir(cfg.agentCA()), agentTLSHosts(cfg), nil)
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := os.ReadFile(a.CAPath()); string(again) != string(ca) {
			t.Error("the server's TLS made another CA than the one given to pods")
		}
	}

	// Without KUBECONFIG outside a pod there is no cluster to reach.
	t.Setenv(kubeServiceHostEnv, "")
	cfg, err := load(t, nil, "LISTEN_ADDR=0.0.0.0:8120", "AGENTIC_ADVERTISE_HOST=10.246.0.1")
	if err != nil {
		t.Fatal(err)
	}
	e, _ := catalogEntry(kubernetes.RuntimeName)
	if _, _, err := e.New(cfg, runtimeDeps{}); err == nil || !strings.Contains(err.Error(), "KUBECONFIG is unset") {
		t.Errorf("no KUBECONFIG, not in a pod: %v", err)
	}
}

// The project's workload image carries the agent wherever it was pushed;
// any other image gets it injected.
func TestKubernetesKnowsWhichImagesCarryTheAgent(t *testing.T) {
	for image, want := range map[string]bool{
		ociimage.WorkloadImage:                                                 true,
		"registry.example:5000/agentic-sandbox/workload:1.2":                   true,
		"docker.io/agentic-sandbox/workload@sha256:" + strings.Repeat("a", 64): true,
		"agentic-sandbox/agent:0.1.0-dev":                                      false,
		"example/agentic-sandbox-workload:1":                                   false,
		"python:3.12":                                                          false,
		"not a reference":                                                      false,
	} {
		if got := carriesAgent(image); got != want {
			t.Errorf("carriesAgent(%q) = %v, want %v", image, got, want)
		}
	}
}
