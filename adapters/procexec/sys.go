package procexec

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// lookPath resolves name like exec.LookPath, but searches the PATH of the
// child's environment (falling back to ours), since that is the PATH the
// command is meant to run with. A relative name with a slash is taken
// relative to dir, where the child will be. Like a shell, it skips the
// entries it cannot look into (a directory it may not search, one that is
// missing or not a directory): only a file found that cannot be run makes
// a permission error (126), anything else is not found (127).
func lookPath(name, dir string, env []string) (string, error) {
	if name == "" {
		return "", errors.New("empty command")
	}
	if strings.Contains(name, "/") {
		p := name
		if dir != "" && !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", err
		}
		return p, nil
	}
	path, ok := lookupEnv(env, "PATH")
	if !ok {
		path = os.Getenv("PATH")
	}
	var permErr error
	for _, d := range filepath.SplitList(path) {
		// exec.LookPath refuses results found via relative entries (ErrDot);
		// skipping them keeps "." in PATH from hijacking a command.
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		fi, err := os.Stat(p) //nolint:gosec // a PATH lookup: stat of a candidate, nothing opened
		if err != nil {
			// Not there, or d cannot be searched (EACCES): not found here.
			continue
		}
		err = executable(p, fi)
		if err == nil {
			return p, nil
		}
		if permErr == nil && errors.Is(err, fs.ErrPermission) {
			permErr = err
		}
	}
	if permErr != nil {
		// Found, but not executable: a shell says 126 here, not 127.
		return "", permErr
	}
	return "", exec.ErrNotFound
}

// checkExecutable mirrors os/exec's findExecutable on Linux.
func checkExecutable(file string) error {
	fi, err := os.Stat(file) //nolint:gosec // a PATH lookup: stat of a candidate, nothing opened
	if err != nil {
		return err
	}
	return executable(file, fi)
}

// executable says whether file, whose stat is fi, may be run by us.
func executable(file string, fi fs.FileInfo) error {
	if fi.IsDir() {
		return &fs.PathError{Op: "exec", Path: file, Err: syscall.EISDIR}
	}
	err := unix.Faccessat(unix.AT_FDCWD, file, unix.X_OK, unix.AT_EACCESS)
	if err == nil {
		return nil
	}
	if err != unix.ENOSYS && err != unix.EPERM {
		return &fs.PathError{Op: "exec", Path: file, Err: err}
	}
	if fi.Mode()&0o111 != 0 {
		return nil
	}
	return &fs.PathError{Op: "exec", Path: file, Err: fs.ErrPermission}
}

// lookupEnv finds key in env; the last entry wins, as in exec.Cmd.
func lookupEnv(env []string, key string) (string, bool) {
	prefix := key + "="
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], prefix); ok {
			return v, true
		}
	}
	return "", false
}

// setEnv returns env with every key entry replaced by key=val.
func setEnv(env []string, key, val string) []string {
	prefix := key + "="
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return append(out, prefix+val)
}

// openPTY opens a pseudo-terminal pair. The master is opened non-blocking
// before os.NewFile so it lives in the runtime poller: read deadlines can
// then stop a drain blocked on a terminal a grandchild keeps open.
// (creack/pty's helpers call File.Fd, which turns the master back to
// blocking mode and makes that impossible, so it is not used.)
func openPTY() (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, &fs.PathError{Op: "open", Path: "/dev/ptmx", Err: err}
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil { // unlockpt
		_ = unix.Close(fd)
		return nil, nil, fmt.Errorf("unlockpt: %w", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN) // ptsname
	if err != nil {
		_ = unix.Close(fd)
		return nil, nil, fmt.Errorf("ptsname: %w", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	// O_NOCTTY: the agent itself must not acquire the terminal.
	slave, err = os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// setSize sets the terminal size without File.Fd (see openPTY).
func setSize(master *os.File, cols, rows uint16) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
	if err != nil {
		return err
	}
	if ioErr != nil {
		return fmt.Errorf("set terminal size: %w", ioErr)
	}
	return nil
}

// groupAlive reports whether process group pgid has a member that is not a
// zombie. Zombies count as gone: if init does not reap orphans they would
// otherwise keep a kill waiting for its whole grace.
func groupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	want := strconv.Itoa(pgid)
	for _, e := range ents {
		name := e.Name()
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		// "pid (comm) state ppid pgrp ...": comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 3 && f[2] == want && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}
