package clock

import (
	"context"
	"time"
)

// Every calls f once per d until ctx ends, the first time d after the call.
// It is the housekeeping loop of the services (sweeps, retention, reaping):
// d is real time, whatever clock the service reads its timestamps from.
func Every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
