package rest

import (
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A write the link cannot queue is refused, never answered 204: 429
// stdin_busy (queue full) and 503 agent_not_connected (link down), both
// with Retry-After; 409 stdin_closed once the process closed its stdin.
// The HITL answer, written to a session's stdin, is refused alike.
func TestStdinRefusalsAreAnswered(t *testing.T) {
	e := newEnv(t)
	c := startSleeping(t, e, `{"command":"cat"}`)
	path := "/api/v1/commands/" + c.ID() + "/stdin"
	for _, tc := range []struct {
		err        error
		status     int
		code       string
		retryAfter string
	}{
		{ports.ErrStdinBusy, 429, "stdin_busy", "1"},
		{ports.ErrAgentNotConnected, 503, "agent_not_connected", "1"},
		{ports.ErrStdinClosed, 409, "stdin_closed", ""},
	} {
		c.SetStdinError(tc.err)
		r := e.call("POST", path, `{"data":"x"}`)
		expect(t, r, tc.status, tc.code)
		if got := r.header.Get("Retry-After"); got != tc.retryAfter {
			t.Fatalf("%s: Retry-After %q, want %q", tc.code, got, tc.retryAfter)
		}
	}
	if in, _ := c.Stdin(); in != "" {
		t.Fatalf("refused writes reached stdin: %q", in)
	}
	c.SetStdinError(nil)
	expect(t, e.call("POST", path, `{"data":"x"}`), 204, "")
}

// A HITL answer the session's input queue cannot take is refused (429
// stdin_busy, Retry-After), not reported answered.
func TestRespondHITLStdinBusy(t *testing.T) {
	e := newEnv(t)
	e.missions.SetRespondError(ports.ErrStdinBusy)
	r := e.call("POST", "/api/v1/hitl/h-1/respond", `{"text":"y"}`)
	expect(t, r, 429, "stdin_busy")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
}
