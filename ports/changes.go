package ports

// ChangeKind names a collection whose members changed: what a live view
// (the dashboard) reloads when it hears of it.
type ChangeKind uint32

const (
	ChangeAgents ChangeKind = 1 << iota
	ChangeEnvironments
	ChangeSessions
	ChangeMissions
	ChangeHITL
	ChangeTasks
	// ChangeAgentMetrics: heartbeats and metrics that changed no status.
	ChangeAgentMetrics
	// ChangePorts: an agent's listening ports changed.
	ChangePorts
)

// ChangeKinds in the order they are named on the wire.
var ChangeKinds = []struct {
	Kind ChangeKind
	Name string
}{
	{ChangeAgents, "agents"}, {ChangeEnvironments, "environments"}, {ChangeSessions, "sessions"},
	{ChangeMissions, "missions"}, {ChangeHITL, "hitl"}, {ChangeTasks, "tasks"}, {ChangeAgentMetrics, "agent_metrics"},
	{ChangePorts, "ports"},
}

// ChangeNotifier hears that something changed, never what: it must not
// block, and a use case calls it after its change is visible to readers.
type ChangeNotifier interface {
	Changed(kinds ChangeKind)
}

// NoChanges is the ChangeNotifier of a use case nobody watches.
type NoChanges struct{}

func (NoChanges) Changed(ChangeKind) {}
