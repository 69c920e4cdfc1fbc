package harness

import (
	"path/filepath"
	"strings"
	"testing"
)

// Without AGENTIC_TEST_KUBERNETES=1 a test asking for the cluster skips,
// naming the variable, and starts nothing.
func TestKubernetesIsOffWithoutItsVariable(t *testing.T) {
	t.Setenv(KubernetesEnv, "")
	r := &recorder{}
	if c := Kubernetes(r); c != nil {
		t.Fatalf("got a cluster %+v with the variable unset", c)
	}
	if !strings.Contains(r.skipped, KubernetesEnv+"=1") || r.failed != "" {
		t.Errorf("skipped %q, failed %q; want a skip naming %s=1", r.skipped, r.failed, KubernetesEnv)
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
