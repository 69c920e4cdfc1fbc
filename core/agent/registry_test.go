package agent

import (
	"reflect"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func TestStatusAt(t *testing.T) {
	const hb = 5 * time.Second
	connected := Record{Connected: true, ConnectedAt: t0, HeartbeatInterval: hb}
	with := func(f func(*Record)) Record { r := connected; f(&r); return r }
	tests := []struct {
		name string
		r    Record
		now  time.Time
		want ports.AgentStatus
	}{
		{"registered, no heartbeat yet", connected, t0.Add(time.Second), ports.AgentStarting},
		{"heartbeat, ready", with(func(r *Record) { r.LastHeartbeat = t0.Add(time.Second); r.Reported = ReportedReady }), t0.Add(2 * time.Second), ports.AgentReady},
		{"agent says starting", with(func(r *Record) { r.LastHeartbeat = t0; r.Reported = ReportedStarting }), t0, ports.AgentStarting},
		{"agent says busy", with(func(r *Record) { r.LastHeartbeat = t0; r.Reported = ReportedBusy }), t0, ports.AgentBusy},
		{"agent draining shows busy", with(func(r *Record) { r.LastHeartbeat = t0; r.Reported = ReportedDraining }), t0, ports.AgentBusy},
		{"server counts running commands", with(func(r *Record) { r.LastHeartbeat = t0; r.Reported = ReportedReady; r.RunningCommands = 2 }), t0, ports.AgentBusy},
		{"exactly 3 intervals silent is not stale yet", with(func(r *Record) { r.LastHeartbeat = t0; r.Reported = ReportedReady }), t0.Add(3 * hb), ports.AgentReady},
		{"more than 3 intervals silent is stale", with(func(r *Record) { r.LastHeartbeat = t0; r.Reported = ReportedReady }), t0.Add(3*hb + time.Millisecond), ports.AgentStale},
		{"stale beats busy", with(func(r *Record) { r.LastHeartbeat = t0; r.RunningCommands = 1 }), t0.Add(time.Minute), ports.AgentStale},
		{"never a heartbeat and silent: stale", connected, t0.Add(time.Minute), ports.AgentStale},
		{"disconnected beats everything", with(func(r *Record) { r.Connected = false; r.LastHeartbeat = t0; r.RunningCommands = 3 }), t0, ports.AgentDisconnected},
		{"no interval known: never stale", with(func(r *Record) { r.HeartbeatInterval = 0; r.LastHeartbeat = t0; r.Reported = ReportedReady }), t0.Add(time.Hour), ports.AgentReady},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := StatusAt(tc.r, tc.now); got != tc.want {
				t.Fatalf("StatusAt = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestRegistryConnectionLifecycle(t *testing.T) {
	g := NewRegistry()
	gen1, replaced := g.Connect("a", Info{Hostname: "h1"}, 5*time.Second, t0)
	if replaced {
		t.Fatal("first connection reported as replacing")
	}
	if ok, _ := g.Heartbeat("a", gen1, ReportedReady, t0.Add(time.Second)); !ok {
		t.Fatal("heartbeat on the live connection refused")
	}
	r, _ := g.Get("a")
	if StatusAt(r, t0.Add(time.Second)) != ports.AgentReady {
		t.Fatalf("status %s", StatusAt(r, t0.Add(time.Second)))
	}

	// A second connection with the same id replaces the first cleanly.
	gen2, replaced := g.Connect("a", Info{Hostname: "h2"}, 5*time.Second, t0.Add(2*time.Second))
	if !replaced || gen2 == gen1 {
		t.Fatalf("replace: replaced=%v gen1=%d gen2=%d", replaced, gen1, gen2)
	}
	if ok, _ := g.Heartbeat("a", gen1, ReportedReady, t0.Add(3*time.Second)); ok {
		t.Fatal("the replaced connection's heartbeat was accepted")
	}
	if g.Disconnect("a", gen1, t0.Add(3*time.Second)) {
		t.Fatal("the replaced connection's disconnect took the agent down")
	}
	r, _ = g.Get("a")
	if !r.Connected || r.Info.Hostname != "h2" || !g.IsCurrent("a", gen2) || g.IsCurrent("a", gen1) {
		t.Fatalf("after replace: %+v", r)
	}

	if !g.Disconnect("a", gen2, t0.Add(4*time.Second)) {
		t.Fatal("disconnect of the live connection refused")
	}
	if g.Disconnect("a", gen2, t0.Add(5*time.Second)) {
		t.Fatal("double disconnect accepted")
	}
	r, _ = g.Get("a")
	if StatusAt(r, t0.Add(4*time.Second)) != ports.AgentDisconnected || !r.DisconnectedAt.Equal(t0.Add(4*time.Second)) {
		t.Fatalf("after disconnect: %+v", r)
	}
	if ok, _ := g.Heartbeat("a", gen2, ReportedReady, t0.Add(5*time.Second)); ok {
		t.Fatal("heartbeat after disconnect accepted")
	}
}

func TestRegistrySweep(t *testing.T) {
	g := NewRegistry()
	ga, _ := g.Connect("a", Info{}, time.Second, t0)
	gb, _ := g.Connect("b", Info{}, time.Second, t0)
	g.Connect("c", Info{}, time.Second, t0)
	g.Disconnect("a", ga, t0)
	g.Disconnect("b", gb, t0.Add(30*time.Second))
	if gone := g.Sweep(t0.Add(59*time.Second), time.Minute); len(gone) != 0 {
		t.Fatalf("swept too early: %v", gone)
	}
	if gone := g.Sweep(t0.Add(time.Minute), time.Minute); !reflect.DeepEqual(gone, []string{"a"}) {
		t.Fatalf("swept %v, want [a]", gone)
	}
	if gone := g.Sweep(t0.Add(time.Hour), time.Minute); !reflect.DeepEqual(gone, []string{"b"}) {
		t.Fatalf("swept %v, want [b] (c is connected)", gone)
	}
	if _, ok := g.Get("a"); ok {
		t.Fatal("a still there")
	}
	// A swept agent that comes back is a fresh record.
	g.Connect("a", Info{}, time.Second, t0.Add(2*time.Hour))
	if ids := ids(g.All()); !reflect.DeepEqual(ids, []string{"a", "c"}) {
		t.Fatalf("All = %v", ids)
	}
}

func TestReconnectBeforeSweepKeepsTheRecord(t *testing.T) {
	g := NewRegistry()
	gen, _ := g.Connect("a", Info{}, time.Second, t0)
	g.CommandStarted("a")
	g.Disconnect("a", gen, t0.Add(time.Second))
	_, replaced := g.Connect("a", Info{}, time.Second, t0.Add(2*time.Second))
	if replaced {
		t.Fatal("reconnect after disconnect reported as replacing a live connection")
	}
	if gone := g.Sweep(t0.Add(time.Hour), time.Minute); len(gone) != 0 {
		t.Fatalf("reconnected agent swept: %v", gone)
	}
	r, _ := g.Get("a")
	if r.RunningCommands != 1 {
		t.Fatalf("commands still running on the agent were forgotten: %d", r.RunningCommands)
	}
}

func TestCommandCount(t *testing.T) {
	g := NewRegistry()
	g.Connect("a", Info{}, time.Second, t0)
	g.CommandStarted("a")
	g.CommandStarted("a")
	g.CommandEnded("a")
	g.CommandEnded("a")
	g.CommandEnded("a") // never negative
	g.CommandStarted("unknown")
	r, _ := g.Get("a")
	if r.RunningCommands != 0 {
		t.Fatalf("RunningCommands = %d", r.RunningCommands)
	}
}

func ids(rs []Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func TestAHeartbeatSaysWhetherTheStatusChanged(t *testing.T) {
	g := NewRegistry()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	gen, _ := g.Connect("a", Info{Hostname: "h"}, 5*time.Second, t0)
	for _, c := range []struct {
		at       time.Duration
		reported Reported
		want     bool
	}{
		{5 * time.Second, ReportedReady, true},  // the first: unknown → ready
		{8 * time.Second, ReportedReady, false}, // as it was: only the time moves
		{10 * time.Second, ReportedBusy, true},  // another status
		{15 * time.Second, ReportedBusy, false}, // the same again
		{40 * time.Second, ReportedBusy, true},  // it had gone stale
		{45 * time.Second, ReportedBusy, false},
	} {
		if ok, changed := g.Heartbeat("a", gen, c.reported, t0.Add(c.at)); !ok || changed != c.want {
			t.Fatalf("heartbeat at %s (%v): current %v, changed %v; want changed %v", c.at, c.reported, ok, changed, c.want)
		}
	}
}
