package agentrpc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/agentic-sandbox/agentic-sandbox/core/agent"
	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The directory of agents: who is known and connected (the registry and
// the live connections), retiring and renaming them, which are held, and
// the queries the rest of the server lists them with.

// RetireAgent implements ports.AgentRetirer: the agent leaves the registry
// at once (not after the disconnect grace), its stream is closed and every
// command it ran, detached ones too, ends with reason.
func (s *Service) RetireAgent(_ context.Context, agentID, reason string) {
	s.mu.Lock()
	c := s.conns[agentID]
	delete(s.conns, agentID)
	known := s.registry.Forget(agentID)
	ending := s.runningOn(agentID, nil)
	s.mu.Unlock()
	if c != nil {
		c.closeWith(connect.NewError(connect.CodePermissionDenied, errors.New("agent retired: "+reason)))
	}
	for _, cmd := range ending {
		s.finish(cmd, ports.CommandResult{ExitCode: -1, Error: reason})
	}
	// Its spans are not taken any more: the relay keeps nothing of it.
	s.cfg.Tracing.Relay().Forget(agentID)
	if known {
		s.log.Info("agent retired", "agent_id", agentID, "reason", reason, "commands_ended", len(ending))
		kinds := ports.ChangeAgents
		if c != nil && !c.listening.UpdatedAt.IsZero() {
			kinds |= ports.ChangePorts
		}
		s.cfg.Changes.Changed(kinds)
	}
}

// RenameAgent implements ports.AgentRenamer: the agent is told its new
// identity over its own stream; it ends the stream and registers again as
// newID (whose credential the caller stored first).
func (s *Service) RenameAgent(ctx context.Context, agentID, newID, newSecret string) error {
	if !ValidAgentID(newID) || newSecret == "" {
		return fmt.Errorf("%w: a rename needs a valid id and a secret", ports.ErrInvalidSpec)
	}
	c, err := s.liveConn(agentID)
	if err != nil {
		return err
	}
	s.log.InfoContext(ctx, "agent renamed", "agent_id", agentID, "new_id", newID)
	return c.send(ctx, &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Rename{
		Rename: &sandboxv1.Rename{AgentId: newID, Secret: newSecret}}})
}

// isHeld says agentID is held for someone (a warm pool's idle member): no
// command but housekeeping, and no file work, reaches it.
func (s *Service) isHeld(agentID string) bool { return s.cfg.Reports.AgentHeld(agentID) }

// liveConn returns the live connection of agentID or the port error saying why not.
func (s *Service) liveConn(agentID string) (*conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.registry.Get(agentID); !ok {
		return nil, ports.ErrAgentNotFound
	}
	c := s.conns[agentID]
	if c == nil {
		return nil, ports.ErrAgentNotConnected
	}
	return c, nil
}

// Agents lists every agent in the registry.
func (s *Service) Agents() []ports.AgentInfo {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	records := s.registry.All()
	out := make([]ports.AgentInfo, 0, len(records))
	for _, r := range records {
		out = append(out, agentInfo(r, now))
	}
	return out
}

// Agent returns one agent.
func (s *Service) Agent(id string) (ports.AgentInfo, bool) {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.registry.Get(id)
	if !ok {
		return ports.AgentInfo{}, false
	}
	return agentInfo(r, now), true
}

func agentInfo(r agent.Record, now time.Time) ports.AgentInfo {
	return ports.AgentInfo{
		ID:              r.ID,
		Status:          agent.StatusAt(r, now),
		Runtime:         r.Info.Runtime,
		Hostname:        r.Info.Hostname,
		IPAddress:       r.Info.IPAddress,
		AgentVersion:    r.Info.AgentVersion,
		Labels:          r.Info.Labels,
		Capabilities:    r.Info.Capabilities,
		System:          r.Info.System,
		Metrics:         r.Metrics,
		ConnectedAt:     r.ConnectedAt,
		LastHeartbeat:   r.LastHeartbeat,
		DisconnectedAt:  r.DisconnectedAt,
		RunningCommands: r.RunningCommands,
		KeptSessions:    r.KeptSessions,
	}
}
