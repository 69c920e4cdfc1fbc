package agentrpc

import (
	"context"
	"errors"
	"fmt"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

var _ ports.PermissionDecider = (*Service)(nil)

// maxPermissionInput bounds the tool input an agent may send with a request.
const maxPermissionInput = 256 << 10

// permissionAsked takes a request from an agent about one of its own
// commands; a request naming another agent's command, or nothing, is dropped.
func (s *Service) permissionAsked(agentID string, p *sandboxv1.PermissionRequest) {
	if s.commandOf(agentID, p.GetCommandId()) == nil || p.GetRequestId() == "" || len(p.GetRequestId()) > 256 ||
		len(p.GetInputJson()) > maxPermissionInput || len(p.GetToolName()) > 256 {
		s.log.Warn("permission request refused", "agent_id", agentID, "command_id", p.GetCommandId())
		return
	}
	if !s.cfg.Reports.PermissionAsked(ports.PermissionRequest{AgentID: agentID, CommandID: p.GetCommandId(), RequestID: p.GetRequestId(),
		ToolName: p.GetToolName(), InputJSON: p.GetInputJson()}) {
		s.log.Warn("a permission request for a command that is neither a task's nor a mission's", "agent_id", agentID, "command_id", p.GetCommandId())
	}
}

// DecidePermission implements ports.PermissionDecider.
func (s *Service) DecidePermission(ctx context.Context, req ports.PermissionRequest, allow bool, message string) error {
	conn, err := s.liveConn(req.AgentID)
	if err != nil {
		return err
	}
	if req.RequestID == "" {
		return errors.New("no request id")
	}
	if err := conn.send(ctx, &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_PermissionDecision{PermissionDecision: &sandboxv1.PermissionDecision{
		CommandId: req.CommandID, RequestId: req.RequestID, Allow: allow, Message: message,
	}}}); err != nil {
		return fmt.Errorf("sending the decision: %w", err)
	}
	return nil
}
