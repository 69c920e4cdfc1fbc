package rest

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// finishedEntry adds a command to s that wrote out bytes of stdout and then
// ended at the clock's now.
func finishedEntry(s *commandStore, clock *portsfake.Clock, id string, out int) *entry {
	e := newEntry("a1", DefaultMaxOutputBytes, false)
	e.id = id
	s.add(id, e)
	e.onOutput(ports.OutputChunk{Stream: ports.StreamStdout, Data: bytes.Repeat([]byte{'x'}, out)})
	e.finish(ports.CommandResult{}, clock.Now())
	clock.Advance(time.Millisecond)
	return e
}

func TestFinishedCommandsBoundedByCount(t *testing.T) {
	clock := portsfake.NewClock(time.Date(2026, 5, 9, 7, 0, 0, 0, time.UTC))
	s := newCommandStore(clock, 3, 1<<30)
	running := newEntry("a1", 1024, false)
	s.add("running", running)
	var first *entry
	for i := range 5 {
		e := finishedEntry(s, clock, fmt.Sprint("c", i), 10)
		if i == 0 {
			first = e
		}
	}
	// The next access sweeps: the two oldest go, the running one stays.
	for i, want := range []bool{false, false, true, true, true} {
		e, ok, expired := s.get(fmt.Sprint("c", i))
		if ok != want || expired == want || (ok && e == nil) {
			t.Errorf("c%d: held %v expired %v, want held %v", i, ok, expired, want)
		}
	}
	if _, ok, _ := s.get("running"); !ok {
		t.Error("a running command was let go")
	}
	if _, ok, expired := s.get("never"); ok || expired {
		t.Errorf("an unknown id: held %v expired %v", ok, expired)
	}
	if n, _ := s.held(); n != 3 {
		t.Errorf("%d finished held, want 3", n)
	}
	// The evicted entry dropped its output at once, and drops what arrives late.
	first.onOutput(ports.OutputChunk{Stream: ports.StreamStdout, Data: []byte("late")})
	if sz := first.stdout.size() + first.stderr.size(); sz != 0 {
		t.Errorf("an expired entry holds %d bytes", sz)
	}
}

func TestFinishedCommandsBoundedByBytes(t *testing.T) {
	clock := portsfake.NewClock(time.Date(2026, 5, 9, 7, 0, 0, 0, time.UTC))
	const each = 100 << 10
	s := newCommandStore(clock, 1000, 3*each+each/2)
	for i := range 6 {
		finishedEntry(s, clock, fmt.Sprint("c", i), each)
	}
	for i := range 6 {
		_, ok, expired := s.get(fmt.Sprint("c", i))
		if want := i >= 3; ok != want || expired == want {
			t.Errorf("c%d: held %v expired %v, want held %v", i, ok, expired, want)
		}
	}
	n, b := s.held()
	if n != 3 || b > 3*each+each/2 {
		t.Errorf("held %d results of %d bytes, want 3 within %d", n, b, 3*each+each/2)
	}
	// A finished command holds its output, not its ring's spare room.
	if b != 3*each {
		t.Errorf("held %d bytes for 3 outputs of %d", b, each)
	}
}

// The expired ids remembered are bounded too: the oldest are forgotten.
func TestExpiredIDsAreBounded(t *testing.T) {
	clock := portsfake.NewClock(time.Date(2026, 5, 9, 7, 0, 0, 0, time.UTC))
	s := newCommandStore(clock, 0, 0)
	for i := range maxExpiredIDs + 10 {
		e := newEntry("a1", 16, false)
		s.add(fmt.Sprint("c", i), e)
		e.finish(ports.CommandResult{}, clock.Now())
	}
	s.get("sweep")
	if len(s.expired) != maxExpiredIDs || len(s.order) != maxExpiredIDs {
		t.Fatalf("%d expired ids remembered (%d in order), want %d", len(s.expired), len(s.order), maxExpiredIDs)
	}
	if _, _, expired := s.get("c0"); expired {
		t.Error("the oldest expired id is still remembered")
	}
	if _, _, expired := s.get(fmt.Sprint("c", maxExpiredIDs+9)); !expired {
		t.Error("the newest expired id is forgotten")
	}
}

// Many commands with large outputs finishing one after another: the heap
// stays within the byte bound (plus the running ones and slack), where
// before only the count bounded it (1000 results of up to 2×64 MiB).
func TestFinishedCommandsMemoryStaysBounded(t *testing.T) {
	clock := portsfake.NewClock(time.Date(2026, 5, 9, 7, 0, 0, 0, time.UTC))
	const bound = 16 << 20
	s := newCommandStore(clock, RetainFinishedCount, bound)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	var peak uint64
	for i := range 1000 { // 500 MiB of output in all
		finishedEntry(s, clock, fmt.Sprint("c", i), 512<<10)
		if i%100 == 99 {
			peak = max(peak, heap()-min(base, heap()))
		}
	}
	n, b := s.held()
	t.Logf("held %d results, %d MiB; peak heap growth %d MiB", n, b>>20, peak>>20)
	if b > bound {
		t.Errorf("held %d bytes over the bound %d", b, bound)
	}
	if peak > bound+16<<20 {
		t.Errorf("heap grew %d MiB with a bound of %d MiB", peak>>20, bound>>20)
	}
}

// The exec call's collector lets go of the output once taken: the link keeps
// the command, and the collector with it, long after the call returned.
func TestCollectorLetsGoOnceTaken(t *testing.T) {
	c := &collector{max: 1 << 20}
	c.add(ports.OutputChunk{Stream: ports.StreamStdout, Data: []byte("out")})
	c.add(ports.OutputChunk{Stream: ports.StreamStderr, Data: []byte("err")})
	out, errb, _ := c.take()
	if string(out) != "out" || string(errb) != "err" {
		t.Fatalf("took %q %q", out, errb)
	}
	c.add(ports.OutputChunk{Stream: ports.StreamStdout, Data: []byte("late")})
	if c.stdout != nil || c.stderr != nil {
		t.Fatalf("the collector still holds %q %q", c.stdout, c.stderr)
	}
}
