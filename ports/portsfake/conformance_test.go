package portsfake_test

import (
	"sync"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// The fakes keep the promises the real adapters keep: the same suites run
// against both.

// reopener opens a fake by the suite's dir: a new one the first time, the
// last one reopened after, as a file store finds its files again.
func reopener[F interface{ Reopen() F }](fresh func() F) func(dir string) F {
	var mu sync.Mutex
	kept := map[string]F{}
	return func(dir string) F {
		mu.Lock()
		defer mu.Unlock()
		f, ok := kept[dir]
		if ok {
			f = f.Reopen()
		} else {
			f = fresh()
		}
		kept[dir] = f
		return f
	}
}

func TestOutboxConformance(t *testing.T) {
	open := reopener(func() *portsfake.Outbox { return portsfake.NewOutbox() })
	portstest.RunEventOutboxSuite(t, func(_ *testing.T, dir string) ports.EventOutbox { return open(dir) })
}

func TestTaskStoreConformance(t *testing.T) {
	open := reopener(func() *portsfake.TaskStore { return portsfake.NewTaskStore() })
	portstest.RunTaskStoreSuite(t, func(_ *testing.T, dir string) ports.TaskStore { return open(dir) })
}

func TestPoolStoreConformance(t *testing.T) {
	open := reopener(portsfake.NewPoolStore)
	portstest.RunPoolStoreSuite(t, func(_ *testing.T, dir string) ports.PoolStore { return open(dir) })
}

func TestLinkConformance(t *testing.T) {
	portstest.RunAgentLinkSuite(t, func(t *testing.T) portstest.LinkHarness {
		dir := portsfake.NewDirectory(
			ports.AgentInfo{ID: "agent-a", Status: ports.AgentReady},
			ports.AgentInfo{ID: "agent-b", Status: ports.AgentBusy})
		return portstest.LinkHarness{Link: portsfake.NewLink(portsfake.WithDirectory(dir)), Agent: "agent-a", Other: "agent-b"}
	})
}

func TestSessionLogConformance(t *testing.T) {
	opens := map[int64]func(string) *portsfake.SessionLog{}
	portstest.RunSessionLogSuite(t, func(_ *testing.T, dir string, maxBytes int64) ports.SessionLog {
		if opens[maxBytes] == nil { // the suite opens one subtest at a time
			opens[maxBytes] = reopener(func() *portsfake.SessionLog { return portsfake.NewSessionLog(int(maxBytes)) })
		}
		return opens[maxBytes](dir)
	})
}

func TestMissionStoreConformance(t *testing.T) {
	open := reopener(func() *portsfake.MissionStore { return portsfake.NewMissionStore() })
	portstest.RunMissionStoreSuite(t, func(_ *testing.T, dir string) ports.MissionStore { return open(dir) })
}

func TestCredentialsConformance(t *testing.T) {
	open := reopener(portsfake.NewCredentials)
	portstest.RunAgentCredentialsSuite(t, func(_ *testing.T, dir string) ports.AgentCredentials { return open(dir) })
}

func TestPublicPortsConformance(t *testing.T) {
	open := reopener(portsfake.NewPublicPorts)
	portstest.RunPublicPortsSuite(t, func(_ *testing.T, dir string) ports.PublicPorts { return open(dir) })
}

func TestSignInSessionsConformance(t *testing.T) {
	open := reopener(portsfake.NewSignInSessions)
	portstest.RunSignInSessionsSuite(t, func(_ *testing.T, dir string) ports.SignInSessions { return open(dir) })
}
