package changes

import (
	"slices"
	"sync"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func TestAWatcherGetsTheUnionOfWhatChangedOnce(t *testing.T) {
	h := NewHub()
	h.Changed(ports.ChangeAgents) // nobody watching: dropped
	w, stop := h.Watch()
	defer stop()
	h.Changed(ports.ChangeTasks)
	h.Changed(ports.ChangeAgents | ports.ChangeHITL)
	select {
	case <-w.Wake():
	default:
		t.Fatal("no wake-up after a change")
	}
	if got := Names(w.Take()); !slices.Equal(got, []string{"agents", "hitl", "tasks"}) {
		t.Fatalf("took %v", got)
	}
	if got := w.Take(); got != 0 {
		t.Fatalf("a second Take without a change gave %v", Names(got))
	}
	select {
	case <-w.Wake():
		t.Fatal("woken twice for one burst")
	default:
	}
}

func TestAStoppedWatcherHearsNothingAndConcurrentChangesAreNotLost(t *testing.T) {
	h := NewHub()
	w, stop := h.Watch()
	other, stopOther := h.Watch()
	stopOther()
	stopOther() // twice is harmless
	var wg sync.WaitGroup
	for _, k := range ports.ChangeKinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				h.Changed(k.Kind)
			}
		}()
	}
	wg.Wait()
	if got := len(Names(w.Take())); got != len(ports.ChangeKinds) {
		t.Fatalf("took %d kinds, want all %d", got, len(ports.ChangeKinds))
	}
	if other.Take() != 0 {
		t.Fatal("a stopped watcher was told of changes")
	}
	stop()
	if h.count.Load() != 0 {
		t.Fatalf("%d watchers left", h.count.Load())
	}
}

func BenchmarkChangedWithoutWatchers(b *testing.B) {
	h := NewHub()
	for b.Loop() {
		h.Changed(ports.ChangeAgents)
	}
}
