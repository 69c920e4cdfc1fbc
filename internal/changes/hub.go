// Package changes fans "this collection changed" out to live watchers.
// A watcher gets the union of the kinds changed since it last looked, so a
// burst of changes (ten thousand heartbeats) costs it one wake-up, and a
// slow watcher never slows the code that reports a change.
package changes

import (
	"sync"
	"sync/atomic"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Hub is a ports.ChangeNotifier that watchers subscribe to.
type Hub struct {
	mu       sync.Mutex
	watchers map[*Watcher]struct{}
	count    atomic.Int32
}

func NewHub() *Hub { return &Hub{watchers: map[*Watcher]struct{}{}} }

// Watcher is one subscription: Wake fires when Take has something.
type Watcher struct {
	pending atomic.Uint32
	wake    chan struct{}
}

// Changed marks kinds changed for every watcher; with none it costs one
// atomic load.
func (h *Hub) Changed(kinds ports.ChangeKind) {
	if h.count.Load() == 0 || kinds == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		for {
			old := w.pending.Load()
			if w.pending.CompareAndSwap(old, old|uint32(kinds)) {
				break
			}
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// Watch subscribes; stop ends the subscription.
func (h *Hub) Watch() (w *Watcher, stop func()) {
	w = &Watcher{wake: make(chan struct{}, 1)}
	h.mu.Lock()
	h.watchers[w] = struct{}{}
	h.count.Add(1)
	h.mu.Unlock()
	return w, func() {
		h.mu.Lock()
		if _, ok := h.watchers[w]; ok {
			delete(h.watchers, w)
			h.count.Add(-1)
		}
		h.mu.Unlock()
	}
}

// Wake is readable when something changed since the last Take.
func (w *Watcher) Wake() <-chan struct{} { return w.wake }

// Take returns the kinds changed since the last Take, and forgets them.
func (w *Watcher) Take() ports.ChangeKind { return ports.ChangeKind(w.pending.Swap(0)) }

// Names lists the kinds' wire names in a fixed order.
func Names(kinds ports.ChangeKind) []string {
	var out []string
	for _, k := range ports.ChangeKinds {
		if kinds&k.Kind != 0 {
			out = append(out, k.Name)
		}
	}
	return out
}
