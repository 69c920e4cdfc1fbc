package agentrpc

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A spliced download's own loop, socket → pipe → socket, in place of
// io.CopyN's (net's splice): each call that moves bytes reports it, so
// the idle bounds are pushed back on progress instead of once per
// segment, and the waits are fewer. The agent's connection asks for a
// wake-up only once a good share of the pipe can be filled at once
// (SO_RCVLOWAT), where net's loop wakes for every few segments that
// arrive: a wake-up and two splices for each ~90 KiB, and the
// wake-ups were the larger part of agentic-mgmt's cost (perf). SPLICE_F_MORE tells the client's
// socket more follows, so it sends full segments.

// splicePipeBytes is the pipe's size: the most one splice moves.
const splicePipeBytes = 1 << 20

// spliceLowat is the agent connection's receive low-water mark while its
// bytes are spliced: how much it holds before the wait ends (fewer at its
// end of file). The kernel enlarges the socket's buffer to fit it.
const spliceLowat = 256 << 10

// spliceTick is the longest the low-water mark may hide bytes that came.
const spliceTick = time.Second

// spliceConns moves n bytes from src to dst as above. Each call that
// moves bytes pushes both deadlines idle on; src's read deadline is a
// tick shorter, so bytes the low-water mark hides (a slow agent) are
// found and count as moving. stop set (the agent ended with an error)
// ends it at once. handled is false (and nothing moved) when the two
// cannot be spliced here, and the caller copies them its own way. An
// early end of src is io.ErrUnexpectedEOF.
func spliceConns(dst, src net.Conn, n int64, idle time.Duration, stop *atomic.Bool) (written int64, handled bool, err error) {
	sc, ok := src.(syscall.Conn)
	dc, ok2 := dst.(syscall.Conn)
	if !ok || !ok2 {
		return 0, false, nil
	}
	rrc, err := sc.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	wrc, err := dc.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return 0, false, nil
	}
	defer func() { _ = unix.Close(p[0]); _ = unix.Close(p[1]) }()
	room, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETPIPE_SZ, splicePipeBytes)
	if err != nil {
		// Over the user's pipe budget: the default pipe still works.
		room = 64 << 10
	}
	lowat := func(n int) {
		_ = rrc.Control(func(fd uintptr) {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, n) //nolint:gosec // a descriptor fits an int
		})
	}
	lowat(min(spliceLowat, room))
	defer lowat(1) // the held byte and the end are read as usual
	tick := min(spliceTick, idle/4)
	moved := time.Now()
	// arm sets the deadlines from the last move; the stop is checked after,
	// so one set while they were armed is not overwritten.
	arm := func() {
		cut, next := moved.Add(idle), time.Now().Add(tick)
		if cut.Before(next) {
			next = cut
		}
		_ = dst.SetWriteDeadline(cut)
		_ = src.SetReadDeadline(next)
		if stop.Load() {
			_ = src.SetReadDeadline(time.Unix(1, 0))
			_ = dst.SetWriteDeadline(time.Unix(1, 0))
		}
	}
	arm()
	var inPipe int
	for written < n {
		if inPipe == 0 {
			want := int(min(n-written, int64(room)))
			var (
				m    int64
				serr error
			)
			for {
				err := rrc.Read(func(fd uintptr) bool {
					m, serr = spliceOnce(int(fd), p[1], want, unix.SPLICE_F_NONBLOCK|unix.SPLICE_F_MOVE) //nolint:gosec // a descriptor fits an int
					return !errors.Is(serr, unix.EAGAIN)
				})
				if err == nil {
					break
				}
				// A tick: what came meanwhile is taken by the next try.
				if !errors.Is(err, os.ErrDeadlineExceeded) || stop.Load() || time.Since(moved) >= idle {
					return written, true, err
				}
				arm()
			}
			if serr != nil {
				return written, true, serr
			}
			if m == 0 {
				return written, true, io.ErrUnexpectedEOF
			}
			inPipe = int(m)
			moved = time.Now()
			arm()
		}
		flags := unix.SPLICE_F_NONBLOCK | unix.SPLICE_F_MOVE
		if written+int64(inPipe) < n {
			flags |= unix.SPLICE_F_MORE
		}
		var (
			m    int64
			serr error
		)
		if err := wrc.Write(func(fd uintptr) bool {
			m, serr = spliceOnce(p[0], int(fd), inPipe, flags) //nolint:gosec // a descriptor fits an int
			return !errors.Is(serr, unix.EAGAIN)
		}); err != nil {
			return written, true, err
		}
		if serr == nil && m == 0 {
			serr = errors.New("the pipe gave nothing")
		}
		if serr != nil {
			return written, true, serr
		}
		inPipe -= int(m)
		written += m
		moved = time.Now()
		arm()
	}
	return written, true, nil
}

// spliceOnce is splice(2) without offsets, again when a signal cut it.
func spliceOnce(in, out, n, flags int) (int64, error) {
	for {
		m, err := unix.Splice(in, nil, out, nil, n, flags)
		if !errors.Is(err, unix.EINTR) {
			return m, err
		}
	}
}
