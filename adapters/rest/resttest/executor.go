package resttest

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Executor is an in-memory ports.ExecutorLink holding an executor token.
type Executor struct {
	mu         sync.Mutex
	configured bool
	registered bool
	id         string
	token      string
	status     ports.ExecutorStatus
	reconnects int
}

var _ ports.ExecutorLink = (*Executor)(nil)

// NewExecutor returns a configured, registered link with the given
// executor id and token.
func NewExecutor(id, token string) *Executor {
	return &Executor{
		configured: true,
		registered: true,
		id:         id,
		token:      token,
		status: ports.ExecutorStatus{
			Connected: true,
			Endpoint:  "http://aiwg.test:7337",
			SandboxID: "sbx-1",
		},
	}
}

// SetConfigured turns the integration on or off.
func (x *Executor) SetConfigured(on bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.configured = on
}

// SetRegistered says whether the executor registration holds the token.
func (x *Executor) SetRegistered(on bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.registered = on
}

// SetStatus sets what Status reports beyond Configured and ExecutorID.
func (x *Executor) SetStatus(st ports.ExecutorStatus) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.status = st
}

// Configured implements ports.ExecutorLink.
func (x *Executor) Configured() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.configured
}

// Registered implements ports.ExecutorLink.
func (x *Executor) Registered() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.configured && x.registered
}

// ExecutorID implements ports.ExecutorLink.
func (x *Executor) ExecutorID() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.id
}

// VerifyToken implements ports.ExecutorLink, in constant time.
func (x *Executor) VerifyToken(token string) bool {
	x.mu.Lock()
	want, ok := x.token, x.configured && x.registered
	x.mu.Unlock()
	if !ok || token == "" || want == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// Status implements ports.ExecutorLink.
func (x *Executor) Status() ports.ExecutorStatus {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.configured {
		return ports.ExecutorStatus{}
	}
	st := x.status
	st.Configured = true
	if x.registered {
		st.ExecutorID = x.id
	}
	return st
}

// Reconnect implements ports.ExecutorLink; it counts the calls.
func (x *Executor) Reconnect() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.reconnects++
}

// Reconnects is how often Reconnect was called.
func (x *Executor) Reconnects() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.reconnects
}

// Flush implements ports.ExecutorLink: nothing is ever pending.
func (x *Executor) Flush(ctx context.Context) error { return ctx.Err() }
