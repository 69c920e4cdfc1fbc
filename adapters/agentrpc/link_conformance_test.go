package agentrpc

import (
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// The link keeps the promises portstest checks, the same suite the fake
// link in ports/portsfake runs, so that the two cannot drift apart.
func TestLinkConformance(t *testing.T) {
	portstest.RunAgentLinkSuite(t, func(t *testing.T) portstest.LinkHarness {
		h := newHarness(t)
		h.connectAgent("agent-a")
		h.connectAgent("agent-b")
		return portstest.LinkHarness{Link: h.svc, Agent: "agent-a", Other: "agent-b"}
	})
}
