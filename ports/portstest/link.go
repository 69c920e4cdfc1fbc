package portstest

import (
	"context"
	"errors"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// LinkHarness is an agent link with two agents connected to it.
type LinkHarness struct {
	Link ports.AgentLink
	// Agent and Other are the ids of the connected agents. The commands
	// the suite starts on them need not run: it never waits for an end.
	Agent, Other string
}

// RunAgentLinkSuite checks the promises of ports.AgentLink that hold
// whatever the agent does: refusals, command ids, Lookup and Attach. open
// returns a fresh link for each subtest.
func RunAgentLinkSuite(t *testing.T, open func(t *testing.T) LinkHarness) {
	ctx := context.Background()
	spec := ports.CommandSpec{Command: "sleep", Args: []string{"600"}}
	start := func(t *testing.T, h LinkHarness, agent, id string) ports.Command {
		t.Helper()
		c, err := h.Link.Start(ctx, agent, spec, ports.StartOptions{Detached: true, CommandID: id})
		if err != nil {
			t.Fatalf("Start(%s, %q): %v", agent, id, err)
		}
		return c
	}

	t.Run("Refusals", func(t *testing.T) {
		h := open(t)
		if _, err := h.Link.Start(ctx, "no-such-agent", spec, ports.StartOptions{Detached: true}); !errors.Is(err, ports.ErrAgentNotFound) {
			t.Errorf("Start on an unknown agent = %v, want ErrAgentNotFound", err)
		}
		if _, err := h.Link.Start(ctx, h.Agent, ports.CommandSpec{}, ports.StartOptions{Detached: true}); err == nil {
			t.Error("Start of an empty command succeeded")
		}
	})

	t.Run("CommandIDs", func(t *testing.T) {
		h := open(t)
		c := start(t, h, h.Agent, "suite-chosen")
		if c.ID() != "suite-chosen" || c.AgentID() != h.Agent {
			t.Errorf("command %q on %q, want suite-chosen on %q", c.ID(), c.AgentID(), h.Agent)
		}
		a, b := start(t, h, h.Agent, ""), start(t, h, h.Other, "")
		if a.ID() == "" || a.ID() == b.ID() || a.ID() == c.ID() {
			t.Errorf("made-up ids %q and %q (beside %q) are not unique", a.ID(), b.ID(), c.ID())
		}
		if _, err := h.Link.Start(ctx, h.Other, spec, ports.StartOptions{Detached: true, CommandID: "suite-chosen"}); err == nil {
			t.Error("Start with an id in use succeeded")
		}
		if got, ok := h.Link.Lookup("suite-chosen"); !ok || got != c {
			t.Errorf("after a refused duplicate, Lookup = %v, %v; want the first command", got, ok)
		}
	})

	t.Run("Lookup", func(t *testing.T) {
		h := open(t)
		c := start(t, h, h.Agent, "")
		if got, ok := h.Link.Lookup(c.ID()); !ok || got != c {
			t.Errorf("Lookup(%q) = %v, %v; want the started command", c.ID(), got, ok)
		}
		if got, ok := h.Link.Lookup("suite-unknown"); ok {
			t.Errorf("Lookup of an unknown id found %v", got)
		}
	})

	t.Run("Attach", func(t *testing.T) {
		h := open(t)
		c := start(t, h, h.Agent, "suite-running")
		if got := h.Link.Attach(h.Agent, c.ID(), ports.StartOptions{}); got != c {
			t.Errorf("Attach to a running command gave %v, want the command", got)
		}
		// Naming another agent's command gives an ended, lost command,
		// never a handle on that agent's process.
		foreign := h.Link.Attach(h.Other, c.ID(), ports.StartOptions{})
		select {
		case <-foreign.Done():
			if r := foreign.Result(); r.Error != ports.ErrCommandLost.Error() || r.Success() {
				t.Errorf("Attach to another agent's command ended with %+v, want lost", r)
			}
		default:
			t.Error("Attach to another agent's command gave a running command")
		}
		if got, ok := h.Link.Lookup(c.ID()); !ok || got != c {
			t.Errorf("after a foreign Attach, Lookup = %v, %v; want the command", got, ok)
		}
		// An unknown id is bound, running until its agent reports on it.
		b := h.Link.Attach(h.Agent, "suite-earlier-run", ports.StartOptions{})
		if b.ID() != "suite-earlier-run" || b.AgentID() != h.Agent {
			t.Errorf("Attach bound %q on %q", b.ID(), b.AgentID())
		}
		select {
		case <-b.Done():
			t.Errorf("a bound command ended before its agent reported: %+v", b.Result())
		default:
		}
		if got, ok := h.Link.Lookup(b.ID()); !ok || got != b {
			t.Errorf("Lookup of a bound command = %v, %v", got, ok)
		}
	})
}
