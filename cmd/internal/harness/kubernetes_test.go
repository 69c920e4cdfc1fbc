package harness

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// The cluster is part of the tests like dockerd: what the machine lacks for
// it skips a test asking for it, saying what and how to get it (`make
// test-env`), and fails it under CI.
func TestKubernetesMissingSkipsOrFailsUnderCI(t *testing.T) {
	err := canRunKubernetes(t.TempDir()) // no binaries there
	m := (*Missing)(nil)
	if !errors.As(err, &m) {
		t.Fatalf("an empty build dir: %v; want what is missing", err)
	}
	if want := "root"; os.Geteuid() == 0 {
		if want = "scripts/kubernetes-test-env.sh"; !strings.Contains(m.How, want) || !strings.Contains(m.What, "Kubernetes binaries") {
			t.Errorf("missing %+v; want the binaries, and %s to build them", m, want)
		}
	} else if !strings.Contains(m.What, want) {
		t.Errorf("missing %+v as a user; want root", m)
	}

	// Kubernetes(t) on a machine that lacks it (the shared start's error).
	kubeMu.Lock()
	savedC, savedErr := kubeShared, kubeErr
	kubeShared, kubeErr = nil, m
	kubeMu.Unlock()
	t.Cleanup(func() {
		kubeMu.Lock()
		kubeShared, kubeErr = savedC, savedErr
		kubeMu.Unlock()
	})
	t.Setenv("CI", "")
	r := &recorder{}
	if c := Kubernetes(r); c != nil || !strings.Contains(r.skipped, m.What) || !strings.Contains(r.skipped, m.How) || r.failed != "" {
		t.Errorf("missing locally: cluster %v, %+v; want a skip saying what and how", c, r)
	}
	t.Setenv("CI", "true")
	r = &recorder{}
	if c := Kubernetes(r); c != nil || r.failed == "" || r.skipped != "" {
		t.Errorf("missing under CI: cluster %v, %+v; want a failure", c, r)
	}
	// The engine says the same.
	if _, err := StartEngine("kubernetes"); !errors.As(err, &m) {
		t.Errorf("kubernetes engine without a cluster: %v; want what is missing", err)
	}
}

// One cluster per machine: while one run holds the lock another cannot take
// it, and can once it is released.
func TestKubernetesLockIsOnePerMachine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k8s.lock")
	held, err := lockWithin(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := lockWithin(path, 0); err == nil {
		f.Close()
		t.Fatal("a second holder took the lock")
	} else if !strings.Contains(err.Error(), "another test run") {
		t.Errorf("error %q; want it to say another run holds the cluster", err)
	}
	held.Close()
	again, err := lockWithin(path, 0)
	if err != nil {
		t.Fatalf("lock not free after release: %v", err)
	}
	again.Close()
}

// The kubernetes engine gives each call a namespace of its own, deleted by
// its Stop, and an Env under which agentic-mgmt offers the runtime and a
// pod's agent dials the server back (images of the agent under test,
// the agent port on every address over TLS, advertised at the gateway).
func TestKubernetesEngineServesAServerPodsReach(t *testing.T) {
	e := NeedEngine(t, "kubernetes")
	other, err := StartEngine("kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	ns, otherNS := e.Getenv("AGENTIC_K8S_NAMESPACE"), other.Getenv("AGENTIC_K8S_NAMESPACE")
	if ns == "" || ns == otherNS {
		t.Fatalf("namespaces %q and %q; want one per call", ns, otherNS)
	}
	c, err := sharedKubernetes()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	other.Stop()
	nsGone := func(name string) bool {
		out, err := c.Kubectl(ctx, "get", "namespace", name, "--ignore-not-found", "-o", "jsonpath={.status.phase}")
		return err == nil && (len(out) == 0 || string(out) == "Terminating")
	}
	if !nsGone(otherNS) {
		t.Errorf("namespace %s still active after its engine stopped", otherNS)
	}
	if nsGone(ns) {
		t.Fatalf("namespace %s gone while its engine runs", ns)
	}

	bins, err := BuildShared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(bins, Options{DataDir: t.TempDir(), Env: append(e.Env, "AGENTIC_RUNTIMES=kubernetes")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	cli := s.Client()
	rts, err := cli.ListRuntimesWithResponse(ctx)
	if err != nil || rts.JSON200 == nil {
		t.Fatalf("runtimes: %v %v", rts, err)
	}
	if len(rts.JSON200.Runtimes) != 1 || rts.JSON200.Runtimes[0].Runtime != "kubernetes" {
		t.Fatalf("runtimes %+v, unavailable %+v; want kubernetes offered\n%s", rts.JSON200.Runtimes, rts.JSON200.Unavailable, s.Log())
	}
	created, err := cli.CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Name: "probe", Runtime: "kubernetes"})
	if err != nil || created.StatusCode() != 202 {
		t.Fatalf("create: %v %v %s", created.StatusCode(), err, created.Body)
	}
	for {
		got, err := cli.GetEnvironmentWithResponse(ctx, "probe")
		if err == nil && got.JSON200 != nil {
			if st := got.JSON200.State; st == restapi.EnvReady {
				break
			} else if st == restapi.EnvFailed {
				t.Fatalf("environment failed: %v\n%s", got.JSON200.Error, s.Log())
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the pod's agent did not connect: %v\n%s", ctx.Err(), s.Log())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if del, err := cli.DeleteEnvironmentWithResponse(ctx, "probe"); err != nil || del.StatusCode() >= 300 {
		t.Errorf("delete: %v %v", del.StatusCode(), err)
	}
}
