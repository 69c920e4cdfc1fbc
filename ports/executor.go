package ports

import "context"

// ExecutorHub is what the AIWG client asks of the mission service.
type ExecutorHub interface {
	// Resync is called on every connect of the executor stream. It returns
	// the executor.resync event (sent first), and the mission.reconnected /
	// mission.resumed pairs (sent after the outbox backlog). Missions it
	// resumes are stored as running before it returns.
	Resync(ctx context.Context) (resync Event, pairs []Event, err error)
	// HITLResponded handles an inbound mission.hitl_responded frame.
	HITLResponded(ctx context.Context, hitlID, text string) error
}

// ExecutorStatus is what GET /api/v1/aiwg/status shows. Never a token.
type ExecutorStatus struct {
	Configured            bool
	Connected             bool
	Endpoint              string
	SandboxID             string
	ExecutorID            string
	ExecutorRegisterError string
}

// ExecutorLink is the connection to aiwg serve, as the rest of the server sees it.
type ExecutorLink interface {
	// Configured reports whether AIWG_SERVE_ENDPOINT is set.
	Configured() bool
	// Registered reports whether the executor registration holds a token.
	Registered() bool
	ExecutorID() string
	// VerifyToken compares a dispatch bearer token with the executor token in constant time.
	VerifyToken(token string) bool
	Status() ExecutorStatus
	// Reconnect drops the backoff wait and reconnects now.
	Reconnect()
	// Flush waits until every event in the outbox was written to the
	// executor stream, or ctx ends.
	Flush(ctx context.Context) error
}
