package filestore

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The activity outlives the store (a restart of the server): what was put
// is read back by a store opened afresh on the same directory, a delete
// forgets one, and a damaged file is written afresh by the next put.
func TestActivityStoreOutlivesARestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := NewActivityStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 5, 22, 0, 0, 123, time.UTC)
	if err := s.PutActivities(ctx, map[string]ports.Activity{"a": {At: at, Kind: ports.UseExec}, "b": {At: at, Kind: ports.UseFiles}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutActivities(ctx, map[string]ports.Activity{"b": {At: at.Add(time.Second), Kind: ports.UseSession}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteActivity(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	again, _ := NewActivityStore(dir)
	got, err := again.Activities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got["b"].At.Equal(at.Add(time.Second)) || got["b"].Kind != ports.UseSession {
		t.Fatalf("after a reopen: %+v", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "activity.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := again.Activities(ctx); err == nil {
		t.Fatal("a damaged file read as if fine")
	}
	if err := again.PutActivities(ctx, map[string]ports.Activity{"c": {At: at, Kind: ports.UseWake}}); err != nil {
		t.Fatal(err)
	}
	if got, err := again.Activities(ctx); err != nil || len(got) != 1 || got["c"].Kind != ports.UseWake {
		t.Fatalf("after a put over a damaged file: %+v, %v", got, err)
	}
}

// What a hibernated environment's record says of its sleep is kept with
// its activity, also for one never used (no time), and read back after a
// reopen; a put of its whole entry without it clears it. A file written
// before sleeps were kept reads as entries without one.
func TestActivityStoreKeepsTheSleep(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := NewActivityStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	failed := ports.Sleep{Reason: "idle for 30m0s", WakeError: "wake: libvirt restore: internal error"}
	lost := ports.Sleep{Reason: "requested", WakeError: "wake: saved state lost", WakeLost: true}
	if err := s.PutActivities(ctx, map[string]ports.Activity{"a": {At: at, Kind: ports.UseWake, Sleep: failed}, "b": {Sleep: lost}, "c": {At: at, Kind: ports.UseExec}}); err != nil {
		t.Fatal(err)
	}
	again, _ := NewActivityStore(dir)
	got, err := again.Activities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got["a"].Sleep != failed || !got["a"].At.Equal(at) || got["b"].Sleep != lost || !got["b"].At.IsZero() || got["c"].Sleep != (ports.Sleep{}) {
		t.Fatalf("after a reopen: %+v", got)
	}
	if err := again.PutActivities(ctx, map[string]ports.Activity{"a": {At: at.Add(time.Second), Kind: ports.UseWake}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := again.Activities(ctx); got["a"].Sleep != (ports.Sleep{}) || got["b"].Sleep != lost {
		t.Fatalf("after a wake's put: %+v", got)
	}
	old := `{"x":{"at":"2026-12-05T22:00:00Z","kind":"exec"}}`
	if err := os.WriteFile(filepath.Join(dir, "activity.json"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := again.Activities(ctx); err != nil || got["x"].Kind != ports.UseExec || got["x"].Sleep != (ports.Sleep{}) {
		t.Fatalf("a file from before: %+v, %v", got, err)
	}
}
