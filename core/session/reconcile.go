package session

import (
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Reported is one session an agent says it runs, in its session report on
// every (re)connect.
type Reported struct {
	// ID is the session id the agent was given when it started the session
	// (kept in the tmux session's environment); empty when it does not know.
	ID string
	// AgentName is the agent-side name (tmux session name or process marker),
	// AgentNamePrefix + session name for ours.
	AgentName string
	// Type as recorded on the agent; unknown types are adopted as Background.
	Type      ports.SessionType
	Command   string
	PTY       bool
	StartedAt time.Time
}

// Action is what the caller must do with one session after a report.
type Action string

const (
	// Keep: known and running on the agent; nothing to do (a session still
	// starting is marked running).
	Keep Action = "keep"
	// MarkLost: known and live, but the agent does not run it; the registry
	// has marked it lost (tell its viewers).
	MarkLost Action = "lost"
	// Adopt: unknown but ours; the registry now has it as running.
	Adopt Action = "adopt"
	// Kill: the agent runs it but the server will not keep it; the caller
	// asks the agent to kill AgentName. The registry does not change.
	Kill Action = "kill"
)

// Reasons in decisions.
const (
	ReasonMissing       = "missing_from_agent_report" // MarkLost
	ReasonNotOurs       = "not_ours"                  // Kill: no AgentNamePrefix or a bad name
	ReasonEndedOnServer = "ended_on_server"           // Kill: the server already ended it
	ReasonDuplicate     = "duplicate_report"          // Kill: a second report of one session
	ReasonNameTaken     = "name_taken"                // Kill: a live session already has the name
	ReasonQuota         = "over_quota"                // Kill: the agent has MaxLiveSessionsPerAgent already
)

// Decision is the outcome of reconciliation for one session.
type Decision struct {
	Action Action
	// SessionID is the server's id (Keep, MarkLost, Adopt), or the reported
	// id for Kill (may be empty).
	SessionID string
	// AgentName addresses the session on the agent ("" for MarkLost).
	AgentName string
	Reason    string
}

// Reconcile applies an agent's report of the sessions it runs to the
// registry and returns what the caller must do, in this order: decisions
// for reports matching a known session (report order), then known sessions
// marked lost (oldest first), then unknown reports adopted or killed (report
// order). The rule:
//
//   - known (by reported ID, else by name among the agent's live sessions)
//     and live → Keep; a starting one becomes running;
//   - known but already ended on the server → Kill (viewers were told it ended);
//   - known, live, not reported → MarkLost with ReasonMissing;
//   - unknown with AgentNamePrefix and a valid name → Adopt as running,
//     under the reported ID when it is a valid unused id (so its log on disk
//     is found again after a server restart), else a new one;
//   - unknown without the prefix → Kill; an unknown report whose name a
//     live session keeps (reported under another agent-side name) → Kill;
//   - a report repeating an agent-side name already reported is ignored;
//     two reports with one id but different names: the second is killed.
//
// Only the agent's report is evidence: a disconnect alone changes nothing,
// sessions keep running on an agent that is away. Call it with the report
// before starting new sessions on the new connection, or a session created
// in between would be marked lost.
func (r *Registry) Reconcile(agentID string, reports []Reported, now time.Time) []Decision {
	var out []Decision
	matched := map[string]bool{}
	seen := map[string]bool{}
	var unknown []Reported
	for _, rep := range reports {
		// The agent addresses its sessions by agent-side name (tmux names are
		// unique), so a repeated name is the same process: the first report
		// decides, or a Kill of the copy would kill the one we keep.
		if seen[rep.AgentName] {
			continue
		}
		seen[rep.AgentName] = true
		rec := r.match(agentID, rep)
		if rec == nil {
			unknown = append(unknown, rep)
			continue
		}
		switch {
		case matched[rec.s.ID]:
			out = append(out, Decision{Action: Kill, SessionID: rep.ID, AgentName: rep.AgentName, Reason: ReasonDuplicate})
		case rec.s.State.Ended():
			matched[rec.s.ID] = true
			out = append(out, Decision{Action: Kill, SessionID: rep.ID, AgentName: rep.AgentName, Reason: ReasonEndedOnServer})
		default:
			matched[rec.s.ID] = true
			if rec.s.State == Starting {
				started := rep.StartedAt
				if started.IsZero() {
					started = now
				}
				// rec was just listed under the registry's lock: it exists.
				_, _ = r.move(rec.s.ID, Running, now, func(s *Session) { s.StartedAt = started })
			}
			out = append(out, Decision{Action: Keep, SessionID: rec.s.ID, AgentName: rep.AgentName})
		}
	}

	for _, s := range r.List(agentID) {
		if s.State.Live() && !matched[s.ID] {
			_, _ = r.Lost(s.ID, ReasonMissing, now) // listed just now: it exists
			out = append(out, Decision{Action: MarkLost, SessionID: s.ID, Reason: ReasonMissing})
		}
	}

	for _, rep := range unknown {
		name, ours := ParseAgentName(rep.AgentName)
		if !ours {
			out = append(out, Decision{Action: Kill, SessionID: rep.ID, AgentName: rep.AgentName, Reason: ReasonNotOurs})
			continue
		}
		if _, taken := r.byAgent[agentID][name]; taken {
			out = append(out, Decision{Action: Kill, SessionID: rep.ID, AgentName: rep.AgentName, Reason: ReasonNameTaken})
			continue
		}
		if r.live(agentID) >= MaxLiveSessionsPerAgent {
			out = append(out, Decision{Action: Kill, SessionID: rep.ID, AgentName: rep.AgentName, Reason: ReasonQuota})
			continue
		}
		id := rep.ID
		if _, used := r.byID[id]; used || !validToken(id, 128) {
			id = r.newID()
		}
		typ := rep.Type
		if !typ.Valid() {
			typ = ports.SessionBackground
		}
		started := rep.StartedAt
		if started.IsZero() {
			started = now
		}
		r.insert(Session{
			ID: id, AgentID: agentID, Name: name, Type: typ, Command: rep.Command,
			PTY: rep.PTY || typ == ports.SessionInteractive, State: Running, Adopted: true,
			CreatedAt: started, StartedAt: started,
		})
		out = append(out, Decision{Action: Adopt, SessionID: id, AgentName: rep.AgentName})
	}
	return out
}

// match finds the known session a report is about: by id when the report
// has one (only on this agent), else by name among the agent's live sessions.
func (r *Registry) match(agentID string, rep Reported) *record {
	if rep.ID != "" {
		if rec, ok := r.byID[rep.ID]; ok && rec.s.AgentID == agentID {
			return rec
		}
		return nil
	}
	name, ok := ParseAgentName(rep.AgentName)
	if !ok {
		return nil
	}
	if id, ok := r.byAgent[agentID][name]; ok {
		return r.byID[id]
	}
	return nil
}
