package task

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// A task submitted with a label scope carries the scope's labels over its
// manifest's, and so does the environment it runs in (but for a label an
// environment may not carry); a task of the same id in another scope is a
// conflict that does not return it.
func TestSubmitScopedCarriesTheScope(t *testing.T) {
	envs := &fakeEnvs{envs: map[string]environment.Environment{}}
	s := New(Config{Store: portsfake.NewTaskStore(), Workspace: &fakeWorkspace{}, Environments: envs,
		Files: fakeFiles{}, Link: portsfake.NewLink(), Secrets: noSecrets{}, Clock: clock.Wall{}, IDs: &seq{}, DefaultRuntime: "host"})
	t.Cleanup(s.Close)
	scope := map[string]string{"team": "payments"}
	manifest := "metadata: {id: t-1, labels: {team: search, owner: ana, note: \"two words\"}}\ncommand: {argv: [true]}\n"
	sub, err := s.SubmitScoped(context.Background(), []byte(manifest), "", scope)
	if err != nil {
		t.Fatal(err)
	}
	if l := sub.Task.Labels; l["team"] != "payments" || l["owner"] != "ana" || l["note"] != "two words" {
		t.Fatalf("task labels %v", l)
	}
	testkit.Eventually(t, 15*time.Second, "the task's environment", func() bool {
		envs.mu.Lock()
		defer envs.mu.Unlock()
		return len(envs.requests) == 1
	})
	envs.mu.Lock()
	got := envs.requests[0].Labels
	envs.mu.Unlock()
	if got["team"] != "payments" || got["owner"] != "ana" || len(got) != 2 {
		t.Fatalf("the environment's labels %v (a value with a space cannot be one)", got)
	}
	// Same id, another scope: a conflict naming nothing of the task.
	_, err = s.SubmitScoped(context.Background(), []byte(manifest), "", map[string]string{"team": "search"})
	if !errors.Is(err, ports.ErrTaskConflict) || strings.Contains(err.Error(), "t-1") {
		t.Fatalf("another scope's resubmit: %v", err)
	}
	// The same scope gets its task back.
	again, err := s.SubmitScoped(context.Background(), []byte(manifest), "", scope)
	if err != nil || again.Task.ID != "t-1" {
		t.Fatalf("the same scope's resubmit: %+v %v", again, err)
	}
}

// More labels than an environment takes: the environment gets the first
// MaxLabels (by key) it may carry, and the task still runs.
func TestEnvLabelsAreBounded(t *testing.T) {
	labels := map[string]string{"bad key": "x"}
	for i := range environment.MaxLabels + 5 {
		labels[fmt.Sprintf("k%02d", i)] = "v"
	}
	got := envLabels(labels)
	if len(got) != environment.MaxLabels || got["k00"] != "v" || got["bad key"] != "" {
		t.Fatalf("%d labels: %v", len(got), got)
	}
	if err := environment.CheckLabels(got); err != nil {
		t.Fatal(err)
	}
	if envLabels(nil) != nil {
		t.Fatal("labels out of none")
	}
}
