package task

import (
	"errors"
	"testing"
	"time"
)

// Every pair of states: legal exactly when one step forward, or from a
// working state to an end other than completed.
func TestEveryTransition(t *testing.T) {
	legal := map[[2]State]bool{}
	for from, to := range forward {
		legal[[2]State{from, to}] = true
	}
	for _, from := range States {
		if from.Terminal() {
			continue
		}
		for _, end := range []State{Failed, FailedPreserved, Cancelled} {
			legal[[2]State{from, end}] = true
		}
	}
	n := 0
	for _, from := range States {
		for _, to := range States {
			err := CheckTransition(from, to)
			if legal[[2]State{from, to}] {
				n++
				if err != nil {
					t.Errorf("%s → %s refused: %v", from, to, err)
				}
			} else if !errors.Is(err, ErrIllegalTransition) {
				t.Errorf("%s → %s allowed", from, to)
			}
		}
	}
	// 6 steps forward, and 6 working states × 3 ends.
	if n != 6+6*3 {
		t.Errorf("%d legal transitions, want 24", n)
	}
	for _, bad := range [][2]State{{"bogus", Staging}, {Pending, "bogus"}, {Completed, Failed}, {Cancelled, Cancelled}, {Pending, Ready}, {Running, Ready}} {
		if err := CheckTransition(bad[0], bad[1]); !errors.Is(err, ErrIllegalTransition) {
			t.Errorf("%s → %s: %v", bad[0], bad[1], err)
		}
	}
}

func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		name   string
		end    RunEnd
		ok     bool
		reason Reason
	}{
		{"claude success", RunEnd{Kind: RunClaude, ResultSeen: true}, true, ""},
		{"claude api error with exit 0", RunEnd{Kind: RunClaude, ResultSeen: true, ResultIsError: true}, false, ReasonClaudeError},
		{"claude error and exit 1", RunEnd{Kind: RunClaude, ExitCode: 1, ResultSeen: true, ResultIsError: true}, false, ReasonClaudeError},
		{"claude exit 1 after a good result", RunEnd{Kind: RunClaude, ExitCode: 1, ResultSeen: true}, false, ReasonNonZeroExit},
		{"claude exit 0 without a result", RunEnd{Kind: RunClaude}, false, ReasonNoResult},
		{"claude killed by a signal", RunEnd{Kind: RunClaude, ExitCode: 137}, false, ReasonNonZeroExit},
		{"command exit 0", RunEnd{Kind: RunCommand}, true, ""},
		{"command exit 2", RunEnd{Kind: RunCommand, ExitCode: 2}, false, ReasonNonZeroExit},
		{"timeout wins", RunEnd{Kind: RunCommand, ExitCode: 143, TimedOut: true}, false, ReasonTimeout},
		{"idle timeout", RunEnd{Kind: RunClaude, ExitCode: 143, IdleTimedOut: true, ResultSeen: true}, false, ReasonIdleTimeout},
	} {
		ok, reason := Outcome(c.end)
		if ok != c.ok || reason != c.reason {
			t.Errorf("%s: %v %q, want %v %q", c.name, ok, reason, c.ok, c.reason)
		}
	}
}

func TestFailureState(t *testing.T) {
	if FailureState(true, true) != FailedPreserved || FailureState(true, false) != Failed || FailureState(false, true) != Failed {
		t.Error("failure_action preserve keeps only an environment that exists")
	}
}

func TestPhaseDurations(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	ph := []Phase{{Pending, t0}, {Staging, t0.Add(time.Second)}, {Provisioning, t0.Add(3 * time.Second)}, {Failed, t0.Add(6 * time.Second)}}
	d := PhaseDurations(ph, t0.Add(time.Hour))
	if d[Pending] != time.Second || d[Staging] != 2*time.Second || d[Provisioning] != 3*time.Second || len(d) != 3 {
		t.Errorf("durations %v", d)
	}
	running := PhaseDurations(ph[:2], t0.Add(10*time.Second))
	if running[Staging] != 9*time.Second {
		t.Errorf("the current phase runs until now: %v", running)
	}
}
