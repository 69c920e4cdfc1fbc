package task

import (
	"fmt"
	"strings"
)

// FailureMessage is a failed run's error as a person reads it: what
// happened in the run's own words (the agent's reason it could not start
// the program, the last line the program wrote on stderr, claude's result)
// and, where the fix is known, what to do. The reason (non_zero_exit, …) is
// the task's reason field and is not repeated here.
func FailureMessage(e RunEnd, reason Reason, m Manifest) string {
	var msg string
	switch reason {
	case ReasonTimeout:
		msg = fmt.Sprintf("the run took longer than lifecycle.timeout (%v) and was ended", m.Lifecycle.Timeout)
	case ReasonIdleTimeout:
		msg = fmt.Sprintf("the run wrote nothing for lifecycle.idle_timeout (%v) and was ended", m.Lifecycle.IdleTimeout)
	case ReasonClaudeError:
		msg = "claude reported an error"
		if e.Result != "" {
			msg += ": " + oneLine(e.Result)
		}
	case ReasonBudgetExhausted:
		msg = fmt.Sprintf("the run's model requests reached lifecycle.max_cost_usd ($%g) and it was ended", m.Lifecycle.MaxCostUSD)
	case ReasonNoResult:
		msg = "claude exited 0 without its final result event: is `claude` Claude Code, which prints stream-json with --output-format stream-json --verbose?"
	default:
		msg = fmt.Sprintf("exit code %d", e.ExitCode)
	}
	said := e.Error
	if said == "" {
		said = e.Stderr
	}
	if said != "" && reason != ReasonClaudeError {
		msg += ": " + oneLine(said)
	}
	if hint := notFoundHint(e, m); hint != "" {
		msg += " — " + hint
	}
	return msg
}

// notFoundHint is what to do when the program is not in the environment:
// the agent says so (command not found, exit 127), or a shell did.
func notFoundHint(e RunEnd, m Manifest) string {
	if e.ExitCode != 127 {
		return ""
	}
	said := strings.ToLower(e.Error + "\n" + e.Stderr)
	if !strings.Contains(said, "not found") && !strings.Contains(said, "no such file") {
		return ""
	}
	if m.Command == nil {
		return "the environment has no `claude` on its PATH: use an image that has Claude Code (environment.image), " +
			"install it where the host agent finds it (host runtime), or run a program of your own with command.argv instead of claude"
	}
	prog := ""
	if len(m.Command.Argv) > 0 {
		prog = fmt.Sprintf(" %q", m.Command.Argv[0])
	}
	return "the environment has no" + prog + ": use an image that has it (environment.image), or change command.argv"
}

// oneLine is s on one line, bounded: a message, not a log.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 500 {
		s = strings.ToValidUTF8(s[:500], "") + "…"
	}
	return s
}
