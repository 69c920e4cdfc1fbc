package procexec

import (
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	// readMax is the most one read hands on: a process that writes fast
	// gets its output read in few, large chunks (each chunk costs the
	// agent a message, a hand-off and a write downstream).
	readMax = 256 << 10
	// probeSize is the buffer of a read when nothing was buffered by the
	// time it looked (or the file cannot say): it tells EOF and "wait"
	// apart, and takes what came meanwhile.
	probeSize = 32 << 10

	// bigPipeSize is the stdout pipe's capacity (F_SETPIPE_SZ): with the
	// default 64 KiB a writer of 128 KiB blocks (coreutils writes that
	// much at once) and wakes the agent for every 64 KiB; with more room
	// it writes on while the agent reads in large chunks. The kernel
	// allocates a pipe's pages as they fill, so an idle pipe costs none.
	bigPipeSize = 1 << 20
	// maxBigPipes bounds the enlarged pipes alive at once: the kernel
	// counts a pipe's capacity against its user's pipe-user-pages-soft
	// (64 MiB by default), past which an unprivileged user's new pipes
	// get 8 KiB. 16 MiB keeps well inside it.
	maxBigPipes = 16
)

// probes are the readers' probe buffers: a reader takes one for its life.
// readChunk copies what it reads into a probe out of it, so none is held
// after its reader stopped. Pooled, a command's readers allocate (and the
// runtime zeroes) no 64 KiB, which on a command as short as `true` is
// most of what the agent allocates for it.
var probes = sync.Pool{New: func() any { return new([probeSize]byte) }}

// bigPipes counts the enlarged pipes alive.
var bigPipes atomic.Int32

// enlargePipe gives f's pipe bigPipeSize when fewer than maxBigPipes are;
// best effort: a kernel or limit that refuses leaves it as it was.
func enlargePipe(f *os.File) bool {
	if bigPipes.Add(1) > maxBigPipes {
		bigPipes.Add(-1)
		return false
	}
	rc, err := f.SyscallConn()
	var serr error
	if err == nil {
		err = rc.Control(func(fd uintptr) {
			_, serr = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, bigPipeSize)
		})
	}
	if err != nil || serr != nil {
		bigPipes.Add(-1)
		return false
	}
	return true
}

// readChunk reads what f holds, up to readMax, into a slice of its own
// that the caller keeps (no copy out of a shared buffer): it asks the
// kernel how much is buffered (FIONREAD, alias TIOCINQ: pipes and terminals) and reads
// that at once. Like File.Read it waits in the runtime poller, so a read
// deadline wakes it; io.EOF at the end. probe is the caller's, reused.
// fresh skips the first question, for a reader's first read, which
// nearly always finds a pipe the command has not written to yet: the
// probe's read says so as well, one system call fewer for each stream of
// each command.
func readChunk(rc syscall.RawConn, probe []byte, fresh bool) ([]byte, error) {
	var chunk []byte
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
		chunk, rerr = nil, nil
		ask := !fresh
		fresh = false // a call after a wait asks: what woke it may be a lot
		if ask {
			if avail, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ); err == nil && avail > 0 {
				chunk = make([]byte, min(avail, readMax))
				n, err := readFD(fd, chunk)
				if err == syscall.EAGAIN {
					return false
				}
				chunk, rerr = readDone(chunk, n, err)
				return true
			}
		}
		// Nothing buffered when asked (or not asked): a plain read says
		// whether it is the end, nothing yet (wait) or what came since.
		n, err := readFD(fd, probe)
		if err == syscall.EAGAIN {
			return false
		}
		if n > 0 {
			chunk = append([]byte(nil), probe[:n]...)
			return true
		}
		chunk, rerr = readDone(nil, n, err)
		return true
	})
	if err != nil {
		return nil, err
	}
	return chunk, rerr
}

// readDone turns a read's result into readChunk's: the bytes read, io.EOF
// at the end, the error otherwise (EIO: a terminal whose other side closed).
func readDone(b []byte, n int, err error) ([]byte, error) {
	switch {
	case err != nil:
		return nil, err
	case n == 0:
		return nil, io.EOF
	}
	return b[:n], nil
}

// readFD is read(2), again when a signal interrupted it.
func readFD(fd uintptr, b []byte) (int, error) {
	for {
		n, err := syscall.Read(int(fd), b)
		if err != syscall.EINTR {
			return n, err
		}
	}
}
