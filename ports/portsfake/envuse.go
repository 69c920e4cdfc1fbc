package portsfake

import (
	"context"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// EnvironmentUse is a fake ports.EnvironmentUse: agents named asleep
// (Sleep) are woken by the first Use (concurrent ones wait for that one
// wake, as the real use case does), and it counts wakes, holds and
// touches per agent.
type EnvironmentUse struct {
	mu      sync.Mutex
	asleep  map[string]bool
	waking  map[string]chan struct{}
	wakes   map[string]int
	holds   map[string]int
	uses    map[string][]string
	touches map[string]map[string]int
	wakeErr error
	onWake  func(agentID string)
}

var _ ports.EnvironmentUse = (*EnvironmentUse)(nil)

// NewEnvironmentUse returns a fake whose agents are all awake.
func NewEnvironmentUse() *EnvironmentUse {
	return &EnvironmentUse{asleep: map[string]bool{}, waking: map[string]chan struct{}{}, wakes: map[string]int{},
		holds: map[string]int{}, uses: map[string][]string{}, touches: map[string]map[string]int{}}
}

// Sleep marks agentID's environment hibernated: the next Use wakes it.
func (u *EnvironmentUse) Sleep(agentID string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.asleep[agentID] = true
}

// FailWakes makes every wake fail with err (nil: wakes succeed again); the
// environment stays asleep.
func (u *EnvironmentUse) FailWakes(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.wakeErr = err
}

// OnWake sets a hook a wake runs, outside the lock, before it ends (a test
// may block it to see concurrent callers wait).
func (u *EnvironmentUse) OnWake(f func(agentID string)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.onWake = f
}

// Use implements ports.EnvironmentUse.
func (u *EnvironmentUse) Use(ctx context.Context, agentID, kind string) (func(), error) {
	u.mu.Lock()
	u.uses[agentID] = append(u.uses[agentID], kind)
	for u.asleep[agentID] {
		if w := u.waking[agentID]; w != nil {
			u.mu.Unlock()
			select {
			case <-w:
			case <-ctx.Done():
				return func() {}, ctx.Err()
			}
			u.mu.Lock()
			continue
		}
		w := make(chan struct{})
		u.waking[agentID] = w
		u.wakes[agentID]++
		hook := u.onWake
		u.mu.Unlock()
		if hook != nil {
			hook(agentID)
		}
		u.mu.Lock()
		delete(u.waking, agentID)
		close(w)
		if u.wakeErr != nil {
			err := u.wakeErr
			u.mu.Unlock()
			return func() {}, err
		}
		u.asleep[agentID] = false
	}
	u.holds[agentID]++
	u.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			u.mu.Lock()
			u.holds[agentID]--
			u.mu.Unlock()
		})
	}, nil
}

// Touch implements ports.EnvironmentUse.
func (u *EnvironmentUse) Touch(agentID, kind string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.touches[agentID] == nil {
		u.touches[agentID] = map[string]int{}
	}
	u.touches[agentID][kind]++
}

// Wakes counts the wakes of agentID's environment.
func (u *EnvironmentUse) Wakes(agentID string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.wakes[agentID]
}

// Holds counts the uses of agentID's environment not released yet.
func (u *EnvironmentUse) Holds(agentID string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.holds[agentID]
}

// Uses lists the kinds Use was called with for agentID, in order.
func (u *EnvironmentUse) Uses(agentID string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.uses[agentID]...)
}

// Touches counts the touches of agentID's environment by kind.
func (u *EnvironmentUse) Touches(agentID, kind string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.touches[agentID][kind]
}
