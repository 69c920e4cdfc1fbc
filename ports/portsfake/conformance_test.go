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

func TestOutboxConformance(t *testing.T) {
	var mu sync.Mutex
	kept := map[string]*portsfake.Outbox{} // by dir: the suite reopens a dir to restart
	portstest.RunEventOutboxSuite(t, func(t *testing.T, dir string) ports.EventOutbox {
		mu.Lock()
		defer mu.Unlock()
		o, ok := kept[dir]
		if ok {
			o = o.Reopen()
		} else {
			o = portsfake.NewOutbox()
		}
		kept[dir] = o
		return o
	})
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
	var mu sync.Mutex
	kept := map[string]*portsfake.SessionLog{}
	portstest.RunSessionLogSuite(t, func(t *testing.T, dir string, maxBytes int64) ports.SessionLog {
		mu.Lock()
		defer mu.Unlock()
		l, ok := kept[dir]
		if ok {
			l = l.Reopen()
		} else {
			l = portsfake.NewSessionLog(int(maxBytes))
		}
		kept[dir] = l
		return l
	})
}
