// Package ports holds the interfaces between the core and the adapters, and
// the plain types they exchange. Nothing here does I/O.
package ports

import (
	"context"
	"errors"
	"time"
)

// Clock gives the current time; tests pass a fake one.
type Clock interface {
	Now() time.Time
}

// IDGenerator makes unique ids (command ids, session ids, ...).
type IDGenerator interface {
	NewID() string
}

// Errors an AgentLink returns; adapters map them to REST codes / Connect codes.
var (
	ErrAgentNotFound     = errors.New("agent not found")
	ErrAgentNotConnected = errors.New("agent not connected")
	ErrCommandNotFound   = errors.New("command not found")
	ErrCommandEnded      = errors.New("command already ended")
	ErrAgentGone         = errors.New("agent disconnected while the command ran")
	ErrCommandLost       = errors.New("the agent no longer runs the command")
	// ErrAgentHeld: the agent is a warm pool's idle member, held for
	// whoever takes it; no command or file work reaches it before then.
	ErrAgentHeld = errors.New("agent held for a warm pool")
	// ErrStdinBusy: the command's input queue is full (its process has not
	// read what is queued); nothing of the write was queued, retry later.
	ErrStdinBusy = errors.New("the command's input queue is full")
	// ErrStdinClosed: the command's stdin was closed (by an eof write, or by
	// the process); nothing more can be written.
	ErrStdinClosed = errors.New("the command's stdin is closed")
)

// OutputStream says where a chunk of output came from.
type OutputStream int

const (
	StreamStdout OutputStream = iota + 1
	StreamStderr
	// StreamPTY is the merged output of a command run in a pseudo-terminal.
	StreamPTY
)

// CommandSpec is what to run on an agent.
type CommandSpec struct {
	Command    string
	Args       []string
	WorkingDir string
	Env        map[string]string
	// Zero means no timeout.
	Timeout time.Duration
	// User to run as; empty means the agent's own user.
	RunAs string
	PTY   bool
	Cols  uint16
	Rows  uint16
	Term  string
	// StdinOpen keeps stdin open for WriteStdin; otherwise it is closed at once.
	StdinOpen   bool
	SessionID   string
	SessionName string
	// SessionType marks a command that is a session, reported back on
	// every agent (re)connect; empty for a plain command.
	SessionType SessionType
	// Persist keeps the session in tmux where the agent has tmux, so it
	// outlives the agent process (needs PTY and SessionName).
	Persist bool
	// PermissionPrompts gives the command a way to ask for permissions
	// (PermissionRequest), answered through the server.
	PermissionPrompts bool
	// InjectEndpoints maps a variable to the name of an injected secret
	// (core/inject): the agent sets the variable to its loopback endpoint
	// for that secret, which carries requests to the server.
	InjectEndpoints map[string]string
}

// OutputChunk is a piece of a command's output.
type OutputChunk struct {
	Stream OutputStream
	Data   []byte
	// Offset of Data within its stream.
	Offset uint64
	// Lost is how many bytes of the stream right before Data never
	// arrived (the link knows the stream's offsets and Data starts past
	// the next one): the receiver marks them as a gap.
	Lost uint64
}

// CommandResult is how a command ended.
type CommandResult struct {
	// The real exit code; 128+N when killed by signal N; 127 when it could not start.
	ExitCode int
	// Why the command could not run or finish; empty on a normal exit.
	Error    string
	Duration time.Duration
	TimedOut bool
	// Signal that killed the process, 0 if it exited by itself.
	Signal int
}

// Success is true for a clean zero exit.
func (r CommandResult) Success() bool {
	return r.ExitCode == 0 && r.Error == "" && !r.TimedOut && r.Signal == 0
}

// StartOptions says how the server treats a command it starts.
type StartOptions struct {
	// OnOutput receives output in order. It is called from the agent link's
	// receive loop, so it must return quickly (append to a buffer, not block on a network).
	OnOutput func(OutputChunk)
	// OnStarted is called once when the agent reports the process running
	// (or its first output arrives), from the same loop as OnOutput.
	OnStarted func()
	// Detached commands outlive their caller's context and survive agent
	// reconnects; others are killed when the caller's context ends.
	Detached bool
	// CommandID, when set, is the command's id (so a caller can store it
	// before the command exists); otherwise the link makes one.
	CommandID string
	// Housekeeping marks the server's own command on an agent held for a
	// pool (its warm-up): the only kind such an agent runs.
	Housekeeping bool
	// Resume (Attach only) is how far the caller already has each output
	// stream of the command (a restarted server's stored log of it):
	// output before is dropped when the agent sends it again, and output
	// that starts past it comes with Lost set. Streams not named start
	// wherever the agent's output does.
	Resume map[OutputStream]uint64
}

// Command is a command running on an agent.
type Command interface {
	ID() string
	AgentID() string
	// Done is closed when the result is known.
	Done() <-chan struct{}
	// Result is valid once Done is closed.
	Result() CommandResult
	// WriteStdin queues data (then the end of input when eof) for the
	// process, after what earlier calls queued. nil means queued for
	// delivery in order, never dropped; otherwise nothing was queued:
	// ErrStdinBusy when the queue is full (retry later),
	// ErrAgentNotConnected while the link is down, ErrStdinClosed,
	// ErrCommandEnded.
	WriteStdin(ctx context.Context, data []byte, eof bool) error
	Resize(ctx context.Context, cols, rows uint16) error
	Signal(ctx context.Context, signal int) error
	// Kill stops the whole process group; the result follows as usual.
	Kill(ctx context.Context) error
}

// AgentLink starts and controls commands on connected agents.
type AgentLink interface {
	Start(ctx context.Context, agentID string, spec CommandSpec, opts StartOptions) (Command, error)
	// Lookup finds a command started through this link that has not been forgotten yet.
	Lookup(commandID string) (Command, bool)
	// Attach binds to a detached command started by an earlier run of this
	// server, so its output and result are routed again once its agent
	// reports back. A command the agent no longer runs ends with ErrCommandLost.
	Attach(agentID, commandID string, opts StartOptions) Command
}

// AgentInfo is what the registry knows about one agent.
type AgentInfo struct {
	ID              string
	Status          AgentStatus
	Runtime         RuntimeKind
	Hostname        string
	IPAddress       string
	AgentVersion    string
	Labels          map[string]string
	Capabilities    []string
	System          SystemInfo
	Metrics         *Metrics
	ConnectedAt     time.Time
	LastHeartbeat   time.Time
	DisconnectedAt  time.Time
	RunningCommands int
	// KeptSessions is how many of RunningCommands are kept sessions' (an
	// interactive or background session's shell or process, which may run
	// for days): not work that ends, so an idle policy does not count them.
	KeptSessions int
}

// SystemInfo describes an agent's machine.
type SystemInfo struct {
	OS          string
	Kernel      string
	Arch        string
	CPUCores    uint32
	MemoryBytes uint64
	DiskBytes   uint64
}

// Metrics is an agent's last reported load.
type Metrics struct {
	CPUPercent       float64
	MemoryUsedBytes  uint64
	MemoryTotalBytes uint64
	DiskUsedBytes    uint64
	DiskTotalBytes   uint64
	LoadAvg1         float64
	LoadAvg5         float64
	LoadAvg15        float64
}

// AgentDirectory lists the agents the registry knows.
type AgentDirectory interface {
	Agents() []AgentInfo
	Agent(id string) (AgentInfo, bool)
}

// ErrCredentialExists is a Create for an agent id that has a credential.
var ErrCredentialExists = errors.New("agent credential exists")

// AgentCredentials stores the sha256 hashes of agent secrets.
type AgentCredentials interface {
	// Verify reports whether secret is the one stored for agentID (constant time).
	Verify(agentID, secret string) (bool, error)
	// Put stores the hash of secret for agentID, replacing any previous one.
	Put(agentID, secret string) error
	// Create is Put for a new agent: it refuses, with ErrCredentialExists,
	// to replace the credential of an agent that has one.
	Create(agentID, secret string) error
	// Delete forgets agentID, its kind included.
	Delete(agentID string) error
	// PinKind records kind as agentID's runtime kind unless one is recorded
	// already, and returns the recorded one. Who issues a credential pins
	// the kind it knows (an environment's runtime, the host supervisor); a
	// hand-written credential gets the kind of its first registration.
	PinKind(agentID string, kind RuntimeKind) (RuntimeKind, error)
}

// ReasonEnvironmentDeleted is why an agent is retired when its environment
// is deleted; missions that ran there fail with it.
const ReasonEnvironmentDeleted = "environment_deleted"

// AgentRetirer ends what an agent that will never come back was doing.
type AgentRetirer interface {
	// RetireAgent forgets agentID at once and ends what ran there: commands
	// and sessions end with reason as their error, missions fail with it
	// (snake_case, such as ReasonEnvironmentDeleted).
	RetireAgent(ctx context.Context, agentID, reason string)
}

// AgentDowner ends what an agent whose environment went down (failed or
// stopped: its agent process, container or VM is gone) was running,
// without waiting out the disconnect grace.
type AgentDowner interface {
	// AgentDown ends the commands agentID runs as lost with their agent
	// (the result of an agent that did not come back), unless it is
	// connected. Kept sessions' commands are left running: they may
	// outlive the agent (tmux) and a restarted agent may adopt them. The
	// agent stays known: a start of its environment brings it back. why
	// is logged.
	AgentDown(ctx context.Context, agentID, why string)
}

// ProcessRunner starts processes on the agent's own machine.
type ProcessRunner interface {
	// Start runs spec; spec.Env is added to the agent's environment. A process
	// that cannot start is returned already finished, its result saying why
	// (exit code 127 for a missing program, 126 for one that cannot run).
	// onOutput gets output in order; calls never overlap and never happen
	// after Wait returns.
	Start(spec CommandSpec, onOutput func(stream OutputStream, data []byte)) Process
}

// Process is a process started by a ProcessRunner.
type Process interface {
	Pid() int
	WriteStdin(data []byte) error
	CloseStdin() error
	// Resize works for PTY processes only.
	Resize(cols, rows uint16) error
	// Signal signals the whole process group.
	Signal(sig int) error
	// Kill stops the whole process group: SIGTERM, then SIGKILL after a grace.
	Kill()
	Done() <-chan struct{}
	Wait() CommandResult
}
