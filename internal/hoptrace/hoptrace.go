// Package hoptrace timestamps the hops of a byte through the processes of
// the stack (a keystroke: WebSocket → agentic-mgmt → agent → PTY and back),
// for the per-hop timeline of docs/benchmarks.md. It is a debugging aid,
// off unless a binary starts it (AGENTIC_HOP_TRACE, see hopenv): off, a
// Mark is one atomic load. On, a Mark appends "<unix ns> <hop>\n" to a
// buffer in memory that a goroutine writes out every flushEvery, so the
// path being timed pays no system call for it.
//
// It does no I/O of its own (the writer is given), so the core may mark too.
package hoptrace

import (
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// flushEvery is how often the marks are written out.
const flushEvery = 200 * time.Millisecond

var (
	on      atomic.Bool
	mu      sync.Mutex
	buf     []byte
	sink    atomic.Pointer[io.Writer]
	flusher sync.Once
)

// On reports whether marks are recorded.
func On() bool { return on.Load() }

// Mark records that hop happened now.
func Mark(hop string) {
	if !on.Load() {
		return
	}
	now := time.Now().UnixNano()
	mu.Lock()
	buf = strconv.AppendInt(buf, now, 10)
	buf = append(buf, ' ')
	buf = append(buf, hop...)
	buf = append(buf, '\n')
	mu.Unlock()
}

// Start records marks from now on and writes them to w every flushEvery,
// until the process ends. The first Start of a process chooses w.
func Start(w io.Writer) {
	if !on.CompareAndSwap(false, true) {
		return
	}
	sink.Store(&w)
	flusher.Do(func() {
		go func() {
			var out []byte
			for range time.Tick(flushEvery) {
				mu.Lock()
				out, buf = buf, out[:0]
				mu.Unlock()
				if len(out) > 0 {
					_, _ = (*sink.Load()).Write(out)
				}
			}
		}()
	})
}
