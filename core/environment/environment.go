// Package environment is the server's view of the environments agents
// live in: their states as the API reports them and the progress events
// kept while they come up.
package environment

import (
	"errors"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// State is an environment's state as the server reports it: the runtime's
// state (ports.EnvState), refined by its agent. It lives here rather than in
// ports because only this package's rules (Next, FromRuntime) produce it;
// its words are the API's (EnvironmentState in openapi.yaml).
type State string

// States of an environment.
const (
	StateProvisioning State = "provisioning" // the runtime is making it
	StateBooting      State = "booting"      // it runs; its agent has not registered yet
	StateReady        State = "ready"        // its agent is connected
	StateStopped      State = "stopped"
	StatePaused       State = "paused" // runtimes that can pause
	// Hibernating, Hibernated, Waking: saved to disk by Hibernate (or the
	// idle policy), holding no memory or CPU, until Wake or a use.
	StateHibernating State = "hibernating"
	StateHibernated  State = "hibernated"
	StateWaking      State = "waking"
	StateFailed      State = "failed"
	StateDeleting    State = "deleting"
)

// States lists every state, in the order of an environment's life.
var States = []State{StateProvisioning, StateBooting, StateReady, StatePaused, StateHibernating, StateHibernated, StateWaking, StateStopped, StateFailed, StateDeleting}

// ErrUnknownRuntime is a request for a runtime that is not configured.
var ErrUnknownRuntime = errors.New("runtime not configured")

// Event is one step in an environment's life.
type Event struct {
	At      time.Time
	Step    string
	Message string
}

// Environment is what the API shows.
type Environment struct {
	Name      string
	Runtime   string
	State     State
	RuntimeID string
	Image     string
	Network   ports.NetworkMode
	Resources ports.Resources
	// Tier is the stronger sandbox its request named ("" the standard one),
	// Placement where its request asked the scheduler to put it.
	Tier        string
	Placement   ports.Placement
	AgentID     string
	AgentStatus ports.AgentStatus
	CreatedAt   time.Time
	ReadyAt     time.Time
	// ProvisionTime is request → agent ready (zero until ready).
	ProvisionTime time.Duration
	Error         string
	Events        []Event
	// AllowedHosts are where a proxy environment may connect (normalised rules).
	AllowedHosts []string
	// Egress is its recent connections through the agent, newest last.
	Egress []EgressEntry
	// Labels are its request's labels (a scoped token's on top): what a
	// token's label scope is matched against (core/access). Never an
	// internal label (ReservedLabelPrefix).
	Labels map[string]string
	// Secrets are its injected secrets' references (never a value).
	Secrets []InjectedSecret
	// Hibernate is what its runtime keeps when it hibernates.
	Hibernate ports.HibernateMode
	// HibernatedAt and SavedBytes: when a hibernated environment was saved
	// and what its saved state takes on disk. SleepReason says why it went
	// to sleep ("requested", or the idle policy's "idle for 30m0s").
	HibernatedAt time.Time
	SavedBytes   int64
	SleepReason  string
	// LastActivity is when something last used it, LastActivityKind what
	// (ports.UseExec …); zero until something did.
	LastActivity     time.Time
	LastActivityKind string
	// Idle is its idle policy (zero: never put to sleep).
	Idle ports.IdlePolicy
}

// EgressEntry is one connection of a proxy environment.
type EgressEntry struct {
	At        time.Time
	Host      string
	Port      int
	Allowed   bool
	Reason    string
	BytesUp   int64
	BytesDown int64
	Duration  time.Duration
}

// maxEgress bounds the connections kept per environment.
const maxEgress = 20

// Request is a create request.
type Request struct {
	Runtime      string
	Name         string
	Image        string
	Profile      string
	Resources    ports.Resources
	Network      ports.NetworkMode
	ReadOnlyRoot bool
	// AllowedHosts: with Network proxy, the hosts its commands may reach.
	AllowedHosts []string
	// Tier names a sandbox stronger than the runtime's standard one
	// (ports.TierGVisor), Placement where a scheduler may put it: each only
	// where the runtime's capabilities declare it.
	Tier      string
	Placement ports.Placement
	// Labels are kept with the environment (CheckLabels says which may be).
	Labels map[string]string
	// Secrets are injected secrets (CheckSecrets): every command on its
	// agent holds placeholders, the server adds the values on the way out.
	Secrets []SecretRequest
	// Idle puts it to sleep when unused (only on a runtime that can
	// hibernate, for IdleAfter; DeleteAfter on any).
	Idle ports.IdlePolicy
}

// Observation is what a refresh saw of an environment.
type Observation struct {
	Gone           bool // the runtime no longer has it
	Runtime        ports.EnvState
	AgentConnected bool
}

// Next is the state after an observation. Provisioning and deleting belong
// to the operation in flight and are left alone; an environment whose agent
// never came stays failed while it runs.
func Next(current State, o Observation) State {
	switch {
	case current == StateProvisioning || current == StateDeleting ||
		current == StateHibernating || current == StateWaking:
		return current
	case o.Gone:
		return StateFailed
	}
	switch o.Runtime {
	case ports.EnvStopped:
		return StateStopped
	case ports.EnvFailed:
		return StateFailed
	case ports.EnvPaused:
		return StatePaused
	case ports.EnvHibernated:
		// A wake that failed leaves it failed, whatever the runtime still
		// keeps of it (a saved state it could not use).
		if current == StateFailed {
			return StateFailed
		}
		return StateHibernated
	case ports.EnvRunning:
		if o.AgentConnected {
			return StateReady
		}
		if current == StateFailed {
			return StateFailed
		}
		return StateBooting
	case ports.EnvCreating:
		// An engine that reports the start late (a kubelet's next status
		// round): a connected agent proves it runs.
		if o.AgentConnected {
			return StateReady
		}
	}
	return current
}

// FromRuntime is the state of an environment found on a runtime (after a
// server restart) before its agent has been seen.
func FromRuntime(st ports.EnvState) State {
	switch st {
	case ports.EnvRunning:
		return StateBooting
	case ports.EnvCreating:
		// Still coming up, with no provisioning in flight (that ended with
		// the server that started it): ready once its agent connects.
		return StateBooting
	case ports.EnvPaused:
		return StatePaused
	case ports.EnvHibernated:
		return StateHibernated
	case ports.EnvFailed:
		return StateFailed
	}
	return StateStopped
}
