package portsfake

import (
	"testing"
	"time"
)

func fired(ch <-chan time.Time) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestClockFiresTimersAndTickersOnAdvance(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewClock(t0)
	if first := c.Now(); !first.Equal(t0) || !c.Now().Equal(first) {
		t.Fatal("a hand clock moved by itself")
	}
	timer := c.After(10 * time.Second)
	tick := c.NewTicker(3 * time.Second)
	if got := c.Advance(9 * time.Second); !got.Equal(t0.Add(9*time.Second)) || fired(timer) {
		t.Fatalf("at %v: timer fired early", got)
	}
	if !fired(tick.C) || fired(tick.C) {
		t.Fatal("9 s of 3 s ticks: want one tick held, the others dropped")
	}
	c.Advance(time.Second)
	if !fired(timer) {
		t.Fatal("timer did not fire at its time")
	}
	c.Advance(time.Hour)
	if fired(timer) {
		t.Fatal("a timer fired twice")
	}
	tick.Stop()
	_ = fired(tick.C)
	c.Advance(time.Hour)
	if fired(tick.C) {
		t.Fatal("a stopped ticker ticked")
	}
	if c.After(0); c.Calls() != 2 {
		t.Fatalf("Calls = %d, want 2", c.Calls())
	}
	c.Set(t0)
	if !c.Now().Equal(t0) {
		t.Fatal("Set did not set")
	}
}

func TestRunningClockFollowsTheWallClock(t *testing.T) {
	c := NewRunningClock()
	before := time.Now()
	c.Advance(time.Hour)
	if got := c.Now(); got.Before(before.Add(time.Hour)) {
		t.Fatalf("Now = %v, want at least an hour after %v", got, before)
	}
}
