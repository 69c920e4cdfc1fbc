package runtimetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/kubernetes"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/internal/secret"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// TestKubernetesGVisor: the gvisor tier on the test cluster. A runtime
// configured with RuntimeClasses{gvisor: gvisor} offers the tier, and an
// environment of that tier runs under gVisor's kernel (runsc, platform
// systrap: test/k8s/build-gvisor.sh and cluster-up.sh), where the standard
// tier's pod sees the host's: its agent dials the server over TCP and
// registers, commands run as nobody without capabilities under the pod's
// seccomp filter on a read-only root, in a pseudo-terminal too, open TCP connections to the host, and the
// conformance suite (exec, files, stop/start, destroy leaving nothing)
// passes on the tier. A runtime without RuntimeClasses refuses the tier.
//
// Without runsc in the cluster (build-gvisor.sh not run) the tests that need
// it skip, saying so, except under CI, where scripts/kubernetes-test-env.sh
// always builds it: there they fail (testreq).
func TestKubernetesGVisor(t *testing.T) {
	k := startKube(t)
	t.Run("RefusedWhereNotDeclared", func(t *testing.T) { kubeGVisorRefused(t, k) })

	gv := k.runtime(t, func(c *kubernetes.Config) {
		c.RuntimeClasses = map[string]string{ports.TierGVisor: harness.KubernetesGVisorClass}
	})
	if got := gv.Capabilities().Tiers; !slices.Equal(got, []string{ports.TierGVisor}) {
		t.Fatalf("tiers with RuntimeClasses{gvisor}: %v, want [gvisor]", got)
	}
	testreq.Need(t, k.cluster.GVisor, "gVisor in the Kubernetes test cluster (runsc and containerd-shim-runsc-v1 in build/k8s/bin)",
		"run test/k8s/build-gvisor.sh (scripts/kubernetes-test-env.sh runs it)")
	t.Run("Sandboxed", func(t *testing.T) { kubeGVisorSandboxed(t, k, gv) })
	t.Run("Conformance", func(t *testing.T) {
		base := ports.EnvironmentSpec{
			Tier:         ports.TierGVisor,
			ReadOnlyRoot: true,
			Resources:    ports.Resources{CPUs: 0.5, MemoryMB: 256, DiskGB: 1},
		}
		h := k.link.Harness(gv, base, k.leftovers)
		h.BootTimeout = time.Minute // a sandbox boots its kernel first
		portstest.RunRuntimeSuite(t, h)
	})
}

// kubeGVisorRefused: the tier named on a runtime without RuntimeClasses is
// an invalid spec, refused before anything is made.
func kubeGVisorRefused(t *testing.T, k *kube) {
	rt := k.runtime(t, nil)
	if tiers := rt.Capabilities().Tiers; len(tiers) != 0 {
		t.Fatalf("tiers without RuntimeClasses: %v, want none", tiers)
	}
	s, err := secret.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := ports.EnvironmentSpec{Name: "gvisor-refused", Tier: ports.TierGVisor, Agent: k.link.Bootstrap}
	spec.Agent.ID, spec.Agent.Secret = spec.Name, s
	if _, err := rt.Provision(ctx, spec); !errors.Is(err, ports.ErrInvalidSpec) || !strings.Contains(err.Error(), "gvisor") {
		t.Fatalf("Provision of tier gvisor without RuntimeClasses: %v, want ErrInvalidSpec naming the tier", err)
	}
	if left := k.leftovers(t, spec.Name); len(left) > 0 {
		t.Errorf("a refused Provision left %v", left)
	}
}

// kubeGVisorSandboxed: the pod names the RuntimeClass, its commands see
// gVisor's kernel and not the host's (which the same runtime's standard tier,
// runc, shows: the check tells them apart), and the hardening holds inside.
func kubeGVisorSandboxed(t *testing.T, k *kube, rt *kubernetes.Runtime) {
	host, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	hostVersion := "version: " + strings.TrimSpace(string(host))
	res := map[string]portstest.ScriptResult{}
	for _, tier := range []string{"", ports.TierGVisor} {
		name := "std"
		if tier != "" {
			name = "gv"
		}
		start := time.Now()
		k.provision(t, rt, ports.EnvironmentSpec{Name: name, Tier: tier, ReadOnlyRoot: true,
			Resources: ports.Resources{CPUs: 0.5, MemoryMB: 256, DiskGB: 1}})
		t.Logf("tier %q: Provision → agent connected in %v", tier, time.Since(start).Round(time.Millisecond))
		// dmesg: gVisor's own boot messages, but the pod's seccomp profile
		// denies syslog(2) to commands (no CAP_SYSLOG) in both tiers.
		res[name] = portstest.RunScript(t, k.link.Service, name, `dmesg 2>&1 | head -2
echo "version: $(cat /proc/version)"
echo "uid: $(id -u)"
grep -E '^(CapEff|Seccomp):' /proc/self/status
touch /rootfs-write 2>/dev/null && echo ROOT-WRITABLE
echo x >/tmp/x && echo tmp-writable
echo done`, nil)
		t.Logf("inside the %q-tier environment:\n%s", tier, res[name].Output)
	}
	if p := k.getPod(t, rt, "gv"); p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != harness.KubernetesGVisorClass {
		t.Fatalf("pod runtimeClassName %v, want %s", p.Spec.RuntimeClassName, harness.KubernetesGVisorClass)
	}
	if p := k.getPod(t, rt, "std"); p.Spec.RuntimeClassName != nil {
		t.Errorf("standard tier's pod names runtimeClassName %s", *p.Spec.RuntimeClassName)
	}
	if std := res["std"].Output; !strings.Contains(std, hostVersion) || strings.Contains(strings.ToLower(std), "gvisor") {
		t.Fatalf("the standard tier (runc) should see the host's kernel (%s), not gVisor:\n%s", hostVersion, std)
	}
	r := res["gv"]
	out := r.Output
	if r.Exit != 0 || !strings.Contains(out, "done") {
		t.Fatalf("script: exit %d, %q, %q", r.Exit, out, r.Error)
	}
	if !regexp.MustCompile(`(?m)^version: Linux version \S+-gvisor `).MatchString(out) {
		t.Errorf("/proc/version inside names no gVisor kernel:\n%s", out)
	}
	if strings.Contains(out, hostVersion) {
		t.Errorf("commands see the host's kernel (%s)", hostVersion)
	}
	if !strings.Contains(out, "uid: 65534") || !strings.Contains(out, "CapEff:\t0000000000000000") {
		t.Errorf("commands are not nobody without capabilities:\n%s", out)
	}
	if strings.Contains(out, "ROOT-WRITABLE") || !strings.Contains(out, "tmp-writable") {
		t.Errorf("read-only root with a writable /tmp does not hold:\n%s", out)
	}
	// The pod's seccomp RuntimeDefault, applied inside the sandbox too
	// (runsc's oci-seccomp, which cluster-up.sh turns on).
	if !strings.Contains(out, "Seccomp:\t2") {
		t.Errorf("commands run without the pod's seccomp filter:\n%s", out)
	}

	// A command in a pseudo-terminal (gVisor's own devpts), as sessions run.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var pty bytes.Buffer
	cmd, err := k.link.Service.Start(ctx, "gv", ports.CommandSpec{Command: "sh", Args: []string{"-c", "tty; stty size; echo pty-done"},
		PTY: true, Cols: 101, Rows: 29}, ports.StartOptions{OnOutput: func(c ports.OutputChunk) {
		mu.Lock()
		pty.Write(c.Data)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-cmd.Done():
	case <-ctx.Done():
		t.Fatal("the PTY command did not finish")
	}
	mu.Lock()
	got := pty.String()
	mu.Unlock()
	t.Logf("in a PTY: %q", got)
	if pr := cmd.Result(); pr.ExitCode != 0 || !strings.Contains(got, "/dev/pts/") || !strings.Contains(got, "29 101") || !strings.Contains(got, "pty-done") {
		t.Errorf("PTY command: exit %d (%s), output %q; want a /dev/pts terminal of 29x101", pr.ExitCode, pr.Error, got)
	}

	// A command's own TCP connection to the host (bridge network, through
	// gVisor's netstack), as the agent's link is.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	received := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- err.Error()
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		b, _ := io.ReadAll(c)
		received <- string(b)
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	nc := portstest.RunScript(t, k.link.Service, "gv", fmt.Sprintf("echo from-gvisor | nc -w 5 %s %d", harness.KubernetesGateway, port), nil)
	if nc.Exit != 0 {
		t.Errorf("nc to the host: exit %d, %q", nc.Exit, nc.Output)
	}
	select {
	case got := <-received:
		if !strings.Contains(got, "from-gvisor") {
			t.Errorf("the host received %q, want from-gvisor", got)
		}
	case <-time.After(30 * time.Second):
		t.Error("no connection from the gvisor-tier environment reached the host within 30s")
	}
}
