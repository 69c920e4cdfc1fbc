package ports

// LinkReports is what the agent link reports to, given to it at
// construction: the sessions each agent reports on (re)connect, the
// permission questions of its commands, and which agents are held for
// someone. The use cases behind it need the link themselves, so at the
// composition root it is a router made before the link and bound to them
// once they exist.
type LinkReports interface {
	SessionReconciler
	PermissionAsker
	HeldAgents
	AwaitedAgents
}

// AwaitedAgents names the agents away on purpose that will come back (their
// environment hibernated, or on its way in or out): the link keeps such an
// agent listed, and what it runs, past its disconnect grace, instead of
// forgetting it and ending its commands and sessions as lost.
type AwaitedAgents interface {
	AgentAwaited(agentID string) bool
}

// HeldAgents names the agents held for someone (a warm pool's idle
// members): no mission, no command but housekeeping, no file work goes to
// them.
type HeldAgents interface {
	AgentHeld(agentID string) bool
}

// NoLinkReports is the LinkReports of a link nobody listens to: reports are
// dropped, permission questions refused, no agent is held.
type NoLinkReports struct{}

// ReconcileSessions implements SessionReconciler.
func (NoLinkReports) ReconcileSessions(string, []ReportedSession) {}

// PermissionAsked implements PermissionAsker.
func (NoLinkReports) PermissionAsked(PermissionRequest) bool { return false }

// AgentHeld implements HeldAgents.
func (NoLinkReports) AgentHeld(string) bool { return false }

// AgentAwaited implements AwaitedAgents.
func (NoLinkReports) AgentAwaited(string) bool { return false }
