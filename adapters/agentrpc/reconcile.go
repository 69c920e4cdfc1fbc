package agentrpc

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/agent"
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
// still held, by agent.FateOnReport: a command it still runs goes on (or is
// killed, when its caller went away meanwhile); one it reports finished ends
// with its reported result, after the end of its output is filled in from
// the reported tail (result and output may have been written into a
// connection that died); one it does not know any more is lost. A command
// it runs that this server does not know (the agent outlived a restart of
// the server) is adopted under its id when the adopter takes it, else held
// for a claim and killed after the claim grace.
func (s *Service) reconcileCommands(c *conn, rep *sandboxv1.SessionReport) {
	if rep.GetRequestId() != "connect:"+strconv.FormatUint(c.gen, 10) {
		return // a report made for an earlier connection, or an answer to a query
	}
	reported := map[string]*sandboxv1.SessionInfo{}
	var sessions []ports.ReportedSession
	var plain []*sandboxv1.SessionInfo // running commands that are no session
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
		if si.GetState() != sandboxv1.SessionState_SESSION_STATE_RUNNING {
			continue
		}
		if si.GetType() == sandboxv1.SessionType_SESSION_TYPE_UNSPECIFIED {
			plain = append(plain, si)
			continue
		}
		rs := ports.ReportedSession{
			SessionID: si.GetSessionId(), AgentName: si.GetName(), Type: agentwire.SessionTypeFromProto(si.GetType()),
			CommandID: si.GetCommandId(),
		}
		if si.GetStartedAt() != nil {
			rs.StartedAt = si.GetStartedAt().AsTime()
		}
		sessions = append(sessions, rs)
	}
	s.mu.Lock()
	current := s.registry.IsCurrent(c.agentID, c.gen)
	s.mu.Unlock()
	if current {
		s.cfg.Reports.ReconcileSessions(c.agentID, sessions)
		// The sessions' commands it bound (Attach names no type).
		for _, rs := range sessions {
			if keptSession(rs.Type) {
				s.markKept(c.agentID, rs.CommandID)
			}
		}
		// Before the output that came ahead of the report is handed out:
		// the commands adopted now get theirs.
		s.adoptReported(c, plain)
	}
	c.reported = true
	for _, o := range c.orphans {
		if cmd := s.commandOf(c.agentID, o.GetStreamId()); cmd != nil {
			cmd.deliver(o)
		}
		c.ackOutput(o)
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
		st := agent.NotInReport
		switch {
		case si.GetState() == sandboxv1.SessionState_SESSION_STATE_RUNNING:
			st = agent.InReportRunning
		case si.GetState() == sandboxv1.SessionState_SESSION_STATE_EXITED && si.GetResult() != nil:
			st = agent.InReportExited
		}
		cmd.mu.Lock()
		abandoned := cmd.abandoned
		cmd.mu.Unlock()
		switch agent.FateOnReport(true, abandoned, st, false) {
		case agent.FateKill:
			s.log.Info("killing a command whose caller went away while its agent was disconnected", "agent_id", c.agentID, "command_id", cmd.id)
			if err := cmd.Kill(context.Background()); err != nil && !errors.Is(err, ports.ErrCommandEnded) {
				s.log.Warn("could not kill abandoned command", "command_id", cmd.id, "err", err)
			}
		case agent.FateEnded:
			// The output on its way on the data plane first (the result
			// names where it ends); the tail fills in what never came.
			s.finishAfterOutput(cmd, si.GetResult(), func() {
				if tail := si.GetOutputTail(); len(tail) > 0 && uint64(len(tail)) <= si.GetOutputOffset() {
					cmd.deliver(&sandboxv1.OutputChunk{StreamId: cmd.id, Stream: si.GetTailStream(), Data: tail, Offset: si.GetOutputOffset() - uint64(len(tail))})
				}
			})
		case agent.FateLost:
			s.log.Warn("agent no longer runs a command; marking it lost", "agent_id", c.agentID, "command_id", cmd.id)
			s.finish(cmd, agent.LostResult(true))
		default:
			// Still running: its output and result will come.
		}
	}
}

// SetCommandAdopter names who takes the commands agents report that this
// server does not know (the REST API, its background commands); call it
// before agents can connect.
func (s *Service) SetCommandAdopter(a ports.CommandAdopter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.adopter = a
}

// adoptReported takes on the running commands a report names that no session
// is and this server does not know: adopted when the adopter takes them,
// else held for a claim. One the server already ended (it gave up on it)
// is killed.
func (s *Service) adoptReported(c *conn, infos []*sandboxv1.SessionInfo) {
	now := s.cfg.Clock.Now()
	for _, si := range infos {
		id := si.GetCommandId()
		if id == "" {
			continue
		}
		s.mu.Lock()
		known, adopter := s.commands[id], s.adopter
		s.mu.Unlock()
		if known != nil {
			if known.isDone() {
				s.log.Warn("an agent runs a command the server has ended; killing it", "agent_id", c.agentID, "command_id", id)
				s.killOn(c, id, "the server ended this command")
			}
			continue
		}
		cmd := &command{svc: s, id: id, agentID: c.agentID, detached: true, sentGen: c.gen,
			next: map[ports.OutputStream]uint64{}, done: make(chan struct{})}
		adoptable := false
		if adopter != nil {
			var opts ports.StartOptions
			if opts, adoptable = adopter.AdoptCommand(cmd); adoptable {
				cmd.onOutput, cmd.onStarted = opts.OnOutput, opts.OnStarted
			}
		}
		fate := agent.FateOnReport(false, false, agent.InReportRunning, adoptable)
		if fate == agent.FateHold {
			cmd.heldAt = now
		}
		s.mu.Lock()
		if _, dup := s.commands[id]; dup || !s.registry.IsCurrent(c.agentID, c.gen) {
			s.mu.Unlock()
			continue
		}
		s.commands[id] = cmd
		s.registry.CommandStarted(c.agentID)
		s.mu.Unlock()
		s.cfg.Changes.Changed(ports.ChangeAgents)
		if fate == agent.FateAdopt {
			s.log.Info("adopted a command the agent kept across a server restart", "agent_id", c.agentID, "command_id", id)
		} else {
			s.log.Info("holding a command the agent runs that this server does not know, for a claim", "agent_id", c.agentID, "command_id", id, "grace", s.cfg.ClaimGrace)
		}
	}
}

// unclaimed lists the held commands whose claim grace is over and marks
// them abandoned; s.mu held.
func (s *Service) unclaimed(now time.Time) []*command {
	var out []*command
	for _, cmd := range s.commands {
		cmd.mu.Lock()
		if !cmd.ended && !cmd.heldAt.IsZero() && agent.HoldExpired(cmd.heldAt, now, s.cfg.ClaimGrace) {
			cmd.heldAt = time.Time{}
			cmd.abandoned = true
			out = append(out, cmd)
		}
		cmd.mu.Unlock()
	}
	return out
}

// killUnclaimed kills a held command nobody claimed: nothing runs on an
// agent unreachable through the server. Its result stays readable (GET
// /api/v1/commands/{id}) for the retention; with its agent away, the kill
// happens when it is back.
func (s *Service) killUnclaimed(cmd *command) {
	s.log.Warn("killing a command its agent kept that nobody on this server claimed", "agent_id", cmd.agentID, "command_id", cmd.id, "grace", s.cfg.ClaimGrace)
	if err := cmd.Kill(context.Background()); err != nil && !errors.Is(err, ports.ErrCommandEnded) {
		s.log.Info("unclaimed command to be killed once its agent is back", "command_id", cmd.id, "err", err)
	}
}

// killOn asks the agent on c to kill a command the server has no live
// handle on.
func (s *Service) killOn(c *conn, id, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.KillTimeout)
	defer cancel()
	if err := c.send(ctx, &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_PtyControl{PtyControl: &sandboxv1.PtyControl{
		CommandId: id, Action: &sandboxv1.PtyControl_Kill{Kill: &sandboxv1.CommandKill{Reason: reason}}}}}); err != nil {
		s.log.Warn("could not kill a command on its agent", "agent_id", c.agentID, "command_id", id, "err", err)
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
		if cmd.kept {
			s.registry.SessionUnkept(cmd.agentID)
		}
		s.mu.Unlock()
		s.cfg.Changes.Changed(ports.ChangeAgents)
	})
}
