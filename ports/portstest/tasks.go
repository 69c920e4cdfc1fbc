package portstest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// RunTaskStoreSuite is the conformance suite of ports.TaskStore; open
// returns a store kept in dir (the same dir again is the store reopened).
func RunTaskStoreSuite(t *testing.T, open func(t *testing.T, dir string) ports.TaskStore) {
	ctx := context.Background()
	at := time.Date(2026, 12, 4, 1, 2, 3, 4000000, time.UTC)
	rec := func(id string) ports.TaskRecord {
		code := 3
		return ports.TaskRecord{ID: id, Name: "n-" + id, Labels: map[string]string{"team": "core"}, State: "running",
			CreatedAt: at, StateChangedAt: at, Phases: []ports.TaskPhase{{State: "pending", At: at}, {State: "running", At: at.Add(time.Second)}},
			Manifest: "command: {argv: [true]}", ManifestSHA256: "ab", Environment: ports.TaskEnvironment{Name: "task-" + id, Runtime: "host"},
			ExitCode: &code, Progress: ports.TaskProgress{OutputBytes: 10, Turns: 2, CostUSD: 0.5, LastActivityAt: at},
			Artifacts: []ports.Artifact{{Name: "a/b.txt", Size: 3, SHA256: "cd", ContentType: "text/plain"}}}
	}
	t.Run("RoundTripAndReopen", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		if err := s.Put(ctx, rec("t1")); err != nil {
			t.Fatal(err)
		}
		got, err := open(t, dir).Get(ctx, "t1")
		if err != nil || !reflect.DeepEqual(got, rec("t1")) {
			t.Fatalf("reopened: %+v %v\nwant %+v", got, err, rec("t1"))
		}
		next := rec("t1")
		next.State = "completed"
		if err := s.Put(ctx, next); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Get(ctx, "t1"); got.State != "completed" {
			t.Fatalf("after a second Put: %s", got.State)
		}
	})
	t.Run("NotFoundAndBadIDs", func(t *testing.T) {
		s := open(t, t.TempDir())
		for _, id := range []string{"nope", "../x", "", "a/b", ".hidden"} {
			if _, err := s.Get(ctx, id); !errors.Is(err, ports.ErrTaskNotFound) {
				t.Errorf("Get(%q): %v", id, err)
			}
		}
		for _, id := range []string{"../x", "", "a/b"} {
			if err := s.Put(ctx, rec(id)); err == nil {
				t.Errorf("Put(%q) stored", id)
			}
		}
	})
	t.Run("ListAndDelete", func(t *testing.T) {
		s := open(t, t.TempDir())
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			go func() { defer wg.Done(); _ = s.Put(ctx, rec(fmt.Sprintf("t%d", i))) }()
		}
		wg.Wait()
		l, err := s.List(ctx)
		if err != nil || len(l) != 20 {
			t.Fatalf("List: %d %v", len(l), err)
		}
		if err := s.Delete(ctx, "t3"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "t3"); !errors.Is(err, ports.ErrTaskNotFound) {
			t.Fatalf("after Delete: %v", err)
		}
		if l, _ := s.List(ctx); len(l) != 19 {
			t.Fatalf("List after Delete: %d", len(l))
		}
	})
}
