package environment

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// memActivity is a ports.ActivityStore in memory that counts its writes.
type memActivity struct {
	mu     sync.Mutex
	acts   map[string]ports.Activity
	writes int
}

func (m *memActivity) Activities(context.Context) (map[string]ports.Activity, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.acts), nil
}

func (m *memActivity) PutActivities(_ context.Context, acts map[string]ports.Activity) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.acts == nil {
		m.acts = map[string]ports.Activity{}
	}
	maps.Copy(m.acts, acts)
	m.writes++
	return nil
}

func (m *memActivity) DeleteActivity(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.acts, name)
	m.writes++
	return nil
}

func (m *memActivity) get(name string) (ports.Activity, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.acts[name], m.writes
}

// After a restart of the server an environment still says when it was
// last used and for what, and its idle policy counts from then: its
// agent coming back is no use. The activity is written in batches (one
// write for many uses), not per use.
func TestTheIdleClockCountsFromTheStoredActivityAfterARestart(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	clk := portsfake.NewClock(t0)
	store := &memActivity{}
	f := newFixture(t, time.Minute)
	rt := &sleeper{fakeRuntime: f.rt, agents: f.agents}
	f.svc.cfg.Runtimes = map[string]ports.Runtime{"sleeper": rt}
	f.svc.cfg.Clock, f.svc.cfg.Activity = clk, store
	if _, err := f.svc.Create(ctx, Request{Runtime: "sleeper", Name: "box", Idle: ports.IdlePolicy{IdleAfter: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	f.agents.Add(ports.AgentInfo{ID: "box", Status: ports.AgentReady, ConnectedAt: time.Now()})
	waitState(t, f.svc, "box", StateReady)

	clk.Advance(time.Minute)
	for range 100 { // output of a session: a touch each, no write each
		f.svc.Touch("box", ports.UseSession)
	}
	clk.Advance(4 * time.Minute)
	release, err := f.svc.Use(ctx, "box", ports.UseFiles)
	if err != nil {
		t.Fatal(err)
	}
	release()
	last := t0.Add(5 * time.Minute)
	if _, writes := store.get("box"); writes != 0 {
		t.Fatalf("%d writes of the activity while used, want them batched", writes)
	}
	f.svc.Close() // the server stops: what it knows is written, once
	if act, writes := store.get("box"); !act.At.Equal(last) || act.Kind != ports.UseFiles || writes != 1 {
		t.Fatalf("stored %+v in %d writes, want %s files in 1", act, writes, last)
	}

	// A new server 50 minutes later; the environment's agent comes back.
	clk.Advance(50 * time.Minute)
	f.agents.SetStatus("box", ports.AgentDisconnected)
	again := New(Config{Runtimes: map[string]ports.Runtime{"sleeper": rt}, Agents: f.agents, Credentials: f.creds, Clock: clk,
		Bootstrap: f.svc.cfg.Bootstrap, ReadyTimeout: time.Minute, Activity: store})
	t.Cleanup(again.Close)
	again.Recover(ctx)
	f.agents.Add(ports.AgentInfo{ID: "box", Status: ports.AgentReady, ConnectedAt: time.Now()})
	e := waitState(t, again, "box", StateReady)
	if !e.LastActivity.Equal(last) || e.LastActivityKind != ports.UseFiles {
		t.Fatalf("after the restart the record says %s %q, want %s files", e.LastActivity, e.LastActivityKind, last)
	}
	again.mu.Lock()
	idle := again.idleFor("box", again.envs["box"], clk.Now())
	again.mu.Unlock()
	if idle != 50*time.Minute {
		t.Fatalf("idle for %s after the restart, want 50m (counted from the stored activity)", idle)
	}
	// Ten minutes on, its hour is up: the idle keeper puts it to sleep.
	clk.Advance(10 * time.Minute)
	again.idleRound()
	if e := waitState(t, again, "box", StateHibernated); e.SleepReason != "idle for 1h0m0s" {
		t.Fatalf("sleep reason %q", e.SleepReason)
	}

	// Deleted, it is forgotten: a new one under its name starts afresh.
	if err := again.Delete(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if act, _ := store.get("box"); !act.At.IsZero() {
		t.Fatalf("a deleted environment's activity is still stored: %+v", act)
	}
}

// What the record of a hibernated environment says of its sleep outlives a
// restart of the server, though its runtime keeps none of it: why it went
// to sleep, and the error of a wake that failed on the host's side (still
// hibernated, the next wake tries again) or that found its saved state
// lost (failed). A successful wake clears it, in the store too.
func TestAWakesFailureOutlivesARestart(t *testing.T) {
	ctx := context.Background()
	store := &memActivity{}
	f, rt := sleepy(t, "box", ports.IdlePolicy{})
	f.svc.cfg.Activity = store
	restart := func(prev *Service) *Service {
		t.Helper()
		prev.Close()
		f.agents.SetStatus("box", ports.AgentDisconnected)
		s := New(Config{Runtimes: map[string]ports.Runtime{"sleeper": rt}, Agents: f.agents, Credentials: f.creds, Clock: prev.cfg.Clock,
			Bootstrap: prev.cfg.Bootstrap, ReadyTimeout: time.Minute, Activity: store})
		t.Cleanup(s.Close)
		s.Recover(ctx)
		return s
	}
	if _, err := f.svc.Hibernate(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if act, _ := store.get("box"); act.Sleep != (ports.Sleep{Reason: Requested}) {
		t.Fatalf("stored after the hibernation: %+v", act)
	}
	rt.mu.Lock()
	rt.wakeErr = errors.New("libvirt restore: internal error: process exited while connecting to monitor")
	rt.mu.Unlock()
	if _, err := f.svc.Wake(ctx, "box"); !errors.Is(err, ports.ErrWakeFailed) {
		t.Fatalf("wake: %v", err)
	}
	before, _ := f.svc.Get("box")
	if before.State != StateHibernated || !strings.Contains(before.Error, "connecting to monitor") {
		t.Fatalf("after the failed wake: %+v", before)
	}

	s := restart(f.svc)
	e := waitState(t, s, "box", StateHibernated)
	if e.Error != before.Error || e.SleepReason != Requested || e.SavedBytes != 4096 {
		t.Fatalf("after a restart: error %q, sleep reason %q, %d bytes; want %q, %q, 4096", e.Error, e.SleepReason, e.SavedBytes, before.Error, Requested)
	}

	// The next wake works: the error is gone, from the store too.
	rt.mu.Lock()
	rt.wakeErr = nil
	rt.mu.Unlock()
	if _, err := s.Wake(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if act, _ := store.get("box"); act.Sleep != (ports.Sleep{}) || act.Kind != ports.UseWake {
		t.Fatalf("stored after the wake: %+v", act)
	}
	s = restart(s)
	f.agents.Add(ports.AgentInfo{ID: "box", Status: ports.AgentReady, ConnectedAt: time.Now()})
	if e := waitState(t, s, "box", StateReady); e.Error != "" || e.SleepReason != "" {
		t.Fatalf("after a restart of a woken one: %+v", e)
	}

	// A wake that finds the saved state lost leaves it failed, and a
	// restart does not make it hibernated again (its runtime still says so).
	if _, err := s.Hibernate(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	rt.wakeErr = fmt.Errorf("%w: the checkpoint's files are gone", ports.ErrSavedStateLost)
	rt.mu.Unlock()
	if _, err := s.Wake(ctx, "box"); !errors.Is(err, ports.ErrWakeFailed) {
		t.Fatalf("wake: %v", err)
	}
	before, _ = s.Get("box")
	s = restart(s)
	if e := waitState(t, s, "box", StateFailed); e.Error != before.Error || !strings.Contains(e.Error, "files are gone") {
		t.Fatalf("after a restart of one whose wake found its state lost: %+v; before %+v", e, before)
	}
}
