package environment

import (
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func TestNext(t *testing.T) {
	running := Observation{Runtime: ports.EnvRunning}
	up := Observation{Runtime: ports.EnvRunning, AgentConnected: true}
	tests := []struct {
		from State
		obs  Observation
		want State
	}{
		{StateProvisioning, up, StateProvisioning},
		{StateDeleting, Observation{Gone: true}, StateDeleting},
		{StateBooting, up, StateReady},
		{StateBooting, running, StateBooting},
		{StateReady, running, StateBooting},
		{StateReady, up, StateReady},
		{StateReady, Observation{Gone: true}, StateFailed},
		{StateReady, Observation{Runtime: ports.EnvStopped}, StateStopped},
		{StateReady, Observation{Runtime: ports.EnvFailed}, StateFailed},
		{StateReady, Observation{Runtime: ports.EnvPaused}, StatePaused},
		{StateStopped, running, StateBooting},
		{StateStopped, up, StateReady},
		{StateFailed, running, StateFailed},
		{StateFailed, up, StateReady},
		{StatePaused, up, StateReady},
		{StateBooting, Observation{Runtime: ports.EnvCreating}, StateBooting},
		// A kubelet reports a started container a status round late: the
		// agent connected proves it runs.
		{StateBooting, Observation{Runtime: ports.EnvCreating, AgentConnected: true}, StateReady},
		{StateReady, Observation{Runtime: ports.EnvCreating, AgentConnected: true}, StateReady},
		// Sleep and wake: a transition under way is the operation's; a
		// failed wake stays failed though the runtime keeps its saved state.
		{StateReady, Observation{Runtime: ports.EnvHibernated}, StateHibernated},
		{StateHibernating, Observation{Runtime: ports.EnvStopped}, StateHibernating},
		{StateWaking, up, StateWaking},
		{StateFailed, Observation{Runtime: ports.EnvHibernated}, StateFailed},
		{StateHibernated, up, StateReady},
	}
	for _, tt := range tests {
		if got := Next(tt.from, tt.obs); got != tt.want {
			t.Errorf("Next(%s, %+v) = %s, want %s", tt.from, tt.obs, got, tt.want)
		}
	}
}

func TestFromRuntime(t *testing.T) {
	for st, want := range map[ports.EnvState]State{
		ports.EnvRunning: StateBooting, ports.EnvCreating: StateBooting, ports.EnvPaused: StatePaused,
		ports.EnvFailed: StateFailed, ports.EnvStopped: StateStopped,
	} {
		if got := FromRuntime(st); got != want {
			t.Errorf("FromRuntime(%s) = %s, want %s", st, got, want)
		}
	}
}
