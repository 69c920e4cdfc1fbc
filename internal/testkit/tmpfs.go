package testkit

import (
	"os"
	"os/exec"
	"testing"
)

// Tmpfs mounts a fresh tmpfs of size bytes (mount(8)'s size=, e.g. "256k")
// on a new temporary directory and returns it; the cleanup unmounts it. A
// tmpfs is a real filesystem that fills up: writes past its size fail with
// ENOSPC, and removing files gives the space back. Mounting needs root,
// which CI has; elsewhere the test fails and says so.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts a small tmpfs to fill it up; run the tests as root (CI does)")
	}
	dir, err := os.MkdirTemp("", "tmpfs-")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
		_ = os.Remove(dir)
		t.Fatalf("mount tmpfs on %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
		_ = os.Remove(dir)
	})
	return dir
}
