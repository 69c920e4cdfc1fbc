// Package testreq is the one rule for tests that need something the machine
// may lack (root, an engine, a tool, a built image): without it a test
// skips, saying what is missing and how to get it, except under CI (CI set
// and not "false"), where the same test fails, so CI never passes by
// skipping. `make test` sets CI; `make unit` does not.
package testreq

import (
	"os"
	"os/exec"
)

// T is the part of testing.TB the rule uses.
type T interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// InCI reports whether missing requirements fail rather than skip.
func InCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// Need stops t unless ok: what names the requirement, how says how to get it.
func Need(t T, ok bool, what, how string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("needs %s (missing under CI, where nothing may be skipped): %s", what, how)
		return
	}
	t.Skipf("needs %s: %s", what, how)
}

// Root needs the test to run as root.
func Root(t T, why string) {
	t.Helper()
	Need(t, os.Geteuid() == 0, "root ("+why+")", "run the tests as root, as `make test` in CI does")
}

// Command needs a program in PATH; how says how to install it.
func Command(t T, name, how string) {
	t.Helper()
	_, err := exec.LookPath(name)
	Need(t, err == nil, name, how)
}

// File needs a file or directory to exist.
func File(t T, path, what, how string) {
	t.Helper()
	_, err := os.Stat(path)
	Need(t, err == nil, what+" ("+path+")", how)
}
