package task

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// PermissionTool is claude's permission prompt tool.
const PermissionTool = ports.ClaudePermissionTool

// HITL is a task's open question for a human: claude asks to use a tool.
type HITL struct {
	ID        string
	TaskID    string
	AgentID   string
	ToolName  string
	InputJSON string
	CreatedAt time.Time
	req       ports.PermissionRequest
}

// PermissionAsked implements ports.PermissionAsker: the task whose run asks
// waits for an operator's answer.
func (s *Service) PermissionAsked(req ports.PermissionRequest) bool {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	var e *entry
	for _, c := range s.tasks {
		if c.rec.CommandID == req.CommandID && c.rec.AgentID == req.AgentID && !State(c.rec.State).Terminal() {
			e = c
		}
	}
	if e == nil {
		s.mu.Unlock()
		return false // not a task's: another asker's (a mission's)
	}
	if e.hitl == nil {
		e.hitl = map[string]*HITL{}
	}
	if _, again := e.hitl[req.RequestID]; again {
		s.mu.Unlock() // asked again after a reconnect: already open
		return true
	}
	h := &HITL{ID: req.RequestID, TaskID: e.rec.ID, AgentID: req.AgentID, ToolName: req.ToolName, InputJSON: req.InputJSON, CreatedAt: now, req: req}
	e.hitl[h.ID] = h
	e.rec.Progress.Activity = "waiting"
	e.events.add(EventActivity, ActivityData{Kind: "permission_request", ToolName: req.ToolName, Text: clipText(req.InputJSON)})
	s.mu.Unlock()
	s.cfg.Changes.Changed(ports.ChangeTasks | ports.ChangeHITL)
	s.log.Info("task waits for a permission", "task_id", h.TaskID, "hitl_id", h.ID, "tool", req.ToolName)
	return true
}

// OpenHITL lists the tasks' open questions, oldest first.
func (s *Service) OpenHITL() []HITL {
	s.mu.Lock()
	var out []HITL
	for _, e := range s.tasks {
		for _, h := range e.hitl {
			out = append(out, *h)
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// AnswerHITL answers a task's question: allow or deny, with a message for
// claude. ports.ErrHITLNotFound for no such open question.
func (s *Service) AnswerHITL(ctx context.Context, id string, allow bool, message string) (HITL, error) {
	s.mu.Lock()
	var e *entry
	var h *HITL
	for _, c := range s.tasks {
		if q, ok := c.hitl[id]; ok {
			e, h = c, q
		}
	}
	s.mu.Unlock()
	if h == nil {
		return HITL{}, fmt.Errorf("%w: %s", ports.ErrHITLNotFound, id)
	}
	if err := s.cfg.Permissions.DecidePermission(ctx, h.req, allow, message); err != nil {
		return HITL{}, err
	}
	s.mu.Lock()
	delete(e.hitl, id)
	if len(e.hitl) == 0 {
		e.rec.Progress.Activity = "working"
	}
	decision := "deny"
	if allow {
		decision = "allow"
	}
	b, _ := json.Marshal(map[string]string{"decision": decision, "message": message})
	e.events.add(EventActivity, ActivityData{Kind: "permission_answer", ToolName: h.ToolName, Text: string(b)})
	s.mu.Unlock()
	s.cfg.Changes.Changed(ports.ChangeTasks | ports.ChangeHITL)
	return *h, nil
}
