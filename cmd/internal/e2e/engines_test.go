package e2e

import (
	"context"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// The kubernetes test engine gives each call a namespace of its own in the
// run's cluster, deleted by its Stop, and an Env under which agentic-mgmt
// offers the runtime (the agent port where pods reach it; that a pod's agent
// then connects, TestKubernetesRuntimeEnvironmentLife shows).
func TestKubernetesEngineGivesEachCallItsNamespace(t *testing.T) {
	e := harness.NeedEngine(t, "kubernetes")
	c := harness.Kubernetes(t)
	other, err := harness.StartEngine("kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	ns, otherNS := e.Getenv("AGENTIC_K8S_NAMESPACE"), other.Getenv("AGENTIC_K8S_NAMESPACE")
	if ns == "" || ns == otherNS {
		t.Fatalf("namespaces %q and %q; want one per call", ns, otherNS)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	phase := func(name string) string {
		out, err := c.Kubectl(ctx, "get", "namespace", name, "--ignore-not-found", "-o", "jsonpath={.status.phase}")
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	if p := phase(otherNS); p != "Active" {
		t.Fatalf("namespace %s: phase %q while its engine runs", otherNS, p)
	}
	other.Stop()
	if p := phase(otherNS); p != "" && p != "Terminating" {
		t.Errorf("namespace %s: phase %q after its engine stopped; want it deleted", otherNS, p)
	}
	if p := phase(ns); p != "Active" {
		t.Errorf("namespace %s: phase %q after another engine stopped", ns, p)
	}

	s := startServer(t, 0, "", append(e.Env, "AGENTIC_RUNTIMES=kubernetes")...)
	rts, err := s.Client().ListRuntimesWithResponse(ctx)
	if err != nil || rts.JSON200 == nil {
		t.Fatalf("runtimes: %v", err)
	}
	if len(rts.JSON200.Runtimes) != 1 || rts.JSON200.Runtimes[0].Runtime != "kubernetes" {
		t.Fatalf("runtimes %+v, unavailable %+v; want kubernetes offered", rts.JSON200.Runtimes, rts.JSON200.Unavailable)
	}
}
