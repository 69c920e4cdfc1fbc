package agent

import (
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func TestFateOnReport(t *testing.T) {
	tests := []struct {
		name             string
		known, abandoned bool
		st               ReportState
		adoptable        bool
		want             Fate
	}{
		{"known, still running: goes on", true, false, InReportRunning, false, FateRunning},
		{"known, ended while disconnected: its reported result", true, false, InReportExited, false, FateEnded},
		{"known, not in the report: lost (the agent process died or restarted)", true, false, NotInReport, false, FateLost},
		{"known, its caller went away meanwhile: killed", true, true, InReportRunning, false, FateKill},
		{"known, abandoned and ended: its result all the same", true, true, InReportExited, false, FateEnded},
		{"known, abandoned and not in the report: lost", true, true, NotInReport, false, FateLost},
		{"unknown, running, its owner takes it: adopted", false, false, InReportRunning, true, FateAdopt},
		{"unknown, running, nobody takes it yet: held", false, false, InReportRunning, false, FateHold},
		{"unknown and ended: nothing", false, false, InReportExited, true, FateNone},
		{"unknown and not running: nothing", false, false, NotInReport, false, FateNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FateOnReport(tc.known, tc.abandoned, tc.st, tc.adoptable); got != tc.want {
				t.Fatalf("FateOnReport = %s, want %s", got, tc.want)
			}
		})
	}
}

// A disconnect alone loses no command; the end of the grace does.
func TestFateOnDisconnectAndForgotten(t *testing.T) {
	if got := FateOnDisconnect(); got != FateRunning {
		t.Fatalf("on disconnect: %s, want %s", got, FateRunning)
	}
	if got := FateOnForgotten(); got != FateLost {
		t.Fatalf("on forgotten: %s, want %s", got, FateLost)
	}
}

func TestHoldExpired(t *testing.T) {
	const grace = 2 * time.Minute
	for _, tc := range []struct {
		after time.Duration
		want  bool
	}{{0, false}, {grace - time.Millisecond, false}, {grace, true}, {time.Hour, true}} {
		if got := HoldExpired(t0, t0.Add(tc.after), grace); got != tc.want {
			t.Fatalf("HoldExpired after %v = %v, want %v", tc.after, got, tc.want)
		}
	}
}

func TestLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    ports.CommandResult
		want bool
	}{
		{"agent came back without it", LostResult(true), true},
		{"agent never came back", LostResult(false), true},
		{"a real failure", ports.CommandResult{ExitCode: 1}, false},
		{"killed by a signal", ports.CommandResult{ExitCode: 137, Signal: 9}, false},
		{"could not start", ports.CommandResult{ExitCode: 127, Error: "exec: no such file"}, false},
		{"not delivered", ports.CommandResult{ExitCode: -1, Error: "not delivered to the agent: agent not connected"}, false},
	} {
		if got := Lost(tc.r); got != tc.want {
			t.Fatalf("%s: Lost(%+v) = %v, want %v", tc.name, tc.r, got, tc.want)
		}
	}
	if r := LostResult(true); r.Error != ports.ErrCommandLost.Error() || r.Success() {
		t.Fatalf("LostResult(true) = %+v", r)
	}
	if r := LostResult(false); r.Error != ports.ErrAgentGone.Error() || r.Success() {
		t.Fatalf("LostResult(false) = %+v", r)
	}
}
