package agent

import (
	"reflect"
	"testing"
	"time"
)

// An agent awaited back (its environment hibernated) is not swept; Expired
// lists what the sweep would forget, awaited or not.
func TestSweepKeepsTheAgentsAwaitedBack(t *testing.T) {
	g := NewRegistry()
	ga, _ := g.Connect("a", Info{}, time.Second, t0)
	gb, _ := g.Connect("b", Info{}, time.Second, t0)
	g.Connect("c", Info{}, time.Second, t0)
	g.Disconnect("a", ga, t0)
	g.Disconnect("b", gb, t0)
	later := t0.Add(time.Hour)
	if got := g.Expired(later, time.Minute); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("expired %v", got)
	}
	if gone := g.Sweep(later, time.Minute, "a"); !reflect.DeepEqual(gone, []string{"b"}) {
		t.Fatalf("swept %v, want [b]", gone)
	}
	if _, ok := g.Get("a"); !ok {
		t.Fatal("the awaited agent was forgotten")
	}
	if gone := g.Sweep(later, time.Minute); !reflect.DeepEqual(gone, []string{"a"}) {
		t.Fatalf("no longer awaited: swept %v", gone)
	}
}
