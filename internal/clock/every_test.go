package clock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestEveryCallsUntilCtxEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, func() {
			if n.Add(1) == 3 {
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("Every did not return after ctx ended")
	}
	if got := n.Load(); got < 3 {
		t.Fatalf("f called %d times, want at least 3", got)
	}
}

func TestEveryReturnsAtOnceOnEndedCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	Every(ctx, time.Hour, func() { called = true })
	if called {
		t.Fatal("f called after ctx ended")
	}
}
