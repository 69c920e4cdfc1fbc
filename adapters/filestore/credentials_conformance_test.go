package filestore

import (
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// The hash file keeps the promises portstest checks, the same suite the
// in-memory credentials of ports/portsfake run.
func TestAgentHashesConformance(t *testing.T) {
	portstest.RunAgentCredentialsSuite(t, func(t *testing.T, dir string) ports.AgentCredentials {
		h, err := NewAgentHashes(dir)
		if err != nil {
			t.Fatal(err)
		}
		return h
	})
}
