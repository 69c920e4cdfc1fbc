package agentd

import (
	"context"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
)

// awakeSlice is the longest the agent sleeps at once while it waits to
// reconnect; frozenGap is how much longer than asked a slice must have
// taken for the agent to count itself as having been frozen. A container
// hibernated and woken at once is frozen for its dump and its restore,
// 0.2-0.8 s each here: the gap is under their sum.
const (
	awakeSlice = 250 * time.Millisecond
	frozenGap  = 150 * time.Millisecond
)

// waitToReconnect waits d before the next attempt (false if ctx ends
// first). Only a container's agent can be checkpointed and restored, so
// only it waits in slices: elsewhere a slice late under load would bring
// attempts forward for nothing, and many agents would wake four times a
// second while their server is away.
func (a *Agent) waitToReconnect(ctx context.Context, d time.Duration) bool {
	if a.cfg.Runtime == sandboxv1.RuntimeKind_RUNTIME_KIND_CONTAINER {
		return waitAwake(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// waitAwake waits d (false if ctx ends first) in slices of awakeSlice. It
// is done once d has passed on the monotonic or the wall clock, or as soon
// as a slice took far longer than asked: the agent was frozen meanwhile
// (its container checkpointed by CRIU and now restored, or paused and
// resumed), and its environment, just woken, waits for it. One long sleep
// would be resumed by the kernel for what was left of it, holding a woken
// agent for up to its whole backoff (5 s and more) before it reconnects.
// A slice that overran on a loaded machine only brings an attempt forward.
func waitAwake(ctx context.Context, d time.Duration) bool {
	start := time.Now()
	wall := start.Round(0).Add(d)
	for {
		left := min(d-time.Since(start), time.Until(wall))
		if left <= 0 {
			return true
		}
		slice := min(left, awakeSlice)
		before := time.Now()
		t := time.NewTimer(slice)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		if took := max(time.Since(before), time.Now().Round(0).Sub(before.Round(0))); took > slice+frozenGap {
			return true
		}
	}
}
