package filestore

import (
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// The files keep the promises portstest checks, the same suites the
// in-memory stores of ports/portsfake run.

func TestAgentHashesConformance(t *testing.T) {
	portstest.RunAgentCredentialsSuite(t, inDir[ports.AgentCredentials](NewAgentHashes))
}

func TestPoolStoreConformance(t *testing.T) {
	portstest.RunPoolStoreSuite(t, inDir[ports.PoolStore](NewPoolStore))
}

func TestTaskStoreConformance(t *testing.T) {
	portstest.RunTaskStoreSuite(t, inDir[ports.TaskStore](NewTaskStore))
}

func TestTaskEventLogConformance(t *testing.T) {
	portstest.RunTaskEventLogSuite(t, inDir[ports.TaskEventLog](NewTaskEventLog))
}

// inDir opens, with open, the store P a suite asks for in the suite's
// directory; the store's concrete type S must implement P.
func inDir[P, S any](open func(dir string) (S, error)) func(*testing.T, string) P {
	return func(t *testing.T, dir string) P {
		t.Helper()
		s, err := open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return any(s).(P)
	}
}

func TestPublicPortsConformance(t *testing.T) {
	portstest.RunPublicPortsSuite(t, inDir[ports.PublicPorts](NewPublicPorts))
}

func TestSignInSessionsConformance(t *testing.T) {
	portstest.RunSignInSessionsSuite(t, inDir[ports.SignInSessions](NewSignInSessions))
}
