package agentrpc

import (
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

var _ ports.ListeningPortsReader = (*Service)(nil)

// portsReported keeps the listening ports an agent reported on c. A report
// that breaks the link's limits (agentwire.ListeningPorts) ends the stream
// with INVALID_ARGUMENT.
func (s *Service) portsReported(c *conn, r *sandboxv1.PortsReport, now time.Time) error {
	l, err := agentwire.ListeningPorts(r)
	if err != nil {
		s.log.Warn("agent sent a bad ports report; ending its stream", "agent_id", c.agentID, "err", err)
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("ports report: %w", err))
	}
	l.UpdatedAt = now
	s.mu.Lock()
	changed := c.listening.UpdatedAt.IsZero() || c.listening.Truncated != l.Truncated || !slices.Equal(c.listening.Ports, l.Ports)
	c.listening = l
	s.mu.Unlock()
	if changed {
		s.cfg.Changes.Changed(ports.ChangePorts)
	}
	return nil
}

// ListeningPorts implements ports.ListeningPortsReader: what agentID
// reported on its live connection (none while it is not connected).
func (s *Service) ListeningPorts(agentID string) ports.ListeningPorts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conns[agentID]
	if c == nil {
		return ports.ListeningPorts{}
	}
	l := c.listening
	l.Ports = slices.Clone(l.Ports)
	return l
}
