package credential

import (
	"sync"
	"time"
)

// Watchers tell the connections open on a credential (a WebSocket, an
// event stream) when to close: the token was revoked (EndToken), the
// sign-in session they were opened with ended (EndKey), or the credential
// expired. A nil *Watchers never ends anything but expiry.
type Watchers struct {
	mu sync.Mutex
	m  map[*watcher]struct{}
}

// NewWatchers returns an empty set.
func NewWatchers() *Watchers { return &Watchers{m: map[*watcher]struct{}{}} }

type watcher struct {
	tokenID, key string
	ended        chan struct{}
	once         sync.Once
	timer        *time.Timer
}

func (w *watcher) end() { w.once.Do(func() { close(w.ended) }) }

// Watch returns a channel closed once tokenID is ended (EndToken), key is
// ended (EndKey; "" matches no key), or at until (zero: never; measured
// from now by the caller's clock, then on the wall clock). stop releases
// the watch when the connection ends first.
func (ws *Watchers) Watch(tokenID, key string, until, now time.Time) (ended <-chan struct{}, stop func()) {
	w := &watcher{tokenID: tokenID, key: key, ended: make(chan struct{})}
	if ws != nil {
		ws.mu.Lock()
		ws.m[w] = struct{}{}
		ws.mu.Unlock()
	}
	if !until.IsZero() {
		w.timer = time.AfterFunc(until.Sub(now), w.end)
	}
	return w.ended, func() {
		if w.timer != nil {
			w.timer.Stop()
		}
		if ws != nil {
			ws.mu.Lock()
			delete(ws.m, w)
			ws.mu.Unlock()
		}
	}
}

// EndToken ends every watch of tokenID (it was revoked).
func (ws *Watchers) EndToken(tokenID string) {
	if tokenID != "" {
		ws.end(func(w *watcher) bool { return w.tokenID == tokenID })
	}
}

// EndKey ends every watch of key (the sign-in session it names ended).
func (ws *Watchers) EndKey(key string) {
	if key != "" {
		ws.end(func(w *watcher) bool { return w.key == key })
	}
}

func (ws *Watchers) end(match func(*watcher) bool) {
	if ws == nil {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.m {
		if match(w) {
			w.end()
		}
	}
}

// Watching counts the watches open (for tests: a released one is gone).
func (ws *Watchers) Watching() int {
	if ws == nil {
		return 0
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.m)
}
