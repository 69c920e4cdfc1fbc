package agentrpc

import (
	"context"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/core/agent"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// AgentDown (the agent's environment is gone) ends the commands of the
// disconnected agent at once, as lost with their agent, not after the
// disconnect grace; a kept session's command runs on (tmux outlives the
// agent), and the agent stays known. A connected agent is never touched.
func TestAgentDownEndsPlainCommandsButKeptSessions(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	ctx := context.Background()
	plain, err := h.svc.Start(ctx, "agent-a", ports.CommandSpec{Command: "sleep"}, ports.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()
	bg, err := h.svc.Start(ctx, "agent-a", ports.CommandSpec{Command: "make"}, ports.StartOptions{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()
	kept, err := h.svc.Start(ctx, "agent-a", ports.CommandSpec{Command: "npm", SessionType: ports.SessionBackground}, ports.StartOptions{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	a.recv()

	// Connected: nothing ends.
	h.svc.AgentDown(ctx, "agent-a", "test")
	a.barrier()
	if isDone(plain) || isDone(bg) || isDone(kept) {
		t.Fatal("AgentDown ended a connected agent's commands")
	}

	a.hangUp()
	eventually(t, "agent-a disconnected", func() bool { return agentInfoOf(t, h.svc, "agent-a").Status == ports.AgentDisconnected })
	h.svc.AgentDown(ctx, "agent-a", "test")
	for _, cmd := range []ports.Command{plain, bg} {
		if got := waitDone(t, cmd); got != agent.LostResult(false) {
			t.Fatalf("%s: %+v, want %+v", cmd.ID(), got, agent.LostResult(false))
		}
	}
	if isDone(kept) {
		t.Fatalf("the kept session's command ended: %+v", kept.Result())
	}
	if i := agentInfoOf(t, h.svc, "agent-a"); i.RunningCommands != 1 || i.KeptSessions != 1 {
		t.Fatalf("agent-a after AgentDown: %d running, %d kept; want it known with the kept session only", i.RunningCommands, i.KeptSessions)
	}
	// Looked up later (GET of a background command), it is still lost.
	if c, ok := h.svc.Lookup(bg.ID()); !ok || c.Result() != agent.LostResult(false) {
		t.Fatalf("lookup of %s after AgentDown: %v %+v", bg.ID(), ok, c)
	}
}
