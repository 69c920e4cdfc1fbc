package ports

import (
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"time"
)

// Errors of tasks.
var (
	ErrTaskNotFound     = errors.New("task not found")
	ErrTaskConflict     = errors.New("a task with this id or idempotency key exists with another manifest")
	ErrArtifactNotFound = errors.New("artifact not found")
)

// TaskRecord is a task as stored: its checkpoint. It holds no secret value,
// only the manifest (which names secrets, never holds them).
type TaskRecord struct {
	ID             string
	Name           string
	Labels         map[string]string
	State          string
	Reason         string
	Error          string
	CreatedAt      time.Time
	StateChangedAt time.Time
	StartedAt      time.Time
	FinishedAt     time.Time
	Phases         []TaskPhase
	// Manifest is the manifest as submitted (YAML or JSON).
	Manifest       string
	IdempotencyKey string
	// ManifestSHA256 identifies the manifest for idempotency.
	ManifestSHA256 string
	Environment    TaskEnvironment
	AgentID        string
	CommandID      string
	ExitCode       *int
	BaseCommit     string
	// Workspace is the workspace's absolute path on the agent.
	Workspace string
	Progress  TaskProgress
	Artifacts []Artifact
	// PreserveUntil is when a preserved environment is destroyed.
	PreserveUntil time.Time
	// Usage is what the run's requests through injected secrets used.
	Usage TaskUsage
	// Placeholders are the placeholders of the run's injected secrets, by
	// secret name (never a value): a restarted server gives each back to
	// its secret, as the workload still holds them.
	Placeholders map[string]string
}

// TaskUsage counts a run's requests through its injected secrets and, for
// a model API, the tokens its answers reported and what they cost.
type TaskUsage struct {
	Requests                 int64
	InputTokens              int64
	OutputTokens             int64
	CacheCreationInputTokens int64
	CacheReadInputTokens     int64
	CostUSD                  float64
	// BytesSent and BytesReceived are the requests' and answers' body
	// bytes carried to and from the hosts.
	BytesSent, BytesReceived int64
}

// Clone copies r with everything it refers to, so that a record handed out
// and the one kept never change each other.
func (r TaskRecord) Clone() TaskRecord {
	r.Labels = maps.Clone(r.Labels)
	r.Placeholders = maps.Clone(r.Placeholders)
	r.Phases = slices.Clone(r.Phases)
	r.Artifacts = slices.Clone(r.Artifacts)
	if r.ExitCode != nil {
		c := *r.ExitCode
		r.ExitCode = &c
	}
	return r
}

// TaskPhase is a state entered at a time.
type TaskPhase struct {
	State string
	At    time.Time
}

// TaskEnvironment is where a task runs.
type TaskEnvironment struct {
	Name    string
	Runtime string
}

// TaskProgress is the run's activity as far as the server has seen it.
type TaskProgress struct {
	OutputBytes    int64
	ToolCalls      int
	CurrentTool    string
	Turns          int
	CostUSD        float64
	LastActivityAt time.Time
	// Activity is what the agent is doing: working, idle or waiting.
	Activity string
}

// Artifact is a file a task produced, stored on the server.
type Artifact struct {
	// Name is its path relative to the workspace.
	Name        string
	Size        int64
	SHA256      string
	ContentType string
}

// TaskStore keeps task records durably: Put returns once the record is on
// disk (a crash after it keeps it); a crash during it leaves the old record
// or the new one, never a torn one. Its cost does not grow with the number
// of tasks stored.
type TaskStore interface {
	Put(ctx context.Context, t TaskRecord) error
	Get(ctx context.Context, id string) (TaskRecord, error)
	// List returns every task, in no particular order.
	List(ctx context.Context) ([]TaskRecord, error)
	Delete(ctx context.Context, id string) error
}

// TaskEvent is one entry of a task's event stream as kept: Data is its
// JSON.
type TaskEvent struct {
	ID   int64  `json:"id"`
	Type string `json:"type"`
	Data []byte `json:"data"`
}

// TaskEventLog keeps each task's event stream (states, claude's activity,
// the run's output) so that it outlives a restart of the server. Appends
// are not synced: a crash may lose the last few, never reorder them.
type TaskEventLog interface {
	Append(taskID string, ev TaskEvent) error
	// Read returns a task's events in the order appended (none for a task
	// never seen); a last entry cut by a crash is left out.
	Read(taskID string) ([]TaskEvent, error)
}

// Workspace is the server's side of a task's files: it stages a repository
// into a tree to upload, and takes the tree back to keep artifacts and a
// patch before the environment is touched.
type Workspace interface {
	// Stage fetches the repository at branch and commit (unreachable is an
	// error), writes TASK.md (excluded from git) and returns the base commit.
	Stage(ctx context.Context, taskID string, repo TaskRepository, taskMD string) (baseCommit string, err error)
	// Tree streams the staged tree as tar (with .git).
	Tree(ctx context.Context, taskID string) (io.ReadCloser, error)
	// Collect reads the workspace as tar, keeps what matches patterns
	// (confined to the tree, at most maxBytes each) and, with a base
	// commit, changes.patch from it; it returns what it kept.
	Collect(ctx context.Context, taskID string, tree io.Reader, baseCommit string, patterns []string) ([]Artifact, error)
	// Open reads a kept artifact.
	Open(taskID, name string) (io.ReadCloser, error)
	// Remove forgets everything of a task.
	Remove(taskID string) error
}

// TaskRepository is what Stage fetches.
type TaskRepository struct {
	URL    string
	Branch string
	Commit string
}

// PermissionRequest is a running command's question (claude's permission
// prompt): may it use ToolName with Input?
type PermissionRequest struct {
	AgentID   string `json:"agent_id"`
	CommandID string `json:"command_id"`
	RequestID string `json:"request_id"`
	ToolName  string `json:"tool_name"`
	InputJSON string `json:"input_json"`
}

// PermissionAsker hears the permission requests of agents' commands; it
// answers whether the command was one of its own.
type PermissionAsker interface {
	PermissionAsked(req PermissionRequest) bool
}

// PermissionAskers asks each in turn until one owns the command.
type PermissionAskers []PermissionAsker

// PermissionAsked implements PermissionAsker.
func (a PermissionAskers) PermissionAsked(req PermissionRequest) bool {
	for _, x := range a {
		if x.PermissionAsked(req) {
			return true
		}
	}
	return false
}

// ClaudePermissionTool is claude's --permission-prompt-tool: the MCP server
// ClaudePermissionMCPConfig starts (the agent's own binary, over stdio).
const ClaudePermissionTool = "mcp__agentic__permission"

// ClaudePermissionMCPConfig is claude's --mcp-config for it; the agent
// exports it to commands with permission prompts as AGENTIC_MCP_CONFIG.
const ClaudePermissionMCPConfig = `{"mcpServers":{"agentic":{"command":"sh","args":["-c","exec \"$AGENTIC_AGENT_EXE\" __agentic-permission"]}}}`

// PermissionDecider sends the answer to a permission request back to the
// command that asked.
type PermissionDecider interface {
	DecidePermission(ctx context.Context, req PermissionRequest, allow bool, message string) error
}
