package portsfake

import (
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Clock is a ports.Clock the test moves by hand. Its timers and tickers
// fire when Advance or Set moves the clock past them, never by the wall
// clock passing, so a test decides when they fire.
type Clock struct {
	mu      sync.Mutex
	base    time.Time
	off     time.Duration
	running bool // Now follows the wall clock, plus off
	calls   int
	waiters []*waiter
}

type waiter struct {
	at     time.Time
	period time.Duration // 0 for a timer
	ch     chan time.Time
}

var _ ports.Clock = (*Clock)(nil)

// NewClock returns a clock standing at start until Advance or Set move it.
func NewClock(start time.Time) *Clock { return &Clock{base: start} }

// NewRunningClock returns a clock that runs with the wall clock, moved
// ahead by every Advance: for a service whose own waits are real ones,
// so that its clock never stands still while it waits.
func NewRunningClock() *Clock { return &Clock{running: true} }

// Now implements ports.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return c.nowLocked()
}

func (c *Clock) nowLocked() time.Time {
	if c.running {
		return time.Now().Add(c.off)
	}
	return c.base.Add(c.off)
}

// Calls is how many times Now was called.
func (c *Clock) Calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// Advance moves the clock d ahead, fires the timers and tickers it passes,
// and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
	return c.fireLocked()
}

// Set moves a clock made by NewClock to t (backwards too) and fires the
// timers and tickers it passes.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base, c.off = t, 0
	c.fireLocked()
}

func (c *Clock) fireLocked() time.Time {
	now := c.nowLocked()
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		for !w.at.After(now) {
			select {
			case w.ch <- w.at:
			default: // a ticker drops ticks nobody takes, as time.Ticker does
			}
			if w.period == 0 {
				break
			}
			w.at = w.at.Add(w.period)
		}
		if w.at.After(now) {
			kept = append(kept, w)
		}
	}
	clear(c.waiters[len(kept):])
	c.waiters = kept
	return now
}

// After returns a channel that receives the clock's time once the clock
// has moved d ahead of now.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &waiter{at: c.nowLocked().Add(d), ch: make(chan time.Time, 1)}
	c.waiters = append(c.waiters, w)
	c.fireLocked()
	return w.ch
}

// Ticker is a ticker on a Clock.
type Ticker struct {
	C <-chan time.Time
	c *Clock
	w *waiter
}

// NewTicker returns a ticker that ticks every d of the clock's time.
func (c *Clock) NewTicker(d time.Duration) *Ticker {
	if d <= 0 {
		panic("portsfake: non-positive ticker period")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &waiter{at: c.nowLocked().Add(d), period: d, ch: make(chan time.Time, 1)}
	c.waiters = append(c.waiters, w)
	return &Ticker{C: w.ch, c: c, w: w}
}

// Stop stops the ticker; no tick follows.
func (t *Ticker) Stop() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, w := range t.c.waiters {
		if w == t.w {
			t.c.waiters = append(t.c.waiters[:i], t.c.waiters[i+1:]...)
			return
		}
	}
}
