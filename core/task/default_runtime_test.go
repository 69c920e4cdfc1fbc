package task

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// A task naming no runtime takes the server's choice at its submit, which
// changes once a runtime found after start answers (make docker); one that
// names its runtime keeps it.
func TestTheDefaultRuntimeIsAskedAtEachSubmit(t *testing.T) {
	var choice atomic.Value
	choice.Store("host")
	s := New(Config{Store: portsfake.NewTaskStore(), Workspace: &fakeWorkspace{}, Environments: &fakeEnvs{envs: map[string]environment.Environment{}},
		Files: fakeFiles{}, Link: portsfake.NewLink(), Secrets: noSecrets{}, Clock: clock.Wall{}, IDs: &seq{}, DefaultRuntime: "host",
		Runtimes: []string{"host", "docker"}, DefaultRuntimeOf: func() string { return choice.Load().(string) }})
	t.Cleanup(s.Close)
	submit := func(manifest string) string {
		t.Helper()
		sub, err := s.Submit(context.Background(), []byte(manifest), "")
		if err != nil {
			t.Fatal(err)
		}
		return sub.Task.Environment.Runtime
	}
	if got := submit("command: {argv: [true]}\n"); got != "host" {
		t.Fatalf("before docker answers: %q", got)
	}
	choice.Store("docker")
	if got := submit("command: {argv: [true]}\n"); got != "docker" {
		t.Fatalf("once docker answers: %q", got)
	}
	if got := submit("command: {argv: [true]}\nenvironment: {runtime: host}\n"); got != "host" {
		t.Fatalf("a task naming host: %q", got)
	}
}
