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

// QuietLink ends the link of the environment's agent and keeps it ended
// until release (LinkQuiescer.QuiesceLink for that agent).
type QuietLink func(ctx context.Context) (release func(), err error)

// QuietLinkHibernator is a Runtime whose Hibernate may need the
// environment's agent link quiet (LinkQuiescer) while it saves, depending
// on a mode that can change at any time (a runtime learns its engine's
// abilities in the background). The hibernate use case calls
// HibernateQuiet instead of Hibernate: the runtime decides the mode of
// this hibernation once, calls quiet (when not nil) before saving if and
// only if that mode needs it, and releases the hold before it returns,
// saved or not (before any Wake: the woken agent must reconnect at once).
// Asking first and saving after would let the mode change in between.
// Only a save with the memory needs the link quiet, so a call of quiet
// says this hibernation saves the memory: the use case checks
// AGENTIC_HIBERNATE_MAX_BYTES again there, with the memory's size, and an
// error from quiet (the use case's limit refusal) must end the
// hibernation unsaved and be returned wrapped.
type QuietLinkHibernator interface {
	HibernateQuiet(ctx context.Context, name string, quiet QuietLink) (Hibernation, error)
}
