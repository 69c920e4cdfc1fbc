package portstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// OpenSessionLog opens the session log kept in dir, bounded to maxBytes per
// session. The suite closes what it opens; opening dir again must find what
// a closed log held.
type OpenSessionLog func(t *testing.T, dir string, maxBytes int64) ports.SessionLog

// RunSessionLogSuite is the conformance suite of ports.SessionLog. The bound
// contract it checks: a session holds at most maxBytes and at least its
// most recent min(End, maxBytes/2) bytes (room for segment-wise dropping).
func RunSessionLogSuite(t *testing.T, open OpenSessionLog) {
	t.Run("Empty", func(t *testing.T) { slEmpty(t, open) })
	t.Run("OffsetsMonotonic", func(t *testing.T) { slOffsets(t, open) })
	t.Run("ReplayFromAnyOffset", func(t *testing.T) { slReplay(t, open) })
	t.Run("BoundDropsOldestWithGap", func(t *testing.T) { slBound(t, open) })
	t.Run("HugeAppend", func(t *testing.T) { slHuge(t, open) })
	t.Run("ReopenKeepsOffsets", func(t *testing.T) { slReopen(t, open) })
	t.Run("Wait", func(t *testing.T) { slWait(t, open) })
	t.Run("Delete", func(t *testing.T) { slDelete(t, open) })
	t.Run("ReleaseKeepsTheLog", func(t *testing.T) { slRelease(t, open) })
	t.Run("Closed", func(t *testing.T) { slClosed(t, open) })
	t.Run("ConcurrentWriterAndReaders", func(t *testing.T) { slConcurrent(t, open, 8<<20) })
	t.Run("ConcurrentSlowReadersFallBehind", func(t *testing.T) { slConcurrent(t, open, 128<<10) })
}

// PatternAt fills b with the bytes the suite expects at offsets off..: the
// content depends only on the absolute offset, so any reader can check any
// range without a copy of the whole log.
func PatternAt(off uint64, b []byte) []byte {
	for i := range b {
		o := off + uint64(i)
		b[i] = byte(o ^ o>>8 ^ o>>16 ^ o>>24)
	}
	return b
}

// slRelease: a released log reads and appends on as before.
func slRelease(t *testing.T, open OpenSessionLog) {
	h := newSL(t, open, 1<<20)
	if _, err := h.log.Append("s1", []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := h.log.Release("s1"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := h.log.Release("never-written"); err != nil {
		t.Fatalf("Release of an unknown session: %v", err)
	}
	data, start, _, err := h.log.ReadFrom("s1", 0, 100)
	if err != nil || string(data) != "abc" || start != 0 {
		t.Fatalf("after Release: %q %d %v", data, start, err)
	}
	if off, err := h.log.Append("s1", []byte("def")); err != nil || off != 3 {
		t.Fatalf("Append after Release: %d %v", off, err)
	}
	if data, _, _, _ := h.log.ReadFrom("s1", 0, 100); string(data) != "abcdef" {
		t.Fatalf("read %q", data)
	}
}

type slHarness struct {
	t    *testing.T
	dir  string
	max  int64
	open OpenSessionLog
	log  ports.SessionLog
}

func newSL(t *testing.T, open OpenSessionLog, max int64) *slHarness {
	h := &slHarness{t: t, dir: t.TempDir(), max: max, open: open}
	h.log = open(t, h.dir, max)
	t.Cleanup(func() {
		if h.log != nil {
			h.log.Close()
		}
	})
	return h
}

func (h *slHarness) reopen() {
	h.t.Helper()
	if err := h.log.Close(); err != nil {
		h.t.Fatalf("Close: %v", err)
	}
	h.log = nil
	h.log = h.open(h.t, h.dir, h.max)
}

func (h *slHarness) append(id string, data []byte) uint64 {
	h.t.Helper()
	want := h.log.End(id)
	off, err := h.log.Append(id, data)
	if err != nil {
		h.t.Fatalf("Append(%s, %d bytes): %v", id, len(data), err)
	}
	if off != want {
		h.t.Fatalf("Append(%s) offset %d, want End before it, %d", id, off, want)
	}
	if end := h.log.End(id); end != off+uint64(len(data)) {
		h.t.Fatalf("End after Append = %d, want %d", end, off+uint64(len(data)))
	}
	return off
}

// appendPattern appends n pattern bytes in chunks of 1..maxChunk bytes.
func (h *slHarness) appendPattern(id string, n, maxChunk int, rng *rand.Rand) {
	h.t.Helper()
	for n > 0 {
		c := min(n, 1+rng.IntN(maxChunk))
		end := h.log.End(id)
		h.append(id, PatternAt(end, make([]byte, c)))
		n -= c
	}
}

// readAll reads from off to End in reads of at most max bytes and checks
// that they join without overlap or hole after the first one.
func readAll(t *testing.T, log ports.SessionLog, id string, off uint64, max int) (data []byte, start uint64, gap bool) {
	t.Helper()
	end := log.End(id)
	next := off
	for first := true; ; first = false {
		chunk, s, g, err := log.ReadFrom(id, next, max)
		if err != nil {
			t.Fatalf("ReadFrom(%s, %d, %d): %v", id, next, max, err)
		}
		if first {
			start, gap = s, g
		} else if g || s != next {
			t.Fatalf("ReadFrom(%s, %d) continued at %d, gap %v", id, next, s, g)
		}
		if len(chunk) > max && max > 0 {
			t.Fatalf("ReadFrom returned %d bytes, max %d", len(chunk), max)
		}
		data = append(data, chunk...)
		next = s + uint64(len(chunk))
		if len(chunk) == 0 {
			if next != end {
				t.Fatalf("ReadFrom(%s, %d) returned nothing before End %d", id, next, end)
			}
			return data, start, gap
		}
	}
}

func expectBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes, want %d; first difference at %d", what, len(got), len(want), i)
	}
}

func slEmpty(t *testing.T, open OpenSessionLog) {
	h := newSL(t, open, 1<<20)
	if first, end := h.log.Bounds("nobody"); first != 0 || end != 0 || h.log.End("nobody") != 0 {
		t.Fatalf("Bounds of an unknown session = %d, %d", first, end)
	}
	data, start, gap, err := h.log.ReadFrom("nobody", 0, 100)
	if err != nil || len(data) != 0 || start != 0 || gap {
		t.Fatalf("ReadFrom(unknown, 0) = %q, %d, %v, %v", data, start, gap, err)
	}
	if _, _, _, err := h.log.ReadFrom("nobody", 1, 100); !errors.Is(err, ports.ErrOffsetBeyondEnd) {
		t.Fatalf("ReadFrom past End: %v", err)
	}
	if off := h.append("s", nil); off != 0 {
		t.Fatalf("empty Append at %d", off)
	}
}

func slOffsets(t *testing.T, open OpenSessionLog) {
	h := newSL(t, open, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string]uint64{}
	for i := range 300 {
		id := fmt.Sprintf("s%d", i%3)
		n := rng.IntN(5000)
		if i%17 == 0 {
			n = 0
		}
		off := h.append(id, PatternAt(want[id], make([]byte, n)))
		if off != want[id] {
			t.Fatalf("append %d to %s at %d, want %d", i, id, off, want[id])
		}
		want[id] += uint64(n)
	}
	for id, end := range want {
		if _, e := h.log.Bounds(id); e != end {
			t.Fatalf("Bounds(%s) end %d, want %d", id, e, end)
		}
		data, start, gap := readAll(t, h.log, id, 0, 1<<16)
		if start != 0 || gap {
			t.Fatalf("%s: start %d gap %v", id, start, gap)
		}
		expectBytes(t, id, data, PatternAt(0, make([]byte, end)))
	}
}

func slReplay(t *testing.T, open OpenSessionLog) {
	h := newSL(t, open, 1<<20)
	rng := rand.New(rand.NewPCG(3, 4))
	h.appendPattern("s", 200_000, 9000, rng)
	end := h.log.End("s")
	ref := PatternAt(0, make([]byte, end))

	// A caller's buffer may be reused after Append; returned data is the caller's.
	buf := []byte("abc")
	off := h.append("t", buf)
	buf[0] = 'X'
	got, _, _, _ := h.log.ReadFrom("t", off, 10)
	if string(got) != "abc" {
		t.Fatalf("log aliases the Append buffer: %q", got)
	}
	got[1] = 'Y'
	if again, _, _, _ := h.log.ReadFrom("t", off, 10); string(again) != "abc" {
		t.Fatalf("ReadFrom aliases the log: %q", again)
	}

	offsets := []uint64{0, 1, end - 1, end}
	for range 40 {
		offsets = append(offsets, rng.Uint64N(end))
	}
	for _, off := range offsets {
		max := 1 + rng.IntN(70_000)
		data, start, gap := readAll(t, h.log, "s", off, max)
		if start != off || gap {
			t.Fatalf("ReadFrom(%d): start %d gap %v", off, start, gap)
		}
		expectBytes(t, fmt.Sprintf("replay from %d by %d", off, max), data, ref[off:])
	}
	if data, start, gap, err := h.log.ReadFrom("s", 10, 0); err != nil || len(data) != 0 || start != 10 || gap {
		t.Fatalf("ReadFrom max 0 = %d bytes, %d, %v, %v", len(data), start, gap, err)
	}
	if _, _, _, err := h.log.ReadFrom("s", end+1, 10); !errors.Is(err, ports.ErrOffsetBeyondEnd) {
		t.Fatalf("ReadFrom past End: %v", err)
	}
}

// checkBound checks the bound contract and that what is held is exactly
// what was appended there.
func checkBound(t *testing.T, h *slHarness, id string) (first, end uint64) {
	t.Helper()
	first, end = h.log.Bounds(id)
	held := end - first
	if held > uint64(h.max) || held < min(end, uint64(h.max/2)) || first > end {
		t.Fatalf("Bounds = [%d, %d): holds %d bytes, bound %d", first, end, held, h.max)
	}
	return first, end
}

func slBound(t *testing.T, open OpenSessionLog) {
	h := newSL(t, open, 64<<10)
	rng := rand.New(rand.NewPCG(5, 6))
	var lastFirst uint64
	for range 200 {
		h.appendPattern("s", 1+rng.IntN(12_000), 4000, rng)
		first, _ := checkBound(t, h, "s")
		if first < lastFirst {
			t.Fatalf("first held offset went back from %d to %d", lastFirst, first)
		}
		lastFirst = first
	}
	first, end := checkBound(t, h, "s")
	if first == 0 {
		t.Fatal("nothing dropped")
	}
	data, start, gap := readAll(t, h.log, "s", 0, 1<<20)
	if !gap || start != first {
		t.Fatalf("ReadFrom(0) after dropping: start %d gap %v, want %d true", start, gap, first)
	}
	expectBytes(t, "held bytes", data, PatternAt(first, make([]byte, end-first)))
	if _, start, gap, _ := h.log.ReadFrom("s", first-1, 10); !gap || start != first {
		t.Fatalf("ReadFrom(first-1): start %d gap %v", start, gap)
	}
	if _, start, gap, _ := h.log.ReadFrom("s", first, 10); gap || start != first {
		t.Fatalf("ReadFrom(first): start %d gap %v", start, gap)
	}
	// Other sessions have their own bound.
	h.append("other", []byte("x"))
	if f, e := h.log.Bounds("other"); f != 0 || e != 1 {
		t.Fatalf("other session: [%d, %d)", f, e)
	}
}

func slHuge(t *testing.T, open OpenSessionLog) {
	h := newSL(t, open, 64<<10)
	h.append("s", PatternAt(0, make([]byte, 1000)))
	big := PatternAt(1000, make([]byte, 300<<10))
	if off := h.append("s", big); off != 1000 {
		t.Fatalf("offset %d", off)
	}
	first, end := checkBound(t, h, "s")
	data, start, gap := readAll(t, h.log, "s", 0, 1<<20)
	if !gap || start != first {
		t.Fatalf("start %d gap %v", start, gap)
	}
	expectBytes(t, "tail of a huge append", data, PatternAt(first, make([]byte, end-first)))
	h.append("s", PatternAt(end, make([]byte, 10)))
	checkBound(t, h, "s")
}

func slReopen(t *testing.T, open OpenSessionLog) {
	h := newSL(t, open, 64<<10)
	rng := rand.New(rand.NewPCG(7, 8))
	h.appendPattern("small", 5000, 700, rng)
	h.appendPattern("big", 500_000, 20_000, rng)
	h.append("gone", []byte("bye"))
	if err := h.log.Delete("gone"); err != nil {
		t.Fatal(err)
	}
	type bounds struct{ first, end uint64 }
	before := map[string]bounds{}
	for _, id := range []string{"small", "big"} {
		f, e := checkBound(t, h, id)
		before[id] = bounds{f, e}
	}
	for round := range 3 {
		h.reopen()
		for _, id := range []string{"small", "big"} {
			f, e := checkBound(t, h, id)
			if e != before[id].end || f < before[id].first {
				t.Fatalf("round %d %s: [%d, %d) after reopen, was %+v", round, id, f, e, before[id])
			}
			data, start, _ := readAll(t, h.log, id, f, 1<<16)
			if start != f {
				t.Fatalf("%s: start %d, want %d", id, start, f)
			}
			expectBytes(t, id+" after reopen", data, PatternAt(f, make([]byte, e-f)))
			// Offsets continue where they were: none is handed out twice.
			n := 1 + rng.IntN(3000)
			if off := h.append(id, PatternAt(e, make([]byte, n))); off != e {
				t.Fatalf("%s: first Append after reopen at %d, want %d", id, off, e)
			}
			before[id] = bounds{f, e + uint64(n)}
		}
		if f, e := h.log.Bounds("gone"); f != 0 || e != 0 {
			t.Fatalf("deleted log back after reopen: [%d, %d)", f, e)
		}
	}
}

func slWait(t *testing.T, open OpenSessionLog) {
	h := newSL(t, open, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.append("s", []byte("hello"))
	if err := h.log.Wait(ctx, "s", 4); err != nil {
		t.Fatalf("Wait below End: %v", err)
	}

	// Blocks at End until the next Append, also for a session not yet written.
	for _, id := range []string{"s", "fresh"} {
		at := h.log.End(id)
		done := make(chan error, 1)
		go func() { done <- h.log.Wait(ctx, id, at) }()
		select {
		case err := <-done:
			t.Fatalf("Wait(%s, End) returned before an Append: %v", id, err)
		case <-time.After(50 * time.Millisecond):
		}
		h.append(id, []byte("!"))
		if err := <-done; err != nil {
			t.Fatalf("Wait(%s): %v", id, err)
		}
	}

	short, cancelShort := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancelShort()
	if err := h.log.Wait(short, "s", h.log.End("s")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with expiring ctx: %v", err)
	}

	// Delete and Close wake waiters with their errors.
	done := make(chan error, 2)
	go func() { done <- h.log.Wait(ctx, "s", h.log.End("s")) }()
	time.Sleep(20 * time.Millisecond)
	if err := h.log.Delete("s"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ports.ErrSessionNotFound) {
		t.Fatalf("Wait across Delete: %v", err)
	}
	go func() { done <- h.log.Wait(ctx, "x", 0) }()
	time.Sleep(20 * time.Millisecond)
	h.log.Close()
	if err := <-done; !errors.Is(err, ports.ErrSessionLogClosed) {
		t.Fatalf("Wait across Close: %v", err)
	}
	h.log = nil
}

func slDelete(t *testing.T, open OpenSessionLog) {
	h := newSL(t, open, 1<<20)
	h.append("a", []byte("aaaa"))
	h.append("b", []byte("bbbb"))
	if err := h.log.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if err := h.log.Delete("never-was"); err != nil {
		t.Fatalf("Delete of an unknown session: %v", err)
	}
	if f, e := h.log.Bounds("a"); f != 0 || e != 0 {
		t.Fatalf("deleted: [%d, %d)", f, e)
	}
	if data, _, _, err := h.log.ReadFrom("a", 0, 10); err != nil || len(data) != 0 {
		t.Fatalf("deleted data %q, %v", data, err)
	}
	data, _, _ := readAll(t, h.log, "b", 0, 10)
	if string(data) != "bbbb" {
		t.Fatalf("other session after Delete: %q", data)
	}
}

func slClosed(t *testing.T, open OpenSessionLog) {
	h := newSL(t, open, 1<<20)
	h.append("s", []byte("x"))
	if err := h.log.Close(); err != nil {
		t.Fatal(err)
	}
	log := h.log
	h.log = nil
	if _, err := log.Append("s", []byte("y")); !errors.Is(err, ports.ErrSessionLogClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	if _, _, _, err := log.ReadFrom("s", 0, 1); !errors.Is(err, ports.ErrSessionLogClosed) {
		t.Fatalf("ReadFrom after Close: %v", err)
	}
	if err := log.Wait(context.Background(), "s", 5); !errors.Is(err, ports.ErrSessionLogClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	if err := log.Delete("s"); !errors.Is(err, ports.ErrSessionLogClosed) {
		t.Fatalf("Delete after Close: %v", err)
	}
}

// slConcurrent runs one writer per session and several readers following
// each with Wait and ReadFrom: every reader sees every byte it reads at its
// own offset, in order, once, and a gap only where bytes were dropped, so
// none at all when the bound holds everything; with a small bound, the slow
// reader falls behind it.
func slConcurrent(t *testing.T, open OpenSessionLog, bound int64) {
	h := newSL(t, open, bound)
	const total = 2 << 20
	ids := []string{"s1", "s2"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w, id := range ids {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			var off uint64
			for off < total {
				n := min(total-int(off), 1+rng.IntN(16<<10))
				got, err := h.log.Append(id, PatternAt(off, make([]byte, n)))
				if err != nil || got != off {
					errs <- fmt.Errorf("writer %s: Append at %d: %d, %v", id, off, got, err)
					return
				}
				off += uint64(n)
			}
		})
		for r := range 4 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), uint64(r)))
				var off uint64
				gaps := 0
				for off < total {
					if err := h.log.Wait(ctx, id, off); err != nil {
						errs <- fmt.Errorf("reader %s/%d: Wait(%d): %v", id, r, off, err)
						return
					}
					data, start, gap, err := h.log.ReadFrom(id, off, 1+rng.IntN(64<<10))
					switch {
					case err != nil:
						errs <- fmt.Errorf("reader %s/%d: ReadFrom(%d): %v", id, r, off, err)
						return
					case gap != (start > off) || start < off:
						errs <- fmt.Errorf("reader %s/%d: ReadFrom(%d) start %d gap %v", id, r, off, start, gap)
						return
					case len(data) == 0:
						errs <- fmt.Errorf("reader %s/%d: nothing at %d after Wait", id, r, off)
						return
					case !bytes.Equal(data, PatternAt(start, make([]byte, len(data)))):
						errs <- fmt.Errorf("reader %s/%d: wrong bytes at %d", id, r, start)
						return
					}
					if gap {
						gaps++
					}
					off = start + uint64(len(data))
					if r == 3 && rng.IntN(4) == 0 {
						time.Sleep(time.Millisecond) // a slow reader, to fall behind the bound
					}
				}
				if off != total {
					errs <- fmt.Errorf("reader %s/%d ended at %d", id, r, off)
				}
				if bound >= total && gaps > 0 {
					errs <- fmt.Errorf("reader %s/%d: %d gaps though nothing was dropped", id, r, gaps)
				}
				t.Logf("reader %s/%d: %d gap notices", id, r, gaps)
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
