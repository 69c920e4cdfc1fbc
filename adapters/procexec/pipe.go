package procexec

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// outputPipe makes a pipe for a command's output: the read end is ours,
// non-blocking in the runtime poller (so read deadlines work); the write
// end, the child's, stays blocking and out of the poller, as a program
// expects of its stdout. os.Pipe would put both ends in the poller and
// Start would take the child's out again (blocking mode, then a close
// that unregisters it): 11 system calls up to the child end's close where
// this makes 6 (pipe2, one fcntl to make the write end blocking,
// os.NewFile's flag check of each end, one epoll registration, the close),
// about 10 µs of a fork/exec on a VM.
func outputPipe() (r, w *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, nil, fmt.Errorf("pipe: %w", os.NewSyscallError("pipe2", err))
	}
	// F_SETFL sets the status flags as a whole: 0 clears O_NONBLOCK (the
	// access mode is not a status flag and stays).
	if _, err := unix.FcntlInt(uintptr(fds[1]), unix.F_SETFL, 0); err != nil {
		_ = unix.Close(fds[0])
		_ = unix.Close(fds[1])
		return nil, nil, fmt.Errorf("pipe: %w", os.NewSyscallError("fcntl", err))
	}
	// os.NewFile sees O_NONBLOCK on the read end and puts it in the poller.
	return os.NewFile(uintptr(fds[0]), "|0"), os.NewFile(uintptr(fds[1]), "|1"), nil
}

// devNull is /dev/null opened once for reading, the stdin of every piped
// command without StdinOpen: exec.Cmd would open and close it for each.
// The child gets its own copy (dup2), so sharing it is safe; nil when it
// could not be opened (exec.Cmd then opens it itself, as before).
var devNull = sync.OnceValue(func() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil
	}
	return f
})

// awaitExit parks the calling goroutine in the runtime poller until the
// process pid (our child, not yet reaped) has exited, so that the Wait
// that follows returns at once. exec.Cmd.Wait alone blocks a thread in
// waitid for the child's whole life: 45 commands running held 45 threads.
// Without pidfds (Linux < 5.10, a sandbox that refuses them) it returns
// at once and Wait blocks as before.
func awaitExit(pid int) {
	if pidfdPollBroken.Load() {
		return
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd") // in the poller: it is non-blocking
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	exited := func(fd uintptr) bool {
		// WNOWAIT: only look; Wait reaps it and reads the status.
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		return err != nil || info.Signo != 0
	}
	for {
		if err := f.SetReadDeadline(time.Now().Add(time.Duration(pidfdRecheck.Load()))); err != nil {
			return
		}
		if err := rc.Read(exited); !errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		// A long-running child, or a platform whose pidfds never poll
		// readable (an emulated kernel): then it has exited unseen, and
		// the blocking Wait is used from now on.
		gone := false
		if err := rc.Control(func(fd uintptr) { gone = exited(fd) }); err != nil || gone {
			if gone {
				pidfdPollBroken.Store(true)
			}
			return
		}
	}
}

// pidfdRecheck is how often awaitExit looks whether the poller missed the
// child's exit (a variable for tests).
var pidfdRecheck atomic.Int64 // ns

func init() { pidfdRecheck.Store(int64(5 * time.Second)) }

// pidfdPollBroken: the poller once missed a child's exit.
var pidfdPollBroken atomic.Bool
