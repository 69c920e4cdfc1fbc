package ports

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Errors a Runtime returns, wrapped with details (test with errors.Is).
var (
	ErrEnvNotFound        = errors.New("environment not found")
	ErrEnvExists          = errors.New("environment already exists")
	ErrRuntimeUnavailable = errors.New("runtime unavailable")
	ErrInvalidSpec        = errors.New("invalid environment spec")
	// ErrUnsupported is an operation the runtime does not declare (Pause
	// where Capabilities().Pause is false).
	ErrUnsupported = errors.New("not supported by this runtime")
)

// NetworkMode is how an environment reaches the network. Its values are
// the contract's (the API's "network", a task manifest's network_mode,
// AGENTIC_ALLOWED_NETWORKS); "" in a spec means the runtime's default.
type NetworkMode string

// Network modes of an environment. NetworkNone still lets the agent reach
// the management server, through whatever private channel the runtime has
// (a mounted unix socket, a virtio-serial port); nothing else gets out.
const (
	NetworkNone NetworkMode = "none"
	NetworkHost NetworkMode = "host"
	// NetworkUser is QEMU user networking (outbound NAT, nothing inbound).
	NetworkUser NetworkMode = "user"
	// NetworkBridge is the engine's default bridged network.
	NetworkBridge NetworkMode = "bridge"
	// NetworkProxy is no network device, egress only through the agent
	// link's filtering proxy, to the environment's allowed hosts.
	NetworkProxy NetworkMode = "proxy"
)

// KnownNetworkModes lists every mode, the most closed first.
var KnownNetworkModes = []NetworkMode{NetworkNone, NetworkProxy, NetworkUser, NetworkBridge, NetworkHost}

// Valid reports whether m is one of the modes ("" is not: it is the
// absence of one).
func (m NetworkMode) Valid() bool { return slices.Contains(KnownNetworkModes, m) }

// ParseNetworkMode turns a caller's word into a mode, refusing anything
// unknown (the empty string included) with ErrInvalidSpec, so that a typo
// is a 400 at the edge rather than a runtime's puzzled refusal later.
func ParseNetworkMode(s string) (NetworkMode, error) {
	if m := NetworkMode(s); m.Valid() {
		return m, nil
	}
	return "", fmt.Errorf("%w: unknown network mode %q (known: %s)", ErrInvalidSpec, s, NetworkModeList(KnownNetworkModes))
}

// NetworkModeList joins modes with ", " for messages and help.
func NetworkModeList(ms []NetworkMode) string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m)
	}
	return strings.Join(out, ", ")
}

// EgressProxyAddr is where an agent of a NetworkProxy environment serves
// its egress proxy, on the environment's own loopback.
const EgressProxyAddr = "127.0.0.1:3128"

// LabelAllowedHosts is the environment label that keeps a NetworkProxy
// environment's allowed hosts (comma-separated) with the environment itself,
// so that a restarted server knows them.
const LabelAllowedHosts = "agentic-sandbox.allowed-hosts"

// LabelTier and LabelPlacement are the environment labels that keep its
// spec's Tier and Placement (as JSON) with the environment itself, so that a
// restarted server still shows them.
const (
	LabelTier      = "agentic-sandbox.isolation"
	LabelPlacement = "agentic-sandbox.placement"
)

// Resources bounds an environment; zero means the adapter's default.
type Resources struct {
	CPUs     float64
	MemoryMB int
	PIDs     int
	DiskGB   int
}

// AgentBootstrap is how every environment gets its agent: the static
// agentic-agent binary, an id equal to the environment's name, a fresh
// secret (its hash already stored by the caller) and the way back to the
// management server.
type AgentBootstrap struct {
	ID     string
	Secret string
	// Binary is the host path of the static agentic-agent binary.
	Binary string
	// ServerURL reaches the agent link over TCP from the host (http://127.0.0.1:8120).
	ServerURL string
	// Socket is a unix socket on the host where the agent link also
	// listens, for environments without a network.
	Socket string
}

var environmentName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidEnvironmentName reports whether name can name an environment on every
// runtime (a container, a domain, a directory) and be its agent's id: 1-63
// letters, digits, '.', '_' or '-', starting with a letter or digit.
func ValidEnvironmentName(name string) bool { return environmentName.MatchString(name) }

// EnvironmentSpec is what Provision makes.
type EnvironmentSpec struct {
	// Name is the environment's name and its agent's id.
	Name string
	// Image: a container image, or a disk image path for VMs; empty means
	// the adapter's default (a locally built image, the project's tiny VM).
	Image string
	// Profile names a preset of the adapter ("" for its default).
	Profile      string
	Resources    Resources
	Network      NetworkMode // "" means the adapter's default (its first NetworkModes entry)
	ReadOnlyRoot bool
	// Tier names a stronger sandbox than the runtime's standard one
	// (TierGVisor); "" is the standard. Only Capabilities().Tiers may be named.
	Tier string
	// Placement constrains where a scheduler puts the environment; only
	// runtimes declaring Capabilities().Placement accept a non-empty one.
	Placement Placement
	Labels    map[string]string
	Agent     AgentBootstrap
	// Progress, when set, is told each step while the environment comes up.
	Progress func(step string)
	// AgentConnected, when set, is closed once the environment's agent has
	// registered: proof that the environment runs, for a runtime whose
	// engine reports that later (a kubelet's status arrives up to a second
	// after the container starts). Provision may return then.
	AgentConnected <-chan struct{}
}

// TierGVisor runs the environment under gVisor's user-space kernel (runsc):
// a Kubernetes RuntimeClass, or dockerd's runsc runtime.
const TierGVisor = "gvisor"

// Placement is where a scheduler may put an environment: nodes with every
// label of NodeSelector, and nodes whose taints the Tolerations tolerate.
type Placement struct {
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	Tolerations  []Toleration      `json:"tolerations,omitempty"`
}

// Empty reports whether p asks for nothing.
func (p Placement) Empty() bool { return len(p.NodeSelector) == 0 && len(p.Tolerations) == 0 }

// Toleration tolerates a node taint (Kubernetes' meaning: Operator "Equal"
// (the default) or "Exists"; Effect "" (any), "NoSchedule",
// "PreferNoSchedule" or "NoExecute").
type Toleration struct {
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator,omitempty"`
	Value    string `json:"value,omitempty"`
	Effect   string `json:"effect,omitempty"`
}

// Equal reports whether p and q ask for the same: the same selector labels
// and the same tolerations in the same order.
func (p Placement) Equal(q Placement) bool {
	return maps.Equal(p.NodeSelector, q.NodeSelector) && slices.Equal(p.Tolerations, q.Tolerations)
}

// EnvState is the state of an environment as its runtime sees it.
type EnvState string

const (
	EnvCreating EnvState = "creating"
	EnvRunning  EnvState = "running"
	EnvStopped  EnvState = "stopped"
	EnvPaused   EnvState = "paused"
	// EnvHibernated is saved to disk by Hibernate, holding no memory or
	// CPU, until Wake.
	EnvHibernated EnvState = "hibernated"
	EnvFailed     EnvState = "failed"
)

// Environment is one environment a runtime manages for this server.
type Environment struct {
	Name    string
	Runtime string
	// RuntimeID is the engine's own id (container id, domain UUID, pid).
	RuntimeID string
	State     EnvState
	Image     string
	Network   NetworkMode
	Resources Resources
	CreatedAt time.Time
	// Detail says why a failed or stopped environment is so (exit code, reason).
	Detail string
	Labels map[string]string
	// HibernatedAt is when a hibernated environment was saved, SavedBytes
	// what its saved state (memory, checkpoint) takes on disk; zero for
	// any other.
	HibernatedAt time.Time
	SavedBytes   int64
}

// Runtime provisions and manages the environments agents live in. Every
// method honours ctx. Adapters see and touch only environments this server
// made (marked by labels, metadata or state files), never anything else on
// the engine.
type Runtime interface {
	Capabilities() RuntimeCapabilities
	// Ping reports whether the engine is reachable (ErrRuntimeUnavailable if not).
	Ping(ctx context.Context) error
	// Provision creates and starts an environment whose agent connects to
	// the management server. It returns once the environment runs; the
	// agent registers on its own shortly after. ErrEnvExists if the name is
	// taken, ErrInvalidSpec for a spec the adapter cannot honour. A failed
	// Provision leaves nothing behind.
	Provision(ctx context.Context, spec EnvironmentSpec) (Environment, error)
	Start(ctx context.Context, name string) error
	// Pause freezes a running environment's processes, keeping their memory;
	// Resume lets them run again. ErrUnsupported unless Capabilities().Pause.
	Pause(ctx context.Context, name string) error
	Resume(ctx context.Context, name string) error
	// Hibernate saves a running environment to disk and frees its memory
	// and CPU: with HibernateMemory its processes continue after Wake as if
	// nothing happened; with HibernateFilesystem they end and only its files
	// are kept. Inspect then reports EnvHibernated, also after a restart of
	// the server. ErrUnsupported unless Capabilities().Hibernate says so.
	Hibernate(ctx context.Context, name string) (Hibernation, error)
	// Wake runs a hibernated environment again from its saved state; its
	// agent reconnects under the same identity on its own. A saved state
	// that is missing or unusable is ErrSavedStateLost (the environment
	// cannot be woken; Destroy still removes it). Any other error is the
	// host's (the engine or hypervisor failing for now): the saved state
	// is left as it was, Inspect still says EnvHibernated, and a later
	// Wake tries again.
	Wake(ctx context.Context, name string) error
	// Stop stops an environment, keeping it for Start (graceful, then forced).
	Stop(ctx context.Context, name string) error
	// Destroy stops and removes an environment and everything it used
	// (containers, domains, disks, sockets, processes).
	Destroy(ctx context.Context, name string) error
	Inspect(ctx context.Context, name string) (Environment, error)
	// List returns this server's environments on the engine.
	List(ctx context.Context) ([]Environment, error)
	// Recover is called once after the server starts: it finds the
	// environments an earlier run made, takes them over (reconnecting any
	// host-side plumbing such as a serial proxy) and returns them.
	Recover(ctx context.Context) ([]Environment, error)
}

// HibernateMode is what hibernating an environment keeps.
type HibernateMode string

const (
	HibernateNone HibernateMode = "none"
	// HibernateFilesystem keeps the files; processes end and the
	// environment starts afresh at Wake.
	HibernateFilesystem HibernateMode = "filesystem"
	// HibernateMemory keeps memory and processes: what ran continues.
	HibernateMemory HibernateMode = "memory"
)

// Of reports the mode, "" read as HibernateNone.
func (m HibernateMode) Of() HibernateMode {
	if m == "" {
		return HibernateNone
	}
	return m
}

// Hibernation is what Hibernate saved.
type Hibernation struct {
	Mode HibernateMode
	// Bytes is the saved state's size on disk.
	Bytes int64
	At    time.Time
}

// ErrSavedStateLost is a Wake whose saved state is missing or unusable.
var ErrSavedStateLost = errors.New("the saved state of the hibernated environment is missing or unusable")

// LabelInjected is the environment label that keeps its injected secrets'
// references and placeholders (JSON; never a value) with the environment
// itself, so that a restarted server gives its workload the same
// placeholders and resolves the values again.
const LabelInjected = "agentic-sandbox.injected"
