package e2e

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
)

// TestContractCrashSafety kills agentic-mgmt with SIGKILL at random moments
// while missions are dispatched and finish, and restarts it on the same data
// dir each time. After every kill missions.json parses; after every restart
// every mission that got a 202 is known, in a state no older than the last
// event aiwg serve heard for it. In the end every mission ends, as its
// events say, and a mission whose process had started ends with its
// objective's real outcome.
func TestContractCrashSafety(t *testing.T) {
	t.Parallel()
	const rounds = 5
	e := newContract(t, copts{agents: 1, lenientOrder: true})
	objectives := []string{"true", "exit 1", "echo out; true", "echo bad; exit 1", "sleep 0.4; true", "sleep 0.4; exit 1"}

	var mu sync.Mutex
	accepted := map[string]string{} // mission id → objective
	var order []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(10+rand.IntN(40)) * time.Millisecond):
				}
				id := fmt.Sprintf("m-crash-%d-%03d", w, i)
				obj := objectives[rand.IntN(len(objectives))]
				r, err := e.tryDispatch("sess-crash", e.body(id, obj), auth{})
				switch {
				case err != nil:
					// The server is down or was killed mid-request.
				case r.status == 202:
					mu.Lock()
					accepted[id] = obj
					order = append(order, id)
					mu.Unlock()
				case r.status == 503, r.status == 401:
					// Not registered yet, no agent yet, or a token renewed
					// between reading it and using it.
				default:
					t.Errorf("dispatch %s: %s", id, r)
				}
			}
		})
	}
	stopped := false
	stopDispatchers := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopDispatchers()
	nAccepted := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(order)
	}

	// checkKnown: every accepted mission is on record, no older than its last event.
	checkKnown := func(when string) {
		t.Helper()
		mu.Lock()
		ids := append([]string(nil), order...)
		mu.Unlock()
		// Events first: the state can only move on after them.
		last := map[string]fakeaiwg.Frame{}
		for _, f := range dedupe(e.fake.Frames()) {
			// reconnected and suspended say nothing of whether a mission
			// started (an unstarted one gets them too): they prove no state.
			if f.MissionID != "" && f.Event != evReconnected && f.Event != evSuspended {
				last[f.MissionID] = f
			}
		}
		for _, id := range ids {
			m, r := e.mission(id)
			if r.status != 200 {
				t.Errorf("%s: mission %s got a 202 but is not known: %s", when, id, r)
				continue
			}
			if f, ok := last[id]; ok && stateRank(string(m.State)) < eventRank(f.Event) {
				t.Errorf("%s: mission %s is stored %s, older than its last event %s", when, id, m.State, f.Event)
			}
		}
	}

	roundsUntil := time.Now().Add(55 * time.Second)
	for round := 1; round <= rounds; round++ {
		// Some missions accepted in this run, then a random moment.
		before := nAccepted()
		eventually(t, patience, fmt.Sprintf("round %d: missions accepted", round), func() bool { return nAccepted() >= before+2 })
		time.Sleep(time.Duration(rand.IntN(600)) * time.Millisecond)
		e.kill()

		if _, err := storedMissions(t, e.dataDir); err != nil {
			t.Fatalf("round %d: missions.json after SIGKILL: %v", round, err)
		}
		e.startWith(false)
		checkKnown(fmt.Sprintf("round %d, after restart", round))
		e.waitAgents(patience)
		if time.Now().After(roundsUntil) {
			t.Logf("stopping after %d rounds to stay within the time budget", round)
			break
		}
	}
	stopDispatchers()
	t.Logf("%d missions accepted across %d runs", nAccepted(), len(e.runs))

	// Every accepted mission ends, and REST agrees with its terminal event.
	mu.Lock()
	ids := append([]string(nil), order...)
	mu.Unlock()
	// First every mission ends on record, then aiwg serve must have heard
	// each end: a terminal state whose event never comes is an end that
	// aiwg serve will never learn (the mission is no longer owned either).
	eventually(t, patience, "every accepted mission ended on record", func() bool {
		for _, id := range ids {
			if stateRank(e.missionState(id)) < 2 {
				return false
			}
		}
		return true
	})
	heard := func(id string) (fakeaiwg.Frame, bool) {
		for _, f := range e.events(id) {
			if isTerminal(f.Event) {
				return f, true
			}
		}
		return fakeaiwg.Frame{}, false
	}
	deadline := time.Now().Add(patience)
	for {
		missing := 0
		for _, id := range ids {
			if _, ok := heard(id); !ok {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var unheard []string
	for _, id := range ids {
		end, ok := heard(id)
		st := e.missionState(id)
		if !ok {
			unheard = append(unheard, id)
			t.Errorf("%s is stored %s, but aiwg serve never heard its end: events %v (the terminal event was lost between the store and the outbox)", id, st, evNames(e.events(id)))
			continue
		}
		if st != stateOfEnd(end.Event) {
			t.Errorf("%s is stored %s, its terminal event is %s", id, st, end.Event)
		}
	}
	checkKnown("at the end")

	// A mission whose process started ends with its objective's real
	// outcome: the agent keeps the result and hands it over after the
	// restart. Only one that never started may fail otherwise.
	lost := 0
	for _, id := range ids {
		if slices.Contains(unheard, id) {
			continue
		}
		fs := e.events(id)
		end := fs[len(fs)-1]
		m, _ := e.mission(id)
		started := indexOf(fs, evStarted) >= 0 || m.StartedAt != nil
		// A state stored just before a kill may never have had its event
		// emitted (store, then outbox): not failed on, but shown.
		if fs[0].Event != evAssigned || m.StartedAt != nil && indexOf(fs, evStarted) < 0 {
			t.Logf("%s: stored with started_at %v, but aiwg serve heard %v: an event was lost between the store and the outbox", id, m.StartedAt != nil, evNames(fs))
		}
		obj := accepted[id]
		wantFail := strings.HasSuffix(obj, "exit 1")
		genuine := end.Event == evCompleted && !wantFail ||
			end.Event == evFailed && wantFail && end.Data["reason"] == "non_zero_exit" && end.Data["exit_code"] == float64(1)
		switch {
		case genuine:
		case end.Event == evCompleted && wantFail:
			t.Errorf("%s (%q) completed", id, obj)
		case started:
			lost++
			t.Errorf("%s (%q) started (events %v) but ended %s %v, not with its real outcome", id, obj, evNames(fs), end.Event, end.Data)
		case end.Event != evFailed:
			t.Errorf("%s (%q) never started but ended %s %v", id, obj, end.Event, end.Data)
		}
	}
	if lost > 0 {
		t.Logf("%d of %d missions lost their real outcome across the restarts", lost, len(ids))
	}
}

// holdProxy forwards TCP to target. hold makes it swallow what either side
// sends on the open connections while keeping them open, as a network that
// silently stops delivering does; cut then closes them. New connections are
// forwarded normally.
type holdProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	held   bool
	// swallowed counts bytes from the agent dropped while held.
	swallowed atomic.Int64
}

// remoteAgent runs the agent binary as agent id of the "vm" runtime (no
// supervisor) through a holdProxy to agentURL, its secret put in dataDir.
func remoteAgent(t *testing.T, dataDir, agentURL, id string) (*holdProxy, *proc) {
	t.Helper()
	agentSecret(t, dataDir, id, "remote-secret")
	proxy := newHoldProxy(t, strings.TrimPrefix(agentURL, "http://"))
	agent := startAgent(t, id, "remote-secret", "http://"+proxy.ln.Addr().String(), "AGENT_RUNTIME=vm")
	return proxy, agent
}

func newHoldProxy(t *testing.T, target string) *holdProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *holdProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(up, c, &p.swallowed)
		go p.pipe(c, up, new(atomic.Int64))
	}
}

func (p *holdProxy) pipe(dst, src net.Conn, swallowed *atomic.Int64) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			held := p.held
			p.mu.Unlock()
			if held {
				swallowed.Add(int64(n))
			} else if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *holdProxy) hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// cut closes every open connection and forwards again.
func (p *holdProxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.held = false
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// TestContractAgentLinkLossKeepsMissionOutcome: the agent's link goes
// silent (packets vanish, the connection looks open) while a mission's
// objective ends; the agent writes the result into the dead connection.
// After the agent reconnects, the mission must still end with its real
// outcome (failed, exit_code 5), not as a lost session: results are
// "delivered after it reconnects", and a result written into a connection
// that died was not delivered.
func TestContractAgentLinkLossKeepsMissionOutcome(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 0})
	proxy, _ := remoteAgent(t, e.dataDir, e.s().AgentURL, "remote-01")
	waitAgents(t, e.s(), "remote-01")

	done := filepath.Join(e.tmp, "objective-done")
	gatePath, wait := e.gate("link-go")
	e.dispatch("m-link", fmt.Sprintf("%s; touch %s; exit 5", wait, done), "executor_filter", map[string]any{"agent_id": "remote-01"})
	e.waitEvent("m-link", evStarted, patience)

	proxy.hold()
	before := proxy.swallowed.Load()
	touch(t, gatePath)
	eventually(t, patience, "objective ended", func() bool { _, err := os.Stat(done); return err == nil })
	// The agent wrote the end of the output and the result into the held connection.
	eventually(t, patience, "agent wrote the result", func() bool { return proxy.swallowed.Load() > before })
	// Let the rest of the agent's writes (output end, result) land in the
	// void too; a write after the cut would fail and be kept, which only
	// makes this test pass when it should not.
	time.Sleep(300 * time.Millisecond)
	proxy.cut()

	end := e.waitEnd("m-link", patience)
	if end.Event != evFailed || end.Data["reason"] != "non_zero_exit" || end.Data["exit_code"] != float64(5) {
		t.Errorf("m-link ended %s %v, want failed with its real exit_code 5 (reason non_zero_exit)", end.Event, end.Data)
	}
}
