package agentrpc

import (
	"context"
	"sync"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// awaitedAgents awaits the agents named back.
type awaitedAgents struct {
	ports.NoLinkReports
	mu      sync.Mutex
	awaited map[string]bool
}

func (a *awaitedAgents) AgentAwaited(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.awaited[id]
}

// An agent away on purpose (its environment hibernated) is kept past the
// disconnect grace with what it runs; the others are forgotten and their
// commands lost, as before; once no longer awaited, it goes too.
func TestAnAwaitedAgentOutlivesTheGraceWithItsCommands(t *testing.T) {
	rep := &awaitedAgents{awaited: map[string]bool{"agent-a": true}}
	h := newHarness(t, func(c *Config) { c.Reports = rep })
	cmds := map[string]ports.Command{}
	for _, id := range []string{"agent-a", "agent-b"} {
		a := h.connectAgent(id)
		cmd, err := h.svc.Start(context.Background(), id, ports.CommandSpec{Command: "sh", SessionType: ports.SessionInteractive}, ports.StartOptions{Detached: true})
		if err != nil {
			t.Fatal(err)
		}
		a.recv()
		cmds[id] = cmd
		a.hangUp()
		eventually(t, id+" seen disconnected", func() bool { return agentInfoOf(t, h.svc, id).Status == ports.AgentDisconnected })
	}
	h.clock.Advance(h.cfg.DisconnectGrace)
	h.svc.sweep()
	if r := waitDone(t, cmds["agent-b"]); r.Error != ports.ErrAgentGone.Error() {
		t.Fatalf("agent-b's command: %+v, want ErrAgentGone", r)
	}
	if _, ok := h.svc.Agent("agent-b"); ok {
		t.Fatal("agent-b still listed past the grace")
	}
	if i := agentInfoOf(t, h.svc, "agent-a"); i.RunningCommands != 1 || isDone(cmds["agent-a"]) {
		t.Fatalf("the awaited agent: %+v, its command done %v", i, isDone(cmds["agent-a"]))
	}

	rep.mu.Lock()
	rep.awaited["agent-a"] = false
	rep.mu.Unlock()
	h.svc.sweep()
	if r := waitDone(t, cmds["agent-a"]); r.Error != ports.ErrAgentGone.Error() {
		t.Fatalf("agent-a's command once not awaited: %+v", r)
	}
}
