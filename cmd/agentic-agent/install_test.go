package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestInstallCopiesItselfWhole(t *testing.T) {
	dir := t.TempDir()
	dest := filepath.Join(dir, "agentic-agent")
	if err := install([]string{dest}); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dest)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, self) {
		t.Fatalf("the copy (%d bytes) differs from the running binary (%d bytes)", len(got), len(self))
	}
	fi, err := os.Stat(dest)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v, %v; want 0755", fi.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".agentic-agent-*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	if err := install(nil); err == nil {
		t.Fatal("install with no destination succeeded")
	}
	if err := install([]string{filepath.Join(dir, "missing", "x")}); err == nil {
		t.Fatal("install into a missing directory succeeded")
	}
}
