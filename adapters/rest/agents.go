package rest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// ListAgents lists the registry's agents, sorted by id.
func (s *Server) ListAgents(ctx context.Context, req restapi.ListAgentsRequestObject) (restapi.ListAgentsResponseObject, error) {
	all := inScope(ctx, s.d.Agents.Agents(), func(a ports.AgentInfo) bool { return s.agentInScope(ctx, a.ID) })
	infos, next, apiErr := page(all, func(a ports.AgentInfo) string { return a.ID }, req.Params.Limit, req.Params.Cursor)
	if apiErr != nil {
		return nil, apiErr
	}
	out := restapi.AgentList{Agents: make([]restapi.Agent, 0, len(infos)), NextCursor: next}
	for _, a := range infos {
		out.Agents = append(out.Agents, toAgent(a))
	}
	return restapi.ListAgents200JSONResponse(out), nil
}

// GetAgent returns one agent.
func (s *Server) GetAgent(_ context.Context, req restapi.GetAgentRequestObject) (restapi.GetAgentResponseObject, error) {
	a, ok := s.d.Agents.Agent(req.AgentId)
	if !ok {
		return nil, agentNotFound(fmt.Sprintf("agent %q", clip(req.AgentId)))
	}
	return restapi.GetAgent200JSONResponse(toAgent(a)), nil
}

func toAgent(a ports.AgentInfo) restapi.Agent {
	out := restapi.Agent{
		Id:              a.ID,
		Status:          restapi.AgentStatus(a.Status),
		Runtime:         restapi.AgentRuntime(a.Runtime),
		Hostname:        a.Hostname,
		Labels:          map[string]string{},
		RunningCommands: a.RunningCommands,
	}
	// Values outside openapi's enums would break clients that check them.
	if !out.Status.Valid() {
		out.Status = restapi.Stale
	}
	if !out.Runtime.Valid() {
		out.Runtime = restapi.Unknown
	}
	for k, v := range a.Labels {
		out.Labels[k] = v
	}
	if a.IPAddress != "" {
		out.IpAddress = ptr(a.IPAddress)
	}
	if a.AgentVersion != "" {
		out.AgentVersion = ptr(a.AgentVersion)
	}
	if a.Capabilities != nil {
		out.Capabilities = ptr(slices.Clone(a.Capabilities))
	}
	if a.System != (ports.SystemInfo{}) {
		var si restapi.SystemInfo
		// Zero means "not reported" here, so it is left out.
		if a.System.CPUCores != 0 {
			si.CpuCores = ptr(int(a.System.CPUCores))
		}
		if a.System.MemoryBytes != 0 {
			si.MemoryBytes = ptr(clampInt64(a.System.MemoryBytes))
		}
		if a.System.DiskBytes != 0 {
			si.DiskBytes = ptr(clampInt64(a.System.DiskBytes))
		}
		if a.System.OS != "" {
			si.Os = ptr(a.System.OS)
		}
		if a.System.Kernel != "" {
			si.Kernel = ptr(a.System.Kernel)
		}
		if a.System.Arch != "" {
			si.Arch = ptr(a.System.Arch)
		}
		out.SystemInfo = &si
	}
	if m := a.Metrics; m != nil {
		out.Metrics = &restapi.Metrics{
			CpuPercent:       finite(m.CPUPercent),
			MemoryUsedBytes:  ptr(clampInt64(m.MemoryUsedBytes)),
			MemoryTotalBytes: ptr(clampInt64(m.MemoryTotalBytes)),
			DiskUsedBytes:    ptr(clampInt64(m.DiskUsedBytes)),
			DiskTotalBytes:   ptr(clampInt64(m.DiskTotalBytes)),
			LoadAvg1:         finite(m.LoadAvg1),
			LoadAvg5:         finite(m.LoadAvg5),
			LoadAvg15:        finite(m.LoadAvg15),
		}
	}
	out.ConnectedAt = timePtr(a.ConnectedAt)
	out.LastHeartbeat = timePtr(a.LastHeartbeat)
	out.DisconnectedAt = timePtr(a.DisconnectedAt)
	return out
}

func ptr[T any](v T) *T { return &v }

func clampInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// finite drops NaN and infinities, which JSON cannot carry.
func finite(f float64) *float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

// timePtr omits zero times, as openapi's optional timestamps expect.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// GetHealthz says the process is serving.
func (s *Server) GetHealthz(context.Context, restapi.GetHealthzRequestObject) (restapi.GetHealthzResponseObject, error) {
	v := s.d.Version
	if v == "" {
		v = "unknown"
	}
	return restapi.GetHealthz200JSONResponse{Status: "ok", Version: v}, nil
}

// GetReadyz reports each component; 503 when any is not ready.
func (s *Server) GetReadyz(context.Context, restapi.GetReadyzRequestObject) (restapi.GetReadyzResponseObject, error) {
	var checks []ReadinessCheck
	if s.d.Readiness != nil {
		checks = s.d.Readiness()
	}
	out := restapi.Readiness{Ready: true}
	// Components is an anonymous struct type; growing the slice avoids
	// spelling it out (and at least 1 keeps it non-nil: [] rather than null).
	out.Components = slices.Grow(out.Components, max(len(checks), 1))[:len(checks)]
	for i, c := range checks {
		out.Components[i].Name = c.Name
		out.Components[i].Ready = c.Ready
		if c.Detail != "" {
			out.Components[i].Detail = ptr(c.Detail)
		}
		out.Ready = out.Ready && c.Ready
	}
	if !out.Ready {
		return restapi.GetReadyz503JSONResponse(out), nil
	}
	return restapi.GetReadyz200JSONResponse(out), nil
}
