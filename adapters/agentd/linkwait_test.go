package agentd

import (
	"context"
	"testing"
	"time"
)

// waitAwake waits what it is asked, and no longer than asked when ctx
// ends first.
func TestWaitAwakeWaitsItsTimeOrUntilCancelled(t *testing.T) {
	start := time.Now()
	if !waitAwake(context.Background(), 3*awakeSlice/2) {
		t.Fatal("waitAwake reported a cancel")
	}
	if took := time.Since(start); took < 3*awakeSlice/2 {
		t.Fatalf("waited %s of %s", took, 3*awakeSlice/2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if waitAwake(ctx, time.Hour) {
		t.Fatal("waitAwake of a cancelled context reported its time passed")
	}
}
