package mission

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func ids(ms []ports.Mission) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

func TestMissionsListOldestFirstAndFilter(t *testing.T) {
	h := newHarness(t)
	h.dispatch("zz")
	h.clock.Advance(time.Second)
	h.run("aa")
	h.clock.Advance(time.Second)
	h.dispatch("mm")

	if got := ids(h.svc.Missions("")); !reflect.DeepEqual(got, []string{"zz", "aa", "mm"}) {
		t.Fatalf("Missions(\"\") = %v, want oldest first", got)
	}
	if got := ids(h.svc.Missions(ports.MissionRunning)); !reflect.DeepEqual(got, []string{"aa"}) {
		t.Fatalf("Missions(running) = %v", got)
	}
	if got := ids(h.svc.Missions(ports.MissionAssigned)); !reflect.DeepEqual(got, []string{"zz", "mm"}) {
		t.Fatalf("Missions(assigned) = %v", got)
	}
	if got := h.svc.Missions(ports.MissionCompleted); len(got) != 0 {
		t.Fatalf("Missions(completed) = %v", ids(got))
	}
}

func TestMissionLookup(t *testing.T) {
	h := newHarness(t)
	live := h.dispatch("live")
	if got := h.mission("live"); got.ID != "live" || got.SessionID != live.SessionID {
		t.Fatalf("Mission(live) = %+v", got)
	}
	code := 0
	old := ports.Mission{ID: "old", RequestHash: "h", State: ports.MissionCompleted, ExitCode: &code, CreatedAt: time.Unix(5, 0)}
	h.store.PutArchived(old)
	got, err := h.svc.Mission("old")
	if err != nil || got.ID != "old" || got.State != ports.MissionCompleted {
		t.Fatalf("Mission(old) = %+v, %v; want the archived record", got, err)
	}
	if _, err := h.svc.Mission("nope"); !errors.Is(err, ports.ErrMissionNotFound) {
		t.Fatalf("Mission(nope) = %v, want ErrMissionNotFound", err)
	}
	if ms := h.svc.Missions(""); !reflect.DeepEqual(ids(ms), []string{"live"}) {
		t.Fatalf("Missions lists %v; archived missions are not live", ids(ms))
	}
	h.store.SetArchivedErr(errDisk)
	if _, err := h.svc.Mission("nope"); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("Mission with the archive failing = %v, want ErrStoreUnavailable", err)
	}
	if _, err := h.svc.Mission("live"); err != nil {
		t.Fatalf("a live mission needs no archive: %v", err)
	}
}

func TestForgetArchived(t *testing.T) {
	h := newHarness(t)
	m1, c1 := h.run("done")
	emit(c1, "result\r\n")
	h.complete("done", c1)
	h.waitEnded(m1.SessionID)
	h.run("running")
	m3, c3 := h.run("failed")
	c3.Finish(ports.CommandResult{ExitCode: 1})
	h.waitEvent("failed", "mission.failed")
	h.waitEnded(m3.SessionID)

	// Nothing archived yet: nothing forgotten.
	h.svc.forgetArchived()
	if got := ids(h.svc.Missions("")); len(got) != 3 {
		t.Fatalf("Missions = %v before any archiving", got)
	}

	// The store archived "done"; it claims "running" too (it must not be
	// dropped while unfinished); its archive lookup of "failed" fails below.
	h.store.Archive("done")
	h.store.PutArchived(h.mission("running"))
	h.svc.forgetArchived()
	if got := ids(h.svc.Missions("")); !reflect.DeepEqual(got, []string{"running", "failed"}) {
		t.Fatalf("Missions = %v, want done forgotten", got)
	}
	got, err := h.svc.Mission("done")
	if err != nil || got.State != ports.MissionCompleted || got.Summary != "result\n" {
		t.Fatalf("Mission(done) after forgetting = %+v, %v; want the archived record", got, err)
	}
	// Still idempotent for a forgotten mission, and still not started twice.
	if m, err := h.svc.Dispatch(context.Background(), request("done")); err != nil || m.State != ports.MissionCompleted {
		t.Fatalf("re-dispatch of a forgotten mission = %q, %v", m.State, err)
	}
	if n := len(h.link.Starts()); n != 3 {
		t.Fatalf("%d sessions started, want 3", n)
	}

	h.store.Archive("failed")
	h.store.SetArchivedErr(errDisk)
	h.svc.forgetArchived()
	if got := ids(h.svc.Missions("")); !reflect.DeepEqual(got, []string{"running", "failed"}) {
		t.Fatalf("Missions = %v; a mission was forgotten while the archive could not answer", got)
	}
	h.store.SetArchivedErr(nil)
	h.svc.forgetArchived()
	if got := ids(h.svc.Missions("")); !reflect.DeepEqual(got, []string{"running"}) {
		t.Fatalf("Missions = %v", got)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.svc.Run(ctx); close(done) }()
	cancel()
	testkit.Receive(t, waitTimeout, done, "Run did not return after its context ended")
}
