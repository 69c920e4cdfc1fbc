// Package task holds the rules of tasks (the README's "Tasks",
// docs/contract.md): a manifest in, a repository staged, an environment
// provisioned, a headless run, artifacts and a patch out. The states and
// their legal moves, the outcome of a run, and the manifest's validation
// are pure and table-tested here.
package task

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// State is where a task is.
type State string

// The states, in the order a task that succeeds goes through them, then the
// ends a task can reach from any state that is not an end.
const (
	Pending      State = "pending"
	Staging      State = "staging"
	Provisioning State = "provisioning"
	Ready        State = "ready"
	Running      State = "running"
	Completing   State = "completing"
	Completed    State = "completed"

	Failed          State = "failed"
	FailedPreserved State = "failed_preserved"
	Cancelled       State = "cancelled"
)

// States lists every state, for validation and metrics.
var States = []State{Pending, Staging, Provisioning, Ready, Running, Completing, Completed, Failed, FailedPreserved, Cancelled}

// Terminal reports whether s is an end: nothing moves a task from it.
func (s State) Terminal() bool {
	return s == Completed || s == Failed || s == FailedPreserved || s == Cancelled
}

// Valid reports whether s is a state at all.
func (s State) Valid() bool { return slices.Contains(States, s) }

// forward is each working state's one next step.
var forward = map[State]State{
	Pending:      Staging,
	Staging:      Provisioning,
	Provisioning: Ready,
	Ready:        Running,
	Running:      Completing,
	Completing:   Completed,
}

// ErrIllegalTransition is a move the state machine does not have.
var ErrIllegalTransition = errors.New("illegal task transition")

// CheckTransition says whether a task may go from one state to another:
// one step forward, or from any state that is not an end to failed,
// failed_preserved or cancelled.
func CheckTransition(from, to State) error {
	if from.Terminal() {
		return fmt.Errorf("%w: %s is an end", ErrIllegalTransition, from)
	}
	if !from.Valid() || !to.Valid() {
		return fmt.Errorf("%w: %s → %s", ErrIllegalTransition, from, to)
	}
	if forward[from] == to || to == Failed || to == FailedPreserved || to == Cancelled {
		return nil
	}
	return fmt.Errorf("%w: %s → %s", ErrIllegalTransition, from, to)
}

// Reason says why a task failed, for programs (snake_case).
type Reason string

// The reasons a task fails.
const (
	ReasonClaudeError      Reason = "claude_error"     // claude's result said is_error
	ReasonNoResult         Reason = "no_result"        // claude exited 0 without a result event
	ReasonNonZeroExit      Reason = "non_zero_exit"    // the process exited non-zero
	ReasonTimeout          Reason = "timeout"          // lifecycle.timeout, wall clock
	ReasonIdleTimeout      Reason = "idle_timeout"     // lifecycle.idle_timeout without output or activity
	ReasonStagingFailed    Reason = "staging_failed"   // clone, checkout or upload failed
	ReasonProvisionFailed  Reason = "provision_failed" // the environment did not come up
	ReasonSecretUnresolved Reason = "secret_unresolved"
	ReasonArtifactsMissing Reason = "artifacts_missing" // a pattern matched nothing
	ReasonAgentLost        Reason = "agent_lost"        // the environment's agent went away for good
	ReasonCancelled        Reason = "cancelled"
	ReasonInternal         Reason = "internal_error"
	ReasonBudgetExhausted  Reason = "budget_exhausted" // lifecycle.max_cost_usd reached
)

// RunKind is what a task runs.
type RunKind string

// The kinds of runs.
const (
	RunClaude  RunKind = "claude"
	RunCommand RunKind = "command"
)

// RunEnd is how a task's process ended, as the server saw it.
type RunEnd struct {
	Kind     RunKind
	ExitCode int
	// ResultSeen says claude printed its final result event; ResultIsError
	// is that event's is_error.
	ResultSeen    bool
	ResultIsError bool
	TimedOut      bool
	IdleTimedOut  bool
	// Error is the agent's own word on why the process could not run
	// (CommandResult.Error: `command not found: "claude"`); Stderr the last
	// line the process wrote there; Result claude's final result text.
	Error  string
	Stderr string
	Result string
	// BudgetSpent says the run was ended as its model requests reached
	// lifecycle.max_cost_usd.
	BudgetSpent bool
}

// Outcome is the verdict on a finished run: success only when the process
// exited 0 and, for claude, its last result event says is_error false. A
// claude that reports an API error with subtype success and exit 0 fails.
func Outcome(e RunEnd) (ok bool, reason Reason) {
	switch {
	case e.BudgetSpent:
		return false, ReasonBudgetExhausted
	case e.TimedOut:
		return false, ReasonTimeout
	case e.IdleTimedOut:
		return false, ReasonIdleTimeout
	case e.Kind == RunClaude && e.ResultSeen && e.ResultIsError:
		return false, ReasonClaudeError
	case e.ExitCode != 0:
		return false, ReasonNonZeroExit
	case e.Kind == RunClaude && !e.ResultSeen:
		return false, ReasonNoResult
	}
	return true, ""
}

// FailureState is where a failed task ends: failed_preserved when the
// manifest keeps the environment on failure and there is one to keep.
func FailureState(preserve, haveEnvironment bool) State {
	if preserve && haveEnvironment {
		return FailedPreserved
	}
	return Failed
}

// Phase is a state entered at a time.
type Phase struct {
	State State
	At    time.Time
}

// PhaseDurations is how long each phase lasted; the last one runs until
// now (or the end, for a finished task).
func PhaseDurations(phases []Phase, now time.Time) map[State]time.Duration {
	out := map[State]time.Duration{}
	for i, p := range phases {
		end := now
		if i+1 < len(phases) {
			end = phases[i+1].At
		} else if p.State.Terminal() {
			continue
		}
		if d := end.Sub(p.At); d > 0 {
			out[p.State] += d
		}
	}
	return out
}
