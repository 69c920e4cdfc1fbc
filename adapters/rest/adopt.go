package rest

import (
	"context"
	"crypto/rand"
	"net/http"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/core/agent"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// CommandIDPrefix begins the id of every background command started
// through this API. Its output is kept only in this server's memory, so
// after a restart the agent's report is all that is left of it: the prefix
// is how the next server knows the command as one of this API's and adopts
// it again, under the same id (AdoptCommand).
const CommandIDPrefix = "bg-"

// ExecIDPrefix begins the id of every command run through exec. An exec
// whose caller went with a restart of the server (its connection did) has
// nobody to answer: a restarted server that hears of it kills it.
const ExecIDPrefix = "ex-"

// newCommandID is a fresh background command id.
func newCommandID() string { return CommandIDPrefix + strings.ToLower(rand.Text()) }

// newExecID is a fresh exec command id.
func newExecID() string { return ExecIDPrefix + strings.ToLower(rand.Text()) }

var _ ports.CommandAdopter = (*Server)(nil)

// AdoptCommand implements ports.CommandAdopter: a background command an
// earlier run of this server started (its id has CommandIDPrefix), which
// its agent kept across the restart, is this API's again. Its status,
// output from now on (offsets go on from the agent's) and result are read
// and it is controlled as before; the output the earlier server held is
// gone with it (the result says truncated). Whether it runs in a PTY is
// not known any more, so a resize is not refused.
func (s *Server) AdoptCommand(cmd ports.Command) (ports.StartOptions, bool) {
	if len(cmd.ID()) > maxIDLen {
		return ports.StartOptions{}, false
	}
	if strings.HasPrefix(cmd.ID(), ExecIDPrefix) {
		// An exec of an earlier run: its caller is gone, so is the command.
		// Its result stays readable through GET for the link's retention.
		s.log.Warn("rest: killing an exec whose caller went with a restart of the server", "agent", cmd.AgentID(), "command_id", cmd.ID())
		go s.kill(context.Background(), cmd)
		return ports.StartOptions{}, true
	}
	if !strings.HasPrefix(cmd.ID(), CommandIDPrefix) {
		return ports.StartOptions{}, false
	}
	if e, ok, _ := s.store.get(cmd.ID()); ok && e != nil {
		return ports.StartOptions{}, false
	}
	e := newEntry(cmd.AgentID(), DefaultMaxOutputBytes, true)
	e.adopted = true
	e.id, e.cmd = cmd.ID(), cmd
	s.store.add(cmd.ID(), e)
	go func() {
		<-cmd.Done()
		e.finish(cmd.Result(), s.clock.Now())
	}()
	s.log.Info("rest: background command adopted after a restart", "agent", cmd.AgentID(), "command_id", cmd.ID())
	return ports.StartOptions{OnOutput: e.onOutput, Detached: true}, true
}

// lostError answers for a command whose agent lost it (core/agent's rule:
// the agent came back without it, or never came back): 502 agent_gone. Its
// output and exit are unknown; it may even run on, orphaned.
func lostError(subject string, r ports.CommandResult) *apiError {
	return newError(http.StatusBadGateway, "agent_gone", "%s: the command is lost: %s", subject, r.Error)
}

// lost says the command ended lost.
func lost(e *entry, cmd ports.Command) (ports.CommandResult, bool) {
	if e != nil {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.result, e.ended && agent.Lost(e.result)
	}
	select {
	case <-cmd.Done():
		r := cmd.Result()
		return r, agent.Lost(r)
	default:
		return ports.CommandResult{}, false
	}
}
