package agentd

import (
	"testing"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// setStartedHold sets startedHold for one test (not parallel: the others'
// startCommand helper waits for a CommandStarted).
func setStartedHold(t *testing.T, d time.Duration) {
	t.Helper()
	old := startedHold.Swap(int64(d))
	t.Cleanup(func() { startedHold.Store(old) })
}

// nextMessage is s.next bounded in all (heartbeats alone would keep s.next
// waiting forever for a message that never comes).
func nextMessage(t *testing.T, s *cpSession) *sandboxv1.ConnectRequest {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case m := <-s.in:
			if m.GetHeartbeat() == nil && !s.isConnectReport(m) {
				return m
			}
		case <-deadline:
			t.Fatal("no message but heartbeats from the agent")
		}
	}
}

// untilResult reads the agent's messages up to id's result and says
// whether a CommandStarted of id came before it.
func untilResult(t *testing.T, s *cpSession, id string) (res *sandboxv1.CommandResult, startedFirst bool) {
	t.Helper()
	for {
		m := nextMessage(t, s)
		if st := m.GetCommandStarted(); st.GetCommandId() == id {
			startedFirst = true
		}
		if r := m.GetCommandResult(); r.GetCommandId() == id {
			return r, startedFirst
		}
	}
}

// A plain command that ends within startedHold sends its result and no
// CommandStarted: the server has no use for it, and sent at once it
// crossed the link while the child exec'd.
func TestPlainCommandEndingAtOnceSendsNoStart(t *testing.T) {
	setStartedHold(t, time.Hour)
	_, r, _, s := connectedAgent(t)
	s.send(commandMsg(&sandboxv1.CommandRequest{CommandId: "c1", Command: "true"}))
	r.next(t).exit(ports.CommandResult{ExitCode: 3})
	res, started := untilResult(t, s, "c1")
	if started {
		t.Error("a CommandStarted was sent for a plain command that ended before startedHold")
	}
	if res.GetExitCode() != 3 {
		t.Errorf("result %v", res)
	}
}

// A session's (or mission's) start is sent at once whatever startedHold
// is: the server marks the session running on it.
func TestSessionCommandStartSentAtOnce(t *testing.T) {
	setStartedHold(t, time.Hour)
	_, r, _, s := connectedAgent(t)
	s.send(commandMsg(&sandboxv1.CommandRequest{CommandId: "c1", Command: "sh", SessionId: "s1", SessionName: "one"}))
	p := r.next(t)
	defer p.exit(ports.CommandResult{}) // also when the test fails: the agent waits for it at its end
	st := nextMessage(t, s).GetCommandStarted()
	if st.GetCommandId() != "c1" || st.GetPid() != int32(p.pid) || st.GetStartedAt() == nil {
		t.Fatalf("first message after a session command's start: CommandStarted = %v, want c1 with pid %d", st, p.pid)
	}
	p.exit(ports.CommandResult{})
	untilResult(t, s, "c1")
}

// A plain command still running after startedHold reports its start, and
// before its result.
func TestPlainCommandStillRunningReportsStart(t *testing.T) {
	setStartedHold(t, time.Millisecond)
	_, r, _, s := connectedAgent(t)
	s.send(commandMsg(&sandboxv1.CommandRequest{CommandId: "c1", Command: "sleep"}))
	p := r.next(t)
	defer p.exit(ports.CommandResult{}) // also when the test fails: the agent waits for it at its end
	st := nextMessage(t, s).GetCommandStarted()
	if st.GetCommandId() != "c1" || st.GetPid() != int32(p.pid) || st.GetStartedAt() == nil {
		t.Fatalf("CommandStarted = %v, want c1 with pid %d", st, p.pid)
	}
	p.exit(ports.CommandResult{})
	if _, started := untilResult(t, s, "c1"); started {
		t.Error("a second CommandStarted")
	}
}
