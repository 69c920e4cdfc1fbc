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

// PlannedSave is a save a runtime is about to make, as it tells the
// hibernate use case before making it (QuietLink).
type PlannedSave struct {
	// Mode is what the save keeps, decided once for this hibernation.
	Mode HibernateMode
	// Bytes is what the runtime expects the save to take on disk, by the
	// measure its Hibernation.Bytes will give (Docker's filesystem save:
	// the container's writable layer as it is now); 0 when it cannot tell
	// (the use case then counts a save with the memory as the guest's
	// memory).
	Bytes int64
}

// QuietLink is called by the runtime with the save it is about to make,
// before making it: the use case checks AGENTIC_HIBERNATE_MAX_BYTES with
// that save's estimate (an error refuses the save) and holds it reserved
// until the save ends; for a save with the memory it also ends the link
// of the environment's agent and keeps it ended until release
// (LinkQuiescer.QuiesceLink for that agent).
type QuietLink func(ctx context.Context, save PlannedSave) (release func(), err error)

// QuietLinkHibernator is a Runtime whose Hibernate may need the
// environment's agent link quiet (LinkQuiescer) while it saves, depending
// on a mode that can change at any time (a runtime learns its engine's
// abilities in the background), and whose saves' sizes are known only to
// it. The hibernate use case calls HibernateQuiet instead of Hibernate:
// the runtime decides the mode of this hibernation once, calls quiet
// (when not nil) with that mode and its estimate before every save it
// makes, and releases the hold before it returns, saved or not (before
// any Wake: the woken agent must reconnect at once). Asking first and
// saving after would let the mode change in between. The call of quiet
// is where the use case checks AGENTIC_HIBERNATE_MAX_BYTES again, with
// what this save is expected to take (a look before the save knows
// neither the mode nor a filesystem save's size), and an error from quiet
// (the use case's limit refusal) must end the hibernation unsaved and be
// returned wrapped.
type QuietLinkHibernator interface {
	HibernateQuiet(ctx context.Context, name string, quiet QuietLink) (Hibernation, error)
}
