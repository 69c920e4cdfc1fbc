package rest

import (
	"context"
	"fmt"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// ListAgentPorts implements restapi.StrictServerInterface: the TCP ports
// listening where the agent runs, as it last reported them (an
// environment's agent's with their public marks and preview URLs).
func (s *Server) ListAgentPorts(ctx context.Context, req restapi.ListAgentPortsRequestObject) (restapi.ListAgentPortsResponseObject, error) {
	if _, ok := s.d.Agents.Agent(req.AgentId); !ok {
		return nil, agentNotFound(fmt.Sprintf("agent %q", clip(req.AgentId)))
	}
	l := s.listeningPorts(req.AgentId)
	// An environment's agent has its name: its ports are the
	// environment's, with their marks and previews.
	if s.d.Environments != nil {
		if e, ok := s.d.Environments.Inspect(ctx, req.AgentId); ok && e.AgentID == req.AgentId {
			l = s.withPreviews(ctx, e.Name, l)
		}
	}
	return restapi.ListAgentPorts200JSONResponse(l), nil
}

// ListEnvironmentPorts implements restapi.StrictServerInterface: the TCP
// ports listening inside the environment, as its agent last reported them,
// with their public marks and preview URLs.
func (s *Server) ListEnvironmentPorts(ctx context.Context, req restapi.ListEnvironmentPortsRequestObject) (restapi.ListEnvironmentPortsResponseObject, error) {
	subject := fmt.Sprintf("environment %q", clip(req.Name))
	if s.d.Environments == nil {
		return nil, environmentNotFound(subject)
	}
	e, ok := s.d.Environments.Inspect(ctx, req.Name)
	if !ok {
		return nil, environmentNotFound(subject)
	}
	if e.AgentID == "" { // not provisioned yet
		return restapi.ListEnvironmentPorts200JSONResponse(toListeningPorts(ports.ListeningPorts{})), nil
	}
	return restapi.ListEnvironmentPorts200JSONResponse(s.withPreviews(ctx, e.Name, s.listeningPorts(e.AgentID))), nil
}

func (s *Server) listeningPorts(agentID string) restapi.ListeningPortList {
	if s.d.ListeningPorts == nil {
		return toListeningPorts(ports.ListeningPorts{})
	}
	return toListeningPorts(s.d.ListeningPorts.ListeningPorts(agentID))
}

func toListeningPorts(l ports.ListeningPorts) restapi.ListeningPortList {
	out := restapi.ListeningPortList{Ports: make([]restapi.ListeningPort, 0, len(l.Ports)), Truncated: l.Truncated}
	for _, p := range l.Ports {
		lp := restapi.ListeningPort{Port: int(p.Port), Address: p.Address, Family: restapi.ListeningPortFamily(p.Family)}
		if p.Process != "" {
			lp.Process = &p.Process
		}
		out.Ports = append(out.Ports, lp)
	}
	if !l.UpdatedAt.IsZero() {
		at := l.UpdatedAt.UTC()
		out.UpdatedAt = &at
	}
	return out
}
