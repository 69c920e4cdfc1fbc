package portstest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// SampleEvent returns an event whose Data survives a JSON round trip
// unchanged (numbers are float64, lists are []any), n making it unique.
func SampleEvent(n int) ports.Event {
	return ports.Event{
		Type:      "mission.progress",
		MissionID: fmt.Sprintf("mission-%d", n%7),
		TS:        base.Add(time.Duration(n) * time.Millisecond).Truncate(time.Millisecond),
		Data: map[string]any{
			"n":       float64(n),
			"summary": fmt.Sprintf("line %d\n\u00e9\x1b[0m", n),
			"ok":      n%2 == 0,
			"nested":  map[string]any{"list": []any{"x", float64(n), nil}},
		},
	}
}

// EqualEvents reports whether a and b are the same event: times compare
// with Equal, and nil and empty Data are the same.
func EqualEvents(a, b ports.Event) bool {
	if a.Seq != b.Seq || a.Type != b.Type || a.MissionID != b.MissionID || !a.TS.Equal(b.TS) {
		return false
	}
	if len(a.Data) == 0 && len(b.Data) == 0 {
		return true
	}
	return reflect.DeepEqual(a.Data, b.Data)
}

// outboxHarness is an outbox under test.
type outboxHarness struct {
	*underTest[ports.EventOutbox]
}

func newOutboxHarness(t *testing.T, open func(t *testing.T, dir string) ports.EventOutbox) *outboxHarness {
	return &outboxHarness{newUnderTest(t, open)}
}

// appendSamples appends SampleEvent(0) to SampleEvent(n-1), one Append
// each, and returns them as appended.
func (h *outboxHarness) appendSamples(n int) []ports.Event {
	h.t.Helper()
	var all []ports.Event
	for i := range n {
		all = append(all, h.append(SampleEvent(i))...)
	}
	return all
}

func (h *outboxHarness) ack(seq uint64) {
	h.t.Helper()
	if err := h.cur.Ack(seq); err != nil {
		h.t.Fatalf("Ack(%d): %v", seq, err)
	}
}

func (h *outboxHarness) append(evs ...ports.Event) []ports.Event {
	h.t.Helper()
	got, err := h.cur.Append(context.Background(), evs...)
	if err != nil {
		h.t.Fatalf("Append: %v", err)
	}
	if len(got) != len(evs) {
		h.t.Fatalf("Append returned %d events for %d", len(got), len(evs))
	}
	for i := range got {
		want := evs[i]
		want.Seq = got[i].Seq
		if !EqualEvents(got[i], want) {
			h.t.Fatalf("Append returned %+v for %+v", got[i], evs[i])
		}
	}
	return got
}

// expectPending fails unless Pending(after, max) is exactly want.
func expectPending(t *testing.T, box ports.EventOutbox, after uint64, max int, want []ports.Event) {
	t.Helper()
	got, err := box.Pending(after, max)
	if err != nil {
		t.Fatalf("Pending(%d, %d): %v", after, max, err)
	}
	if len(got) != len(want) {
		t.Fatalf("Pending(%d, %d) returned %d events (%v), want %d", after, max, len(got), seqs(got), len(want))
	}
	for i := range got {
		if !EqualEvents(got[i], want[i]) {
			t.Fatalf("Pending(%d, %d)[%d] = %+v, want %+v", after, max, i, got[i], want[i])
		}
	}
}

func seqs(evs []ports.Event) []uint64 {
	s := make([]uint64, len(evs))
	for i, e := range evs {
		s[i] = e.Seq
	}
	return s
}

func increasing(t *testing.T, after uint64, evs []ports.Event) {
	t.Helper()
	for _, e := range evs {
		if e.Seq <= after {
			t.Fatalf("seqs %v not increasing after %d", seqs(evs), after)
		}
		after = e.Seq
	}
}

// RunEventOutboxSuite checks the promises of ports.EventOutbox. open must
// return an outbox using dir; it is called again on the same dir (after
// Close) to simulate a restart.
func RunEventOutboxSuite(t *testing.T, open func(t *testing.T, dir string) ports.EventOutbox) {
	t.Run("AppendAssignsSeq", func(t *testing.T) {
		h := newOutboxHarness(t, open)
		if h.cur.Acked() != 0 {
			t.Fatalf("Acked on a new outbox = %d", h.cur.Acked())
		}
		expectPending(t, h.cur, 0, 10, nil)
		if got, err := h.cur.Append(context.Background()); err != nil || len(got) != 0 {
			t.Fatalf("Append of nothing = %v, %v", got, err)
		}
		first := h.append(SampleEvent(0), SampleEvent(1), SampleEvent(2))
		increasing(t, 0, first)
		// A Seq set by the caller is replaced.
		ev := SampleEvent(3)
		ev.Seq = first[0].Seq
		second := h.append(ev)
		increasing(t, first[2].Seq, second)
		// Data that is empty or nil is fine.
		third := h.append(ports.Event{Type: "executor.resync", TS: base}, ports.Event{Type: "x", TS: base, Data: map[string]any{}})
		increasing(t, second[0].Seq, third)
	})

	t.Run("PendingOrderAndLimits", func(t *testing.T) {
		h := newOutboxHarness(t, open)
		all := h.appendSamples(10)
		all = append(all, h.append(SampleEvent(10), SampleEvent(11))...)
		increasing(t, 0, all)
		expectPending(t, h.cur, 0, 100, all)
		expectPending(t, h.cur, 0, len(all), all)
		expectPending(t, h.cur, 0, 3, all[:3])
		expectPending(t, h.cur, all[4].Seq, 3, all[5:8])
		expectPending(t, h.cur, all[9].Seq, 100, all[10:])
		expectPending(t, h.cur, all[len(all)-1].Seq, 100, nil)
		expectPending(t, h.cur, all[len(all)-1].Seq+1000, 100, nil)
		// Pending does not consume anything.
		expectPending(t, h.cur, 0, 100, all)
	})

	t.Run("AckAndAckedSurviveReopen", func(t *testing.T) {
		h := newOutboxHarness(t, open)
		all := h.appendSamples(8)
		h.ack(all[2].Seq)
		if got := h.cur.Acked(); got != all[2].Seq {
			t.Fatalf("Acked = %d, want %d", got, all[2].Seq)
		}
		// Delivered events are no longer pending, whatever after says.
		expectPending(t, h.cur, 0, 100, all[3:])
		// Acked is the highest: a lower Ack does not move it back.
		h.ack(all[1].Seq)
		if got := h.cur.Acked(); got != all[2].Seq {
			t.Fatalf("Acked after a lower Ack = %d, want %d", got, all[2].Seq)
		}
		h.ack(all[5].Seq)
		box := h.reopen()
		if got := box.Acked(); got != all[5].Seq {
			t.Fatalf("Acked after reopen = %d, want %d", got, all[5].Seq)
		}
		expectPending(t, box, 0, 100, all[6:])
	})

	t.Run("AtLeastOnceAcrossReopen", func(t *testing.T) {
		h := newOutboxHarness(t, open)
		all := h.appendSamples(6)
		h.ack(all[1].Seq)
		// Read but not acked: delivered again after a restart.
		if _, err := h.cur.Pending(0, 100); err != nil {
			t.Fatal(err)
		}
		box := h.reopen()
		expectPending(t, box, 0, 100, all[2:])
		box = h.reopen()
		expectPending(t, box, all[3].Seq, 100, all[4:])
	})

	t.Run("SeqContinuesAfterReopen", func(t *testing.T) {
		h := newOutboxHarness(t, open)
		first := h.append(SampleEvent(0), SampleEvent(1))
		h.reopen()
		second := h.append(SampleEvent(2))
		increasing(t, first[1].Seq, second)
		// Even when everything was acknowledged (nothing left to read back).
		h.ack(second[0].Seq)
		h.reopen()
		expectPending(t, h.cur, 0, 100, nil)
		third := h.append(SampleEvent(3))
		increasing(t, second[0].Seq, third)
		expectPending(t, h.cur, 0, 100, third)
		expectPending(t, h.cur, second[0].Seq, 100, third)
	})

	t.Run("Notify", func(t *testing.T) {
		h := newOutboxHarness(t, open)
		n := h.cur.Notify()
		if cap(n) != 1 {
			t.Fatalf("Notify capacity %d, want 1", cap(n))
		}
		// Nobody reads: Appends must not block on the signal.
		h.appendSamples(5)
		select {
		case <-n:
		case <-time.After(5 * time.Second):
			t.Fatal("no signal after Append")
		}
		h.append(SampleEvent(5))
		select {
		case <-n:
		case <-time.After(5 * time.Second):
			t.Fatal("no signal after a second Append")
		}
	})

	t.Run("ConcurrentAppendsTotalOrder", func(t *testing.T) {
		h := newOutboxHarness(t, open)
		const workers, rounds = 12, 10
		type key struct{ w, r, i int }
		assigned := make(map[key]uint64)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				var last uint64
				for r := range rounds {
					batch := []ports.Event{SampleEvent(w), SampleEvent(w)}
					for i := range batch {
						batch[i].Data = map[string]any{"w": float64(w), "r": float64(r), "i": float64(i)}
					}
					got, err := h.cur.Append(context.Background(), batch[:1+r%2]...)
					if err != nil {
						t.Errorf("Append: %v", err)
						return
					}
					mu.Lock()
					for i, e := range got {
						if e.Seq <= last {
							t.Errorf("worker %d: seq %d after %d", w, e.Seq, last)
						}
						last = e.Seq
						assigned[key{w, r, i}] = e.Seq
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		check := func(box ports.EventOutbox) {
			t.Helper()
			evs, err := box.Pending(0, len(assigned)+10)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != len(assigned) {
				t.Fatalf("Pending has %d events, want %d", len(evs), len(assigned))
			}
			increasing(t, 0, evs)
			for _, e := range evs {
				k := key{int(e.Data["w"].(float64)), int(e.Data["r"].(float64)), int(e.Data["i"].(float64))}
				if assigned[k] != e.Seq {
					t.Fatalf("event %v has seq %d in Pending, %d from Append", k, e.Seq, assigned[k])
				}
			}
		}
		check(h.cur)
		check(h.reopen())
	})

	t.Run("AppendWithCancelledContext", func(t *testing.T) {
		h := newOutboxHarness(t, open)
		before := h.append(SampleEvent(0))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		got, err := h.cur.Append(ctx, SampleEvent(1))
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Append with a cancelled ctx = %v, want nil or context.Canceled", err)
		}
		after := h.append(SampleEvent(2))
		increasing(t, before[0].Seq, after)
		pending, perr := h.reopen().Pending(0, 100)
		if perr != nil {
			t.Fatal(perr)
		}
		if err == nil && len(pending) != 3 {
			t.Fatalf("Append said %v but Pending has %v", seqs(got), seqs(pending))
		}
		if len(pending) < 2 || !EqualEvents(pending[0], before[0]) || !EqualEvents(pending[len(pending)-1], after[0]) {
			t.Fatalf("Pending = %v", seqs(pending))
		}
	})

	t.Run("AppendAfterClose", func(t *testing.T) {
		h := newOutboxHarness(t, open)
		h.append(SampleEvent(0))
		if err := h.cur.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := h.cur.Append(context.Background(), SampleEvent(1)); err == nil {
			t.Fatal("Append after Close succeeded")
		}
		h.cur = h.open(t, h.dir)
		pending, err := h.cur.Pending(0, 10)
		if err != nil || len(pending) != 1 {
			t.Fatalf("Pending after reopen = %v, %v", seqs(pending), err)
		}
	})
}
