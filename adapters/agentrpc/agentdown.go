package agentrpc

import (
	"context"

	"github.com/agentic-sandbox/agentic-sandbox/core/agent"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

var _ ports.AgentDowner = (*Service)(nil)

// AgentDown implements ports.AgentDowner: the commands of a disconnected
// agent whose environment is gone end now as lost with their agent, as
// the sweep would end them after the disconnect grace, so that their
// callers are answered at once instead of minutes later. Kept sessions'
// commands run on (tmux outlives the agent; a restarted agent reports
// them). The agent stays in the registry, and a connected agent is left
// alone: it came back, and its report settles its commands.
func (s *Service) AgentDown(ctx context.Context, agentID, why string) {
	s.mu.Lock()
	if s.conns[agentID] != nil {
		s.mu.Unlock()
		return
	}
	ending := s.runningOn(agentID, func(cmd *command) bool { return !cmd.kept })
	s.mu.Unlock()
	for _, cmd := range ending {
		s.finish(cmd, agent.LostResult(false))
	}
	if len(ending) > 0 {
		s.log.WarnContext(ctx, "agent down with its environment; its commands are lost", "agent_id", agentID, "why", why, "commands_ended", len(ending))
	}
}
