package agentrpc

import (
	"strconv"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// maxReportedSessions bounds the entries of one connect report taken on:
// well above what an agent may run (live sessions, REST commands,
// missions), far below what a rogue report can list.
const maxReportedSessions = 1024

// reconcileCommands settles the commands sent before this connection with
// the agent's connect report, which comes behind every message the agent
// still held: a command it still runs goes on; one it reports finished ends
// with its reported result, after the end of its output is filled in from the
// reported tail (result and output may have been written into a connection
// that died); one it does not know any more is lost.
func (s *Service) reconcileCommands(c *conn, rep *sandboxv1.SessionReport) {
	if rep.GetRequestId() != "connect:"+strconv.FormatUint(c.gen, 10) {
		return // a report made for an earlier connection, or an answer to a query
	}
	reported := map[string]*sandboxv1.SessionInfo{}
	var sessions []ports.ReportedSession
	infos := rep.GetSessions()
	if len(infos) > maxReportedSessions {
		// More than an agent can have (its sessions, commands and missions
		// are bounded): the rest is not taken on, nor killed one by one.
		s.log.Warn("refused: an agent reported more commands than it can run; the rest ignored", "agent_id", c.agentID, "reported", len(infos), "limit", maxReportedSessions)
		infos = infos[:maxReportedSessions]
	}
	for _, si := range infos {
		if owner := s.ownerOf(si.GetCommandId()); owner != "" && owner != c.agentID {
			s.log.Warn("refused: an agent reported another agent's command", "agent_id", c.agentID, "command_id", si.GetCommandId(), "owner", owner)
			continue
		}
		reported[si.GetCommandId()] = si
		if si.GetState() == sandboxv1.SessionState_SESSION_STATE_RUNNING && si.GetType() != sandboxv1.SessionType_SESSION_TYPE_UNSPECIFIED {
			rs := ports.ReportedSession{
				SessionID: si.GetSessionId(), AgentName: si.GetName(), Type: agentwire.SessionTypeFromProto(si.GetType()),
				CommandID: si.GetCommandId(),
			}
			if si.GetStartedAt() != nil {
				rs.StartedAt = si.GetStartedAt().AsTime()
			}
			sessions = append(sessions, rs)
		}
	}
	s.mu.Lock()
	current := s.registry.IsCurrent(c.agentID, c.gen)
	s.mu.Unlock()
	if current {
		s.cfg.Reports.ReconcileSessions(c.agentID, sessions)
	}
	// Output that came ahead of the report goes to the commands adopted now.
	c.reported = true
	for _, o := range c.orphans {
		if cmd := s.commandOf(c.agentID, o.GetStreamId()); cmd != nil {
			cmd.deliver(o)
		}
	}
	c.orphans, c.orphanBytes = nil, 0
	s.mu.Lock()
	var pending []*command
	if s.registry.IsCurrent(c.agentID, c.gen) {
		pending = s.runningOn(c.agentID, func(cmd *command) bool { return cmd.sentGen < c.gen })
	}
	s.mu.Unlock()
	for _, cmd := range pending {
		si := reported[cmd.id]
		switch {
		case si.GetState() == sandboxv1.SessionState_SESSION_STATE_RUNNING:
			// Still running: its output and result will come.
		case si.GetState() == sandboxv1.SessionState_SESSION_STATE_EXITED && si.GetResult() != nil:
			if tail := si.GetOutputTail(); len(tail) > 0 && uint64(len(tail)) <= si.GetOutputOffset() {
				cmd.deliver(&sandboxv1.OutputChunk{StreamId: cmd.id, Stream: si.GetTailStream(), Data: tail, Offset: si.GetOutputOffset() - uint64(len(tail))})
			}
			s.finish(cmd, agentwire.Result(si.GetResult()))
		default:
			s.log.Warn("agent no longer runs a command; marking it lost", "agent_id", c.agentID, "command_id", cmd.id)
			s.finish(cmd, ports.CommandResult{ExitCode: -1, Error: ports.ErrCommandLost.Error()})
		}
	}
}

// ownerOf is the agent a known command runs on, "" for an unknown id.
func (s *Service) ownerOf(commandID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cmd := s.commands[commandID]; cmd != nil {
		return cmd.agentID
	}
	return ""
}

// runningOn lists agentID's commands that have not ended and that keep
// (nil: all) accepts; s.mu held.
func (s *Service) runningOn(agentID string, keep func(*command) bool) []*command {
	var out []*command
	for _, cmd := range s.commands {
		if cmd.agentID == agentID && !cmd.isDone() && (keep == nil || keep(cmd)) {
			out = append(out, cmd)
		}
	}
	return out
}

// commandOf finds a command of agentID; an agent cannot touch another's commands.
func (s *Service) commandOf(agentID, commandID string) *command {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := s.commands[commandID]
	if cmd == nil || cmd.agentID != agentID {
		return nil
	}
	return cmd
}

func (s *Service) finish(cmd *command, r ports.CommandResult) {
	cmd.complete(r, s.cfg.Clock.Now(), func() {
		s.mu.Lock()
		s.registry.CommandEnded(cmd.agentID)
		s.mu.Unlock()
		s.cfg.Changes.Changed(ports.ChangeAgents)
	})
}
