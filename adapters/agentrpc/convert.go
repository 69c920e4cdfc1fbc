package agentrpc

import (
	"github.com/agentic-sandbox/agentic-sandbox/core/agent"
	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func infoFromRegistration(r *sandboxv1.Registration) agent.Info {
	si := r.GetSystemInfo()
	return agent.Info{
		Hostname:     r.GetHostname(),
		IPAddress:    r.GetIpAddress(),
		Runtime:      RuntimeName(r.GetRuntime()),
		AgentVersion: r.GetAgentVersion(),
		Labels:       r.GetLabels(),
		Capabilities: r.GetCapabilities(),
		System: ports.SystemInfo{
			OS:          si.GetOs(),
			Kernel:      si.GetKernel(),
			Arch:        si.GetArch(),
			CPUCores:    si.GetCpuCores(),
			MemoryBytes: si.GetMemoryBytes(),
			DiskBytes:   si.GetDiskBytes(),
		},
	}
}

// RuntimeName is the REST name of a runtime kind.
func RuntimeName(k sandboxv1.RuntimeKind) string {
	switch k {
	case sandboxv1.RuntimeKind_RUNTIME_KIND_HOST:
		return "host"
	case sandboxv1.RuntimeKind_RUNTIME_KIND_CONTAINER:
		return "container"
	case sandboxv1.RuntimeKind_RUNTIME_KIND_VM:
		return "vm"
	default:
		return "unknown"
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
