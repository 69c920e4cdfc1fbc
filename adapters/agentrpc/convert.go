package agentrpc

import (
	"github.com/agentic-sandbox/agentic-sandbox/core/agent"
	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
)

func infoFromRegistration(r *sandboxv1.Registration) agent.Info {
	return agent.Info{
		Hostname:     r.GetHostname(),
		IPAddress:    r.GetIpAddress(),
		Runtime:      agentwire.RuntimeKindFromProto(r.GetRuntime()),
		AgentVersion: r.GetAgentVersion(),
		Labels:       r.GetLabels(),
		Capabilities: r.GetCapabilities(),
		System:       agentwire.SystemInfo(r.GetSystemInfo()),
	}
}

func reportedStatus(s sandboxv1.AgentStatus) agent.Reported {
	switch s {
	case sandboxv1.AgentStatus_AGENT_STATUS_STARTING:
		return agent.ReportedStarting
	case sandboxv1.AgentStatus_AGENT_STATUS_READY:
		return agent.ReportedReady
	case sandboxv1.AgentStatus_AGENT_STATUS_BUSY:
		return agent.ReportedBusy
	case sandboxv1.AgentStatus_AGENT_STATUS_DRAINING:
		return agent.ReportedDraining
	default:
		return agent.ReportedUnknown
	}
}
