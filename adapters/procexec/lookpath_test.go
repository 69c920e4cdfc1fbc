package procexec

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A PATH entry that cannot be searched is skipped, as a shell skips it: a
// command found nowhere else is not found (127, "command not found"), not
// "permission denied" (126); one found in a later entry is that one; and
// a file found that cannot be run is still 126. (A root server's host
// agents inherit PATHs such as /root/go/bin that their users cannot search.)
func TestLookPathSkipsUnsearchableEntries(t *testing.T) {
	t.Parallel()
	base, err := os.MkdirTemp("", "procexec-lookpath-")
	if err != nil {
		t.Fatal(err)
	}
	locked := filepath.Join(base, "locked")
	t.Cleanup(func() {
		_ = os.Chmod(locked, 0o700)
		_ = os.RemoveAll(base)
	})
	open := filepath.Join(base, "open")
	noexec := filepath.Join(base, "noexec")
	for _, d := range []string{locked, open, noexec} {
		if err := os.Mkdir(d, 0o755); err != nil { //nolint:gosec // others must search these
			t.Fatal(err)
		}
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{
		{filepath.Join(locked, "lp-tool"), 0o755},
		{filepath.Join(locked, "lp-script"), 0o755},
		{filepath.Join(locked, "lp-missing"), 0o755},
		{filepath.Join(open, "lp-tool"), 0o755},
		{filepath.Join(noexec, "lp-script"), 0o644},
	} {
		if err := os.WriteFile(f.path, []byte("#!/bin/sh\n"), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f.path, f.mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	// Searchable by everyone but the locked directory: root's (0700) as
	// seen by another user, or (not root) our own with no permissions.
	if err := os.Chmod(base, 0o755); err != nil { //nolint:gosec // others must search it
		t.Fatal(err)
	}
	lockedMode := os.FileMode(0o700)
	if os.Geteuid() != 0 {
		lockedMode = 0
	}
	if err := os.Chmod(locked, lockedMode); err != nil {
		t.Fatal(err)
	}

	type result struct {
		path string
		err  error
	}
	cases := []struct {
		name, path string
		check      func(r result) bool
		want       string
	}{
		{"lp-missing", locked + ":" + open, func(r result) bool { return errors.Is(r.err, exec.ErrNotFound) }, "not found (127)"},
		{"lp-tool", locked + ":" + open, func(r result) bool { return r.err == nil && r.path == filepath.Join(open, "lp-tool") }, filepath.Join(open, "lp-tool")},
		{"lp-script", locked + ":" + noexec, func(r result) bool { return errors.Is(r.err, fs.ErrPermission) }, "permission denied (126)"},
	}
	got := make([]result, len(cases))
	var lockedErr error
	asAnotherUser(t, func() {
		_, lockedErr = os.Stat(filepath.Join(locked, "lp-tool"))
		for i, c := range cases {
			got[i].path, got[i].err = lookPath(c.name, "", []string{"PATH=" + c.path})
		}
	})
	if !errors.Is(lockedErr, fs.ErrPermission) {
		t.Fatalf("the locked directory is not locked: %v", lockedErr)
	}
	for i, c := range cases {
		if !c.check(got[i]) {
			t.Errorf("%s in PATH=%s: %q, %v; want %s", c.name, c.path, got[i].path, got[i].err, c.want)
		}
	}
	r := StartFailure(&StartError{Command: "lp-missing", Err: got[0].err})
	if r.ExitCode != 127 || !strings.Contains(r.Error, "command not found") {
		t.Errorf("missing command: %+v", r)
	}
	if r := StartFailure(&StartError{Command: "lp-script", Err: got[2].err}); r.ExitCode != 126 {
		t.Errorf("command that cannot be run: %+v", r)
	}
}

// asAnotherUser runs f with the file-system rights of a user that is not
// us: as root, on a thread of its own whose file-system uid and gid are
// nobody's (which also drops the capabilities that bypass permissions);
// otherwise as ourselves, which the test's modes then lock out.
func asAnotherUser(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		f()
		return
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread goes back to the scheduler only with root's ids again.
		// Were it left to end with this goroutine, the commands this
		// package's parallel tests started from it earlier would get their
		// parent-death SIGKILL (Pdeathsig follows the thread, not the
		// process): TestWaitConcurrent's sh was killed so, once in CI.
		defer func() {
			unix.Setfsuid(0) //nolint:errcheck // checked by its result
			unix.Setfsgid(0) //nolint:errcheck // checked by its result
			uid, _ := unix.SetfsuidRetUid(-1)
			gid, _ := unix.SetfsgidRetGid(-1)
			if uid == 0 && gid == 0 {
				runtime.UnlockOSThread()
			}
		}()
		unix.Setfsgid(65534) //nolint:errcheck // checked below by its result
		unix.Setfsuid(65534) //nolint:errcheck // checked below by its result
		uid, _ := unix.SetfsuidRetUid(-1)
		gid, _ := unix.SetfsgidRetGid(-1)
		if uid != 65534 || gid != 65534 {
			errc <- errors.New("could not change the thread's file-system ids")
			return
		}
		f()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
