package ports

import "time"

// The words the server, the agent and the API exchange, declared once.

// AgentStatus is what operators see of an agent.
type AgentStatus string

const (
	AgentStarting     AgentStatus = "starting"
	AgentReady        AgentStatus = "ready"
	AgentBusy         AgentStatus = "busy"
	AgentStale        AgentStatus = "stale"
	AgentDisconnected AgentStatus = "disconnected"
)

// AgentStatuses lists every status, in the order of an agent's life.
var AgentStatuses = []AgentStatus{AgentStarting, AgentReady, AgentBusy, AgentStale, AgentDisconnected}

// Working reports whether an agent in this status is connected and
// heartbeating, so it can take work (a busy agent can take more).
func (s AgentStatus) Working() bool { return s == AgentReady || s == AgentBusy }

// Connected reports whether an agent in this status has a live stream,
// even if it is still starting or has gone quiet.
func (s AgentStatus) Connected() bool { return s != AgentDisconnected && s != AgentStale && s != "" }

// RuntimeKind is the isolation tier an agent runs in; AIWG sees it as
// the capability "isolation:<kind>".
type RuntimeKind string

const (
	KindHost      RuntimeKind = "host"
	KindContainer RuntimeKind = "container"
	KindVM        RuntimeKind = "vm"
)

// Valid reports whether k is one of the kinds.
func (k RuntimeKind) Valid() bool { return k == KindHost || k == KindContainer || k == KindVM }

// SessionType is how a session is used.
type SessionType string

const (
	// SessionInteractive is a person at a terminal: always a PTY, stdin
	// open, persisted in tmux on the agent.
	SessionInteractive SessionType = "interactive"
	// SessionHeadless is an agent run with a prompt: PTY optional, no stdin.
	SessionHeadless SessionType = "headless"
	// SessionBackground is a long-running detached process: PTY optional,
	// stdin through the PTY or a fifo.
	SessionBackground SessionType = "background"
)

// Valid reports whether t is one of the types.
func (t SessionType) Valid() bool {
	return t == SessionInteractive || t == SessionHeadless || t == SessionBackground
}

// TimestampLayout is how the contract writes times: RFC 3339 in UTC with
// exactly three fractional digits (time.RFC3339Nano drops trailing zeros).
const TimestampLayout = "2006-01-02T15:04:05.000Z"

// FormatTimestamp renders t in TimestampLayout.
func FormatTimestamp(t time.Time) string {
	return t.UTC().Truncate(time.Millisecond).Format(TimestampLayout)
}
