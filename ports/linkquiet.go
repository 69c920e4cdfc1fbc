package ports

import "context"

// LinkQuiescer ends one agent's link to the server and keeps it ended: a
// runtime that saves an environment's processes with their memory (CRIU
// on Docker) cannot save a connection to the outside, so the agent must
// hold none while it is saved.
type LinkQuiescer interface {
	// QuiesceLink closes every connection agentID holds to the server and
	// refuses its new ones (as a sign-in the server cannot take now: the
	// agent retries later) until release is called. The agent's commands
	// are not ended: it is away on purpose (AwaitedAgents). Holds nest:
	// each release undoes its own QuiesceLink.
	QuiesceLink(ctx context.Context, agentID string) (release func(), err error)
}

// QuietLinkHibernator is a Runtime whose Hibernate needs the environment's
// agent link quiet (LinkQuiescer) while it saves: the hibernate use case
// quiesces the link around Runtime.Hibernate when HibernateNeedsQuietLink
// says so now (a runtime's mode may change once it knows its engine), and
// releases it once Hibernate returns, before any Wake.
type QuietLinkHibernator interface {
	HibernateNeedsQuietLink() bool
}
