package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// AGENT_RECONNECT_MIN sets the first wait before the agent reconnects
// (5 s without it); a value that would hammer the server, or is past the
// backoff's ceiling, or is no duration, is refused.
func TestReconnectMinIsReadAndBounded(t *testing.T) {
	base := []string{"AGENT_ID=a1", "AGENT_SECRET=s", "MANAGEMENT_SERVER=http://127.0.0.1:1"}
	args := []string{"--config", "/nonexistent"}
	cfg, err := loadConfig(args, base, io.Discard)
	if err != nil || cfg.BackoffMin != 0 {
		t.Fatalf("unset: %v, BackoffMin %v (0: the agent's default)", err, cfg.BackoffMin)
	}
	cfg, err = loadConfig(args, append(base, "AGENT_RECONNECT_MIN=500ms"), io.Discard)
	if err != nil || cfg.BackoffMin != 500*time.Millisecond {
		t.Fatalf("500ms: %v, BackoffMin %v", err, cfg.BackoffMin)
	}
	for _, bad := range []string{"10ms", "0", "-1s", "2m", "soon"} {
		_, err := loadConfig(args, append(base, "AGENT_RECONNECT_MIN="+bad), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "AGENT_RECONNECT_MIN") {
			t.Errorf("AGENT_RECONNECT_MIN=%s: %v, want refused", bad, err)
		}
	}
}
