package promexport

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

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
	Handler(fleet, nil, nil, nil, nil).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
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
