package agentrpc

import (
	"context"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Finished commands are kept for Lookup within a count as well as their
// retention: past MaxFinishedCommands the oldest-ended go first, running
// ones are never forgotten.
func TestFinishedCommandsAreBoundedInCount(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxFinishedCommands = 3; c.CommandRetention = time.Hour })
	a := h.connectAgent("agent-a")
	start := func() ports.Command {
		cmd, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "true"}, ports.StartOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a.recv()
		return cmd
	}
	running := start()
	var done []ports.Command
	for range 5 {
		cmd := start()
		a.send(result(cmd.ID(), ports.CommandResult{}))
		waitDone(t, cmd)
		h.clock.Advance(time.Second) // each ends after the one before
		done = append(done, cmd)
	}
	h.svc.sweep()
	for i, cmd := range done {
		if _, ok := h.svc.Lookup(cmd.ID()); ok != (i >= 2) {
			t.Errorf("finished command %d of 5: kept %v, want the last 3 kept", i, ok)
		}
	}
	if _, ok := h.svc.Lookup(running.ID()); !ok {
		t.Error("a running command was forgotten")
	}
	if New(Config{}).cfg.MaxFinishedCommands != DefaultMaxFinishedCommands {
		t.Error("no default bound")
	}
}
