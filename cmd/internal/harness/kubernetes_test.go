package harness

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
