// Package agent holds the registry rules for connected agents: how an agent's
// status follows from its connection and heartbeats, which connection is the
// current one, and when a gone agent is forgotten. It is pure: the caller
// passes the time in and serialises access.
package agent

import (
	"slices"
	"sort"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// MissedHeartbeatsForStale is how many heartbeat intervals may pass in silence
// before a connected agent is shown as stale.
const MissedHeartbeatsForStale = 3

// Reported is the status an agent claims in its heartbeat.
type Reported string

const (
	ReportedUnknown  Reported = ""
	ReportedStarting Reported = "starting"
	ReportedReady    Reported = "ready"
	ReportedBusy     Reported = "busy"
	ReportedDraining Reported = "draining"
)

// Info is what the agent said about itself at registration.
type Info struct {
	Hostname     string
	IPAddress    string
	Runtime      ports.RuntimeKind
	AgentVersion string
	Labels       map[string]string
	Capabilities []string
	System       ports.SystemInfo
}

// Record is the registry's state for one agent.
type Record struct {
	ID                string
	Info              Info
	Generation        uint64
	Connected         bool
	ConnectedAt       time.Time
	LastHeartbeat     time.Time
	DisconnectedAt    time.Time
	HeartbeatInterval time.Duration
	Reported          Reported
	Metrics           *ports.Metrics
	// RunningCommands counts commands the server has started and not yet seen end.
	RunningCommands int
	// KeptSessions counts those of RunningCommands that are kept sessions
	// (a terminal or a background process, which may run for days).
	KeptSessions int
}

// StatusAt derives the status of r at now.
func StatusAt(r Record, now time.Time) ports.AgentStatus {
	if !r.Connected {
		return ports.AgentDisconnected
	}
	last := r.ConnectedAt
	if r.LastHeartbeat.After(last) {
		last = r.LastHeartbeat
	}
	if r.HeartbeatInterval > 0 && now.Sub(last) > MissedHeartbeatsForStale*r.HeartbeatInterval {
		return ports.AgentStale
	}
	if r.LastHeartbeat.IsZero() || r.Reported == ReportedStarting {
		return ports.AgentStarting
	}
	if r.RunningCommands > 0 || r.Reported == ReportedBusy || r.Reported == ReportedDraining {
		return ports.AgentBusy
	}
	return ports.AgentReady
}

// Registry is the set of agents known to the server. Not safe for concurrent use.
type Registry struct {
	records map[string]*Record
	nextGen uint64
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{records: map[string]*Record{}}
}

// Connect records a new connection of agent id and returns its generation.
// A connection with the same id replaces the previous one, which must then be
// closed by the caller; replaced says whether there was one. Commands counted
// for the old connection are kept: the agent still runs them.
func (g *Registry) Connect(id string, info Info, heartbeatInterval time.Duration, now time.Time) (gen uint64, replaced bool) {
	g.nextGen++
	r, ok := g.records[id]
	if !ok {
		r = &Record{ID: id}
		g.records[id] = r
	}
	replaced = ok && r.Connected
	r.Info = info
	r.Generation = g.nextGen
	r.Connected = true
	r.ConnectedAt = now
	r.LastHeartbeat = time.Time{}
	r.DisconnectedAt = time.Time{}
	r.HeartbeatInterval = heartbeatInterval
	r.Reported = ReportedUnknown
	return r.Generation, replaced
}

// current returns the record of id only if gen is its live connection.
func (g *Registry) current(id string, gen uint64) *Record {
	r, ok := g.records[id]
	if !ok || r.Generation != gen || !r.Connected {
		return nil
	}
	return r
}

// Heartbeat records a heartbeat on connection gen. It reports false when gen
// is not the agent's current connection (a replaced stream still talking),
// and whether the agent's status changed with it (it reported another, or
// it was stale): most heartbeats change nothing but the time.
func (g *Registry) Heartbeat(id string, gen uint64, reported Reported, now time.Time) (current, statusChanged bool) {
	r := g.current(id, gen)
	if r == nil {
		return false, false
	}
	statusChanged = r.Reported != reported ||
		(r.HeartbeatInterval > 0 && now.Sub(r.LastHeartbeat) > MissedHeartbeatsForStale*r.HeartbeatInterval)
	r.LastHeartbeat = now
	r.Reported = reported
	return true, statusChanged
}

// SetMetrics records the latest metrics reported on connection gen.
func (g *Registry) SetMetrics(id string, gen uint64, m ports.Metrics) bool {
	r := g.current(id, gen)
	if r == nil {
		return false
	}
	r.Metrics = &m
	return true
}

// Disconnect marks connection gen of id closed. A stale generation (the
// connection was already replaced) changes nothing and reports false.
func (g *Registry) Disconnect(id string, gen uint64, now time.Time) bool {
	r := g.current(id, gen)
	if r == nil {
		return false
	}
	r.Connected = false
	r.DisconnectedAt = now
	return true
}

// CommandStarted and CommandEnded keep the per-agent command count.
func (g *Registry) CommandStarted(id string) {
	if r, ok := g.records[id]; ok {
		r.RunningCommands++
	}
}

// CommandEnded is the counterpart of CommandStarted.
func (g *Registry) CommandEnded(id string) {
	if r, ok := g.records[id]; ok && r.RunningCommands > 0 {
		r.RunningCommands--
	}
}

// SessionKept marks one of id's running commands a kept session;
// SessionUnkept is its counterpart, when that command ends.
func (g *Registry) SessionKept(id string) {
	if r, ok := g.records[id]; ok {
		r.KeptSessions++
	}
}

// SessionUnkept is the counterpart of SessionKept.
func (g *Registry) SessionUnkept(id string) {
	if r, ok := g.records[id]; ok && r.KeptSessions > 0 {
		r.KeptSessions--
	}
}

// Sweep forgets agents whose stream has been closed for at least grace,
// except those keep names (awaited back), and returns their ids.
func (g *Registry) Sweep(now time.Time, grace time.Duration, keep ...string) []string {
	var gone []string
	for id, r := range g.records {
		if !r.Connected && now.Sub(r.DisconnectedAt) >= grace && !slices.Contains(keep, id) {
			gone = append(gone, id)
			delete(g.records, id)
		}
	}
	sort.Strings(gone)
	return gone
}

// Expired lists the agents Sweep would forget at now, sorted.
func (g *Registry) Expired(now time.Time, grace time.Duration) []string {
	var out []string
	for id, r := range g.records {
		if !r.Connected && now.Sub(r.DisconnectedAt) >= grace {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Forget drops id at once, connected or not (its environment is gone).
func (g *Registry) Forget(id string) bool {
	_, ok := g.records[id]
	delete(g.records, id)
	return ok
}

// Get returns a copy of the record of id.
func (g *Registry) Get(id string) (Record, bool) {
	r, ok := g.records[id]
	if !ok {
		return Record{}, false
	}
	return *r, true
}

// IsCurrent reports whether gen is the live connection of id.
func (g *Registry) IsCurrent(id string, gen uint64) bool {
	return g.current(id, gen) != nil
}

// All returns copies of every record, sorted by id. Pointers are sorted,
// not the records: with ten thousand agents, swapping whole records made
// every listing (and every dispatch) cost milliseconds under the lock.
func (g *Registry) All() []Record {
	ptrs := make([]*Record, 0, len(g.records))
	for _, r := range g.records {
		ptrs = append(ptrs, r)
	}
	sort.Slice(ptrs, func(i, j int) bool { return ptrs[i].ID < ptrs[j].ID })
	out := make([]Record, len(ptrs))
	for i, r := range ptrs {
		out[i] = *r
	}
	return out
}
