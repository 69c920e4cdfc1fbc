package promexport

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

type agents []ports.AgentInfo

func (a agents) Agents() []ports.AgentInfo { return a }
func (a agents) Agent(id string) (ports.AgentInfo, bool) {
	for _, x := range a {
		if x.ID == id {
			return x, true
		}
	}
	return ports.AgentInfo{}, false
}

// Idle agents cost no series: only busy ones have one, beside the total.
func TestAgentSeriesGrowWithWorkNotWithTheFleet(t *testing.T) {
	fleet := agents{{ID: "busy-1", Status: ports.AgentBusy, RunningCommands: 2}, {ID: "busy-2", Status: ports.AgentBusy, RunningCommands: 1}}
	for i := range 1000 {
		fleet = append(fleet, ports.AgentInfo{ID: "idle-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), Status: ports.AgentReady})
	}
	rec := httptest.NewRecorder()
	Handler(fleet, nil, nil, nil, nil, nil).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`agentic_agent_running_commands{agent_id="busy-1"} 2`,
		`agentic_agent_running_commands{agent_id="busy-2"} 1`,
		"agentic_running_commands 3",
		`agentic_agents{status="ready"} 1000`,
		`agentic_agents{status="busy"} 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q", want)
		}
	}
	if n := strings.Count(text, "agentic_agent_running_commands{"); n != 2 {
		t.Errorf("%d per-agent series, want 2 (the busy agents)", n)
	}
}

// The sleep metrics: the hibernated environments and their saved bytes as
// the use case says at the scrape, and the hibernate and wake durations by
// runtime.
func TestSleepMetrics(t *testing.T) {
	m := NewSleepMetrics()
	count, bytes := 0, int64(0)
	m.Hibernated = func() (int, int64) { return count, bytes }
	scrape := func() string {
		t.Helper()
		rec := httptest.NewRecorder()
		Handler(agents{}, nil, nil, nil, nil, m).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		return string(body)
	}
	text := scrape()
	for _, want := range []string{"agentic_environments_hibernated 0", "agentic_hibernated_saved_bytes 0"} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in\n%s", want, text)
		}
	}
	count, bytes = 2, 3<<30
	m.ObserveHibernate("libvirt", 1500*time.Millisecond)
	m.ObserveWake("libvirt", 300*time.Millisecond)
	m.ObserveWake("docker", 2*time.Second)
	text = scrape()
	for _, want := range []string{
		"agentic_environments_hibernated 2",
		"agentic_hibernated_saved_bytes 3.221225472e+09",
		`agentic_environment_hibernate_seconds_count{runtime="libvirt"} 1`,
		`agentic_environment_hibernate_seconds_sum{runtime="libvirt"} 1.5`,
		`agentic_environment_wake_seconds_count{runtime="libvirt"} 1`,
		`agentic_environment_wake_seconds_bucket{runtime="libvirt",le="0.5"} 1`,
		`agentic_environment_wake_seconds_bucket{runtime="docker",le="1"} 0`,
		`agentic_environment_wake_seconds_count{runtime="docker"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q", want)
		}
	}
}
