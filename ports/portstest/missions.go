// Package portstest holds conformance suites for the ports: every adapter
// of a port runs the same suite, so the promises in the port comments are
// checked once and kept by all of them.
package portstest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// base is a fixed instant, so records are reproducible. Terminal missions
// that ended around it are far in the past for any real clock, so a store
// with retention may archive them; the suite accepts either place.
var base = time.Date(2026, 5, 9, 7, 13, 22, 123456789, time.UTC)

// SampleMission returns a mission with every field set, n making it unique.
func SampleMission(n int) ports.Mission {
	exit := n % 3
	t := base.Add(time.Duration(n) * time.Second)
	return ports.Mission{
		ID:             fmt.Sprintf("mission-%04d", n),
		Objective:      fmt.Sprintf("echo %d && sleep 1", n),
		Completion:     "exits 0",
		LongRunning:    n%2 == 0,
		RequestHash:    fmt.Sprintf("%064x", n),
		Metadata:       []byte(fmt.Sprintf(`{"n":%d,"tag":"x\u00e9\n"}`, n)),
		State:          ports.MissionRunning,
		AgentID:        "host-01",
		SessionID:      fmt.Sprintf("sess-%d", n),
		AgentRuntime:   "host",
		CheckpointID:   fmt.Sprintf("ckpt-%d", n),
		HITL:           &ports.HITLRequest{ID: fmt.Sprintf("hitl-%d", n), Prompt: "Proceed? [y/N]", Context: "line1\nline2", CreatedAt: t.Add(3 * time.Second)},
		ExitCode:       &exit,
		Summary:        "tail of output",
		Reason:         "non_zero_exit",
		Error:          "boom",
		Iteration:      n,
		LastProgressAt: t.Add(2 * time.Second),
		EstimatedStart: t,
		CreatedAt:      t,
		UpdatedAt:      t.Add(4 * time.Second),
		StartedAt:      t.Add(time.Second),
		LastEvent:      "mission.progress",
	}
}

// MinimalMission returns a mission with only the required fields, so zero
// values (nil pointers, empty metadata, zero times) are exercised too.
func MinimalMission(id string) ports.Mission {
	return ports.Mission{
		ID:          id,
		Objective:   "true",
		RequestHash: "h-" + id,
		State:       ports.MissionAssigned,
		CreatedAt:   base,
		UpdatedAt:   base,
	}
}

// EqualMissions reports whether a and b hold the same record: reflect-equal
// except that times compare with Equal (a round trip through JSON drops the
// monotonic reading and may change the Location), and nil and empty
// Metadata are the same (omitempty cannot tell them apart).
func EqualMissions(a, b ports.Mission) bool {
	times := func(m *ports.Mission) []*time.Time {
		ts := []*time.Time{&m.LastProgressAt, &m.EstimatedStart, &m.CreatedAt, &m.UpdatedAt, &m.StartedAt, &m.EndedAt}
		if m.HITL != nil {
			ts = append(ts, &m.HITL.CreatedAt)
		}
		return ts
	}
	if (a.HITL == nil) != (b.HITL == nil) {
		return false
	}
	if a.HITL != nil {
		ha, hb := *a.HITL, *b.HITL
		a.HITL, b.HITL = &ha, &hb
	}
	ta, tb := times(&a), times(&b)
	for i := range ta {
		if !ta[i].Equal(*tb[i]) {
			return false
		}
		*ta[i], *tb[i] = time.Time{}, time.Time{}
	}
	if len(a.Metadata) == 0 && len(b.Metadata) == 0 {
		a.Metadata, b.Metadata = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

// missionHarness is a mission store under test.
type missionHarness struct {
	*underTest[ports.MissionStore]
}

func newMissionHarness(t *testing.T, open func(t *testing.T, dir string) ports.MissionStore) *missionHarness {
	return &missionHarness{newUnderTest(t, open)}
}

func (h *missionHarness) put(ms ...ports.Mission) {
	h.t.Helper()
	if err := h.cur.Put(context.Background(), ms...); err != nil {
		h.t.Fatalf("Put: %v", err)
	}
}

// onRecord returns the store's view of every id in want: live from Load,
// else from Archived; it fails if one is in neither.
func onRecord(t *testing.T, s ports.MissionStore, ids []string) map[string]ports.Mission {
	t.Helper()
	live, err := s.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	got := make(map[string]ports.Mission, len(live))
	for _, m := range live {
		if _, dup := got[m.ID]; dup {
			t.Fatalf("Load returned %s twice", m.ID)
		}
		got[m.ID] = m
	}
	for _, id := range ids {
		if _, ok := got[id]; ok {
			continue
		}
		m, ok, err := s.Archived(id)
		if err != nil {
			t.Fatalf("Archived(%s): %v", id, err)
		}
		if !ok {
			t.Fatalf("mission %s is neither live nor archived", id)
		}
		if !m.State.Terminal() {
			t.Fatalf("mission %s archived in non-terminal state %s", id, m.State)
		}
		got[id] = m
	}
	return got
}

// expectMissions fails unless the store holds exactly want (live or
// archived) and nothing else live.
func expectMissions(t *testing.T, s ports.MissionStore, want ...ports.Mission) {
	t.Helper()
	ids := make([]string, len(want))
	for i, m := range want {
		ids[i] = m.ID
	}
	got := onRecord(t, s, ids)
	if len(got) != len(want) {
		var extra []string
		for id := range got {
			extra = append(extra, id)
		}
		sort.Strings(extra)
		t.Fatalf("store holds %d missions %v, want %d", len(got), extra, len(want))
	}
	for _, w := range want {
		if g := got[w.ID]; !EqualMissions(g, w) {
			t.Fatalf("mission %s:\n got %+v\nwant %+v", w.ID, g, w)
		}
	}
}

// RunMissionStoreSuite checks the promises of ports.MissionStore. open must
// return a store using dir; it is called again on the same dir (after
// Close) to simulate a restart.
func RunMissionStoreSuite(t *testing.T, open func(t *testing.T, dir string) ports.MissionStore) {
	t.Run("EmptyStore", func(t *testing.T) {
		h := newMissionHarness(t, open)
		ms, err := h.cur.Load()
		if err != nil || len(ms) != 0 {
			t.Fatalf("Load on a new store = %v, %v", ms, err)
		}
		if _, ok, err := h.cur.Archived("nope"); ok || err != nil {
			t.Fatalf("Archived(unknown) = %v, %v", ok, err)
		}
		if err := h.cur.Put(context.Background()); err != nil {
			t.Fatalf("Put of nothing: %v", err)
		}
		ms, err = h.reopen().Load()
		if err != nil || len(ms) != 0 {
			t.Fatalf("Load after reopen = %v, %v", ms, err)
		}
	})

	t.Run("PutInsertReplace", func(t *testing.T) {
		h := newMissionHarness(t, open)
		a, b := SampleMission(1), MinimalMission("b")
		h.put(a, b)
		expectMissions(t, h.cur, a, b)

		a2 := a
		a2.State, a2.HITL, a2.Iteration = ports.MissionHITLRequired, &ports.HITLRequest{ID: "h2", Prompt: "ok?", CreatedAt: base}, 7
		c := MinimalMission("c")
		h.put(a2, c)
		expectMissions(t, h.cur, a2, b, c)

		// Within one Put the later record for an id wins.
		b2, b3 := b, b
		b2.Summary, b3.Summary = "first", "second"
		h.put(b2, b3)
		expectMissions(t, h.cur, a2, b3, c)
		expectMissions(t, h.reopen(), a2, b3, c)
	})

	t.Run("LoadAfterReopen", func(t *testing.T) {
		h := newMissionHarness(t, open)
		var want []ports.Mission
		for i := range 20 {
			m := SampleMission(i)
			switch i % 4 {
			case 1:
				m = MinimalMission(fmt.Sprintf("min-%d", i))
			case 2:
				// Times in another zone with a monotonic reading.
				m.CreatedAt = time.Now().In(time.FixedZone("X", 5*3600+1800))
				m.UpdatedAt = m.CreatedAt
			case 3:
				m.State, m.EndedAt = ports.MissionFailed, time.Now()
			}
			want = append(want, m)
			h.put(m)
		}
		expectMissions(t, h.cur, want...)
		expectMissions(t, h.reopen(), want...)
		expectMissions(t, h.reopen(), want...) // a reopen without writes changes nothing
	})

	t.Run("LoadReturnsCopies", func(t *testing.T) {
		h := newMissionHarness(t, open)
		m := SampleMission(3)
		h.put(m)
		want := SampleMission(3)
		// Changing what was passed to Put or got from Load must not
		// change the record.
		m.HITL.Prompt, m.Metadata[0], *m.ExitCode = "changed", 'X', 99
		ms, err := h.cur.Load()
		if err != nil || len(ms) != 1 {
			t.Fatalf("Load = %v, %v", ms, err)
		}
		ms[0].HITL.Prompt, ms[0].Summary = "changed", "changed"
		if len(ms[0].Metadata) > 0 {
			ms[0].Metadata[0] = 'Y'
		}
		expectMissions(t, h.cur, want)
	})

	t.Run("ConcurrentPuts", func(t *testing.T) {
		h := newMissionHarness(t, open)
		const workers, rounds = 16, 8
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for r := range rounds {
					m := MinimalMission(fmt.Sprintf("w%02d", w))
					m.Iteration = r
					other := MinimalMission(fmt.Sprintf("w%02d-r%d", w, r))
					if err := h.cur.Put(context.Background(), m, other); err != nil {
						t.Errorf("Put: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		var want []ports.Mission
		for w := range workers {
			m := MinimalMission(fmt.Sprintf("w%02d", w))
			m.Iteration = rounds - 1
			want = append(want, m)
			for r := range rounds {
				want = append(want, MinimalMission(fmt.Sprintf("w%02d-r%d", w, r)))
			}
		}
		expectMissions(t, h.cur, want...)
		expectMissions(t, h.reopen(), want...)
	})

	t.Run("PutWithCancelledContext", func(t *testing.T) {
		h := newMissionHarness(t, open)
		keep := MinimalMission("keep")
		h.put(keep)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		maybe := MinimalMission("maybe")
		putErr := h.cur.Put(ctx, maybe)
		if putErr != nil && !errors.Is(putErr, context.Canceled) {
			t.Fatalf("Put with a cancelled ctx = %v, want nil or context.Canceled", putErr)
		}
		// The store still works, and the mission is either wholly stored
		// (required when Put said so) or absent.
		later := MinimalMission("later")
		h.put(later)
		for _, s := range []ports.MissionStore{h.cur, h.reopen()} {
			ms, err := s.Load()
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, m := range ms {
				if m.ID == maybe.ID {
					found = true
					if !EqualMissions(m, maybe) {
						t.Fatalf("partial record %+v", m)
					}
				}
			}
			if putErr == nil && !found {
				t.Fatal("Put returned nil but the mission is not stored")
			}
			onRecord(t, s, []string{keep.ID, later.ID})
		}
	})

	t.Run("ContextEndsWhileWaiting", func(t *testing.T) {
		h := newMissionHarness(t, open)
		// Many short deadlines race with the write; each Put either
		// succeeds (and is stored) or reports the deadline.
		var wg sync.WaitGroup
		stored := make([]bool, 20)
		for i := range stored {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i)*100*time.Microsecond)
				defer cancel()
				err := h.cur.Put(ctx, MinimalMission(fmt.Sprintf("d%02d", i)))
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Put = %v", err)
				}
				stored[i] = err == nil
			})
		}
		wg.Wait()
		var ids []string
		for i, ok := range stored {
			if ok {
				ids = append(ids, fmt.Sprintf("d%02d", i))
			}
		}
		onRecord(t, h.reopen(), ids)
	})

	t.Run("Archived", func(t *testing.T) {
		h := newMissionHarness(t, open)
		// Missions that ended long ago may be archived by retention; every
		// one must stay findable, live or archived, across restarts.
		var want []ports.Mission
		for i := range 10 {
			m := SampleMission(100 + i)
			if i%2 == 0 {
				m.State = []ports.MissionState{ports.MissionCompleted, ports.MissionFailed, ports.MissionAborted}[i%3]
				m.EndedAt = base.Add(-30 * 24 * time.Hour)
			}
			want = append(want, m)
		}
		h.put(want[:5]...)
		h.put(want[5:]...)
		expectMissions(t, h.cur, want...)
		h.put(MinimalMission("trigger")) // a later write, when retention runs
		want = append(want, MinimalMission("trigger"))
		expectMissions(t, h.cur, want...)
		expectMissions(t, h.reopen(), want...)
		for _, m := range want {
			if !m.State.Terminal() {
				continue
			}
			if a, ok, err := h.cur.Archived(m.ID); err != nil || (ok && !EqualMissions(a, m)) {
				t.Fatalf("Archived(%s) = %+v, %v, %v", m.ID, a, ok, err)
			}
		}
		if _, ok, err := h.cur.Archived("unknown"); ok || err != nil {
			t.Fatalf("Archived(unknown) = %v, %v", ok, err)
		}
	})

	t.Run("PutAfterClose", func(t *testing.T) {
		h := newMissionHarness(t, open)
		h.put(MinimalMission("a"))
		if err := h.cur.Close(); err != nil {
			t.Fatal(err)
		}
		err := h.cur.Put(context.Background(), MinimalMission("b"))
		if !errors.Is(err, ports.ErrStoreUnavailable) {
			t.Fatalf("Put after Close = %v, want ErrStoreUnavailable", err)
		}
		h.cur = h.open(t, h.dir)
		expectMissions(t, h.cur, MinimalMission("a"))
	})
}
