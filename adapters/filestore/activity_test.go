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
