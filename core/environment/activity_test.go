package environment

import (
	"context"
	"maps"
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
