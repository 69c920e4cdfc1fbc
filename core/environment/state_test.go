package environment

import "testing"

// The states' words are the API's (EnvironmentState in openapi.yaml): a
// renamed constant must not change what clients read.
func TestStateWords(t *testing.T) {
	want := []string{"provisioning", "booting", "ready", "paused", "hibernating", "hibernated", "waking", "stopped", "failed", "deleting"}
	if len(States) != len(want) {
		t.Fatalf("States = %v, want the words %v", States, want)
	}
	for i, s := range States {
		if string(s) != want[i] {
			t.Errorf("States[%d] = %q, want %q", i, s, want[i])
		}
	}
}
