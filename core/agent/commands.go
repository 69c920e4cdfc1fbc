package agent

import (
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The rule of what becomes of a command the server knows on an agent when
// the agent's link changes. A command counts as lost (its waiters are
// answered agent_gone) only when it really is:
//
//   - a disconnect loses nothing: the agent keeps running the command, keeps
//     its output and delivers it once it is back;
//   - the agent's connect report after a reconnect settles it: running goes
//     on, ended ends with the reported result, and a command the report does
//     not name is lost (the agent process died, or was restarted without it);
//   - an agent that does not come back within the disconnect grace is
//     forgotten, and its commands are lost with it.
//
// A command a report names that the server does not know (the agent kept it
// across a restart of the server) is adopted under its id when its owner
// takes it (the REST API takes the background commands it started), held
// for a while when nobody does yet (a task binds to its run again once its
// environment is known), and killed once that while is over: nothing keeps
// running on an agent unreachable through the server.

// ReportState is what a connect report says of one command.
type ReportState int

const (
	// NotInReport: the report does not name the command.
	NotInReport ReportState = iota
	// InReportRunning: the agent runs it.
	InReportRunning
	// InReportExited: the agent ran it, and it ended (the report has its result).
	InReportExited
)

// Fate is what the server does with one command.
type Fate string

const (
	// FateRunning: it goes on; its output and result will come.
	FateRunning Fate = "running"
	// FateEnded: end it with the result the agent reported.
	FateEnded Fate = "ended"
	// FateLost: end it as lost (agent_gone): the agent no longer runs it.
	FateLost Fate = "lost"
	// FateKill: the agent runs it but nobody waits for it any more (its
	// caller went away while the agent was disconnected): kill it.
	FateKill Fate = "kill"
	// FateAdopt: unknown, running, and its owner takes it: adopt it under its id.
	FateAdopt Fate = "adopt"
	// FateHold: unknown, running, nobody takes it yet: hold it for a claim;
	// HoldExpired says when to kill it.
	FateHold Fate = "hold"
	// FateNone: unknown and not running: nothing to do.
	FateNone Fate = "none"
)

// FateOnReport decides a command's fate by an agent's connect report. known
// says the server has the command running from before this connection;
// abandoned that its caller went away meanwhile (only for known commands);
// adoptable that an owner takes it (only for unknown ones).
func FateOnReport(known, abandoned bool, st ReportState, adoptable bool) Fate {
	if known {
		switch st {
		case InReportRunning:
			if abandoned {
				return FateKill
			}
			return FateRunning
		case InReportExited:
			return FateEnded
		default:
			return FateLost
		}
	}
	if st != InReportRunning {
		return FateNone
	}
	if adoptable {
		return FateAdopt
	}
	return FateHold
}

// FateOnDisconnect is a command's fate when its agent's stream ends: it
// runs on, attached or detached alike.
func FateOnDisconnect() Fate { return FateRunning }

// FateOnForgotten is a command's fate when its agent is forgotten after the
// disconnect grace without coming back.
func FateOnForgotten() Fate { return FateLost }

// HoldExpired says a command held since heldAt, unclaimed, is to be killed at now.
func HoldExpired(heldAt, now time.Time, grace time.Duration) bool {
	return !now.Before(heldAt.Add(grace))
}

// LostResult is the result a lost command ends with: ports.ErrCommandLost
// when the agent came back without it, ports.ErrAgentGone when it never
// came back.
func LostResult(agentCameBack bool) ports.CommandResult {
	if agentCameBack {
		return ports.CommandResult{ExitCode: -1, Error: ports.ErrCommandLost.Error()}
	}
	return ports.CommandResult{ExitCode: -1, Error: ports.ErrAgentGone.Error()}
}

// Lost says r is the end of a lost command, not one the agent reported:
// what it did is unknown (it may even run on, orphaned), so callers answer
// that the agent is gone rather than show an exit code.
func Lost(r ports.CommandResult) bool {
	return r.Error == ports.ErrCommandLost.Error() || r.Error == ports.ErrAgentGone.Error()
}
