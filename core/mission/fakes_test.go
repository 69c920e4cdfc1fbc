package mission

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// ---------------------------------------------------------------------------
// A log shared by the fakes, so a test can check the order of operations
// across the store, the outbox and the agent link.

type logEntry struct {
	Kind      string // "put", "append", "start", "kill", "stdin"
	MissionID string
	State     ports.MissionState // put
	LastEvent ports.EventType    // put
	Event     ports.EventType    // append
	CommandID string             // start, kill, stdin
}

type opLog struct {
	mu      sync.Mutex
	entries []logEntry
}

func (l *opLog) add(e logEntry) {
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
}

func (l *opLog) snapshot() []logEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]logEntry(nil), l.entries...)
}

// ---------------------------------------------------------------------------
// The portsfake mission store, outbox, link and clock, logging into the
// shared log.

var errDisk = errors.New("disk full")

// putsOf is every record of mission id that a successful Put stored, in order.
func (h *harness) putsOf(id string) []ports.Mission {
	var out []ports.Mission
	for _, m := range h.store.Puts() {
		if m.ID == id {
			out = append(out, m)
		}
	}
	return out
}

// outbox reads the events of one mission from the fake outbox.
type outbox struct{ *portsfake.Outbox }

func (o outbox) of(missionID string) []ports.Event {
	var out []ports.Event
	for _, e := range o.Events() {
		if e.MissionID == missionID {
			out = append(out, e)
		}
	}
	return out
}

func (o outbox) types(missionID string) []string {
	var out []string
	for _, e := range o.of(missionID) {
		out = append(out, string(e.Type))
	}
	return out
}

func (o outbox) count(missionID string, typ ports.EventType) int {
	n := 0
	for _, e := range o.of(missionID) {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// wantEvents fails the test unless the outbox holds exactly these event
// types of mission id, in order.
func (h *harness) wantEvents(id string, want ...string) {
	h.t.Helper()
	if got := h.outbox.types(id); !reflect.DeepEqual(got, want) {
		h.t.Fatalf("events of %s = %v, want %v", id, got, want)
	}
}

// checkResync checks the executor.resync event a Resync returns: it names
// the owned missions, oldest first, and the protocol version.
func checkResync(t *testing.T, resync ports.Event, owned ...string) {
	t.Helper()
	if resync.Type != ports.EventResync || resync.MissionID != "" || resync.TS.IsZero() {
		t.Fatalf("resync = %+v", resync)
	}
	if ids := resync.Data["owned_mission_ids"]; !reflect.DeepEqual(ids, owned) {
		t.Fatalf("owned_mission_ids = %v, want %v", ids, owned)
	}
	if resync.Data["protocol_version"] != "1.0.0" {
		t.Fatalf("protocol_version = %v", resync.Data["protocol_version"])
	}
}

// checkPairs checks the events a Resync replays, each as "mission type".
func checkPairs(t *testing.T, pairs []ports.Event, want ...string) {
	t.Helper()
	var got []string
	for _, e := range pairs {
		got = append(got, e.MissionID+" "+string(e.Type))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pairs:\n%v\nwant\n%v", got, want)
	}
}

// together runs f(0..n-1) in n goroutines let go at once, and waits for them.
func together(n int, f func(i int)) {
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			f(i)
		}()
	}
	close(gate)
	wg.Wait()
}

// newLink returns a link whose commands the tests play by hand; a kill
// is only counted (the test ends the command when the agent would).
func newLink(log *opLog) *portsfake.Link {
	return portsfake.NewLink(portsfake.WithKill(func(*portsfake.Command) {}), portsfake.WithRecorder(func(op portsfake.Op) {
		e := logEntry{Kind: string(op.Kind), CommandID: op.CommandID}
		if op.Kind == portsfake.OpStart {
			e.MissionID = op.Spec.Env["AIWG_MISSION_ID"]
		}
		log.add(e)
	}))
}

// kills is how many times c was killed.
func kills(c *portsfake.Command) int {
	n, _ := c.Killed()
	return n
}

// emit sends s on c's terminal.
func emit(c *portsfake.Command, s string) { c.Emit(ports.StreamPTY, []byte(s)) }

func agentInfo(id, status string, load int) ports.AgentInfo {
	return ports.AgentInfo{ID: id, Status: ports.AgentStatus(status), Runtime: ports.KindHost, System: ports.SystemInfo{Arch: "amd64"}, RunningCommands: load}
}

// ---------------------------------------------------------------------------
// ports.IDGenerator

type seqIDs struct{ n atomic.Int64 }

func (g *seqIDs) NewID() string { return fmt.Sprintf("id-%d", g.n.Add(1)) }

// ---------------------------------------------------------------------------
// The harness: a service wired to fakes.

const (
	waitTimeout = 15 * time.Second // tells a hang from a loaded machine
	hitlQuiet   = 100 * time.Millisecond
)

type harness struct {
	t      *testing.T
	log    *opLog
	store  *portsfake.MissionStore
	outbox outbox
	link   *portsfake.Link
	dir    *portsfake.Directory
	// clock runs with the wall clock, as the service's timers are real.
	clock *portsfake.Clock
	ids   *seqIDs
	svc   *Service
	// reserved are the agents held for someone (Config.Reserved).
	reserved heldAgents
	// asleep are the agents whose environment sleeps (Config.Asleep).
	asleep asleepAgents
	// decisions are the permission answers the service sent.
	decisions fakeDecider
	changes   countChanges
}

// countChanges counts the changes the service announces, by kind.
type countChanges struct {
	mu sync.Mutex
	n  map[ports.ChangeKind]int
}

func (c *countChanges) Changed(kinds ports.ChangeKind) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[ports.ChangeKind]int{}
	}
	for _, k := range ports.ChangeKinds {
		if kinds&k.Kind != 0 {
			c.n[k.Kind]++
		}
	}
}

func (c *countChanges) count(k ports.ChangeKind) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

// fakeDecider records the permission decisions sent back to commands.
type fakeDecider struct {
	mu  sync.Mutex
	got []string
}

func (d *fakeDecider) DecidePermission(_ context.Context, req ports.PermissionRequest, allow bool, message string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, fmt.Sprintf("%s %s %v %s", req.CommandID, req.RequestID, allow, message))
	return nil
}

func (d *fakeDecider) all() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.got)
}

// heldAgents are the agents a test holds for someone (ports.HeldAgents).
type heldAgents map[string]bool

func (h heldAgents) AgentHeld(id string) bool { return h[id] }

// asleepAgents are the agents a test says sleep (ports.AwaitedAgents).
type asleepAgents map[string]bool

func (a asleepAgents) AgentAwaited(id string) bool { return a[id] }

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessOn(t, portsfake.NewRunningClock())
}

// newHarnessOn is newHarness with the service on clock: a standing one
// (portsfake.NewClock) for a test whose timestamps must be only the ones it
// sets, whatever time the machine takes.
func newHarnessOn(t *testing.T, clock *portsfake.Clock) *harness {
	t.Helper()
	log := &opLog{}
	h := &harness{
		t:   t,
		log: log,
		store: portsfake.NewMissionStore(portsfake.OnPut(func(m ports.Mission) {
			log.add(logEntry{Kind: "put", MissionID: m.ID, State: m.State, LastEvent: m.LastEvent})
		})),
		outbox: outbox{portsfake.NewOutbox(portsfake.OnAppend(func(e ports.Event) {
			log.add(logEntry{Kind: "append", MissionID: e.MissionID, Event: e.Type})
		}))},
		link:  newLink(log),
		dir:   portsfake.NewDirectory(agentInfo("agent-1", "ready", 0)),
		clock: clock,
		ids:   &seqIDs{},
	}
	h.svc = h.newService()
	return h
}

// newService makes a service over the harness's fakes and stops it when the test ends.
func (h *harness) newService() *Service {
	s := New(Config{
		Store: h.store, Outbox: h.outbox, Link: h.link, Agents: h.dir, Clock: h.clock, IDs: h.ids,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		HITLQuiet: hitlQuiet, Permissions: &h.decisions, Changes: &h.changes, Reserved: h.reserved, Asleep: h.asleep,
	})
	h.t.Cleanup(func() {
		h.store.SetBeforePut(nil)
		h.link.SetBeforeStart(nil)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = s.Suspend(ctx) // stops the watchers
	})
	return s
}

// restart models a new run of agentic-mgmt: a new link (it knows no
// commands yet) and a new service over the same store and outbox.
func (h *harness) restart() {
	h.t.Helper()
	h.link = newLink(h.log)
	h.svc = h.newService()
	if err := h.svc.Recover(); err != nil {
		h.t.Fatalf("Recover: %v", err)
	}
}

func request(id string) ports.DispatchRequest {
	return ports.DispatchRequest{AIWGSessionID: "aiwg-1", MissionID: id, Objective: "echo hi", RequestHash: "hash-" + id}
}

func (h *harness) dispatch(id string) ports.Mission {
	h.t.Helper()
	m, err := h.svc.Dispatch(context.Background(), request(id))
	if err != nil {
		h.t.Fatalf("Dispatch(%s): %v", id, err)
	}
	return m
}

// cmd waits until the link runs the command id.
func (h *harness) cmd(id string) *portsfake.Command {
	h.t.Helper()
	var c *portsfake.Command
	waitFor(h.t, func() bool { c = h.link.Command(id); return c != nil }, "command %s started on the link", id)
	return c
}

// run dispatches a mission and waits until it is running.
func (h *harness) run(id string) (ports.Mission, *portsfake.Command) {
	h.t.Helper()
	m := h.dispatch(id)
	c := h.cmd(m.SessionID)
	c.ReportStarted()
	h.waitEvent(id, "mission.started")
	return h.mission(id), c
}

// killRefused asks to kill session sessionID, which must be refused with
// want; it returns the mission the refusal names.
func (h *harness) killRefused(sessionID string, want error) (missionID string) {
	h.t.Helper()
	id, err := h.svc.KillSession(context.Background(), sessionID)
	if !errors.Is(err, want) {
		h.t.Fatalf("KillSession(%s) = %q, %v; want %v", sessionID, id, err, want)
	}
	return id
}

// complete ends mission id's command with success and waits for the
// mission.completed it brings.
func (h *harness) complete(id string, c *portsfake.Command) ports.Event {
	h.t.Helper()
	c.Finish(ports.CommandResult{})
	return h.waitEvent(id, "mission.completed")
}

func (h *harness) mission(id string) ports.Mission {
	h.t.Helper()
	m, err := h.svc.Mission(id)
	if err != nil {
		h.t.Fatalf("Mission(%s): %v", id, err)
	}
	return m
}

// waitEvent waits for the n-th (default first) event of type typ of a mission.
func (h *harness) waitEvent(missionID string, typ ports.EventType, nth ...int) ports.Event {
	h.t.Helper()
	n := 1
	if len(nth) > 0 {
		n = nth[0]
	}
	var ev ports.Event
	waitFor(h.t, func() bool {
		k := 0
		for _, e := range h.outbox.of(missionID) {
			if e.Type == typ {
				if k++; k == n {
					ev = e
					return true
				}
			}
		}
		return false
	}, "event %s #%d of mission %s (have %v)", typ, n, missionID, lazyTypes{h.outbox, missionID})
	return ev
}

type lazyTypes struct {
	o  outbox
	id string
}

func (l lazyTypes) String() string { return fmt.Sprint(l.o.types(l.id)) }

func (h *harness) waitState(id string, st ports.MissionState) ports.Mission {
	h.t.Helper()
	var m ports.Mission
	waitFor(h.t, func() bool { m, _ = h.svc.Mission(id); return m.State == st }, "mission %s in state %s", id, st)
	return m
}

// tracked reports whether the service still routes the session to a mission.
func (h *harness) tracked(sessionID string) bool {
	h.svc.mu.Lock()
	defer h.svc.mu.Unlock()
	_, ok := h.svc.bySession[sessionID]
	return ok
}

// waitEnded waits until the service has handled the end of a mission's session.
func (h *harness) waitEnded(sessionID string) {
	h.t.Helper()
	waitFor(h.t, func() bool { return !h.tracked(sessionID) }, "session %s forgotten", sessionID)
}

// checkOrder checks that every event of a mission was preceded by the Put
// of the state it announces: the last Put of the mission before the event
// carries the event as LastEvent.
func (h *harness) checkOrder() {
	h.t.Helper()
	last := map[string]logEntry{}
	for i, e := range h.log.snapshot() {
		switch e.Kind {
		case "put":
			last[e.MissionID] = e
		case "append":
			if e.MissionID == "" {
				continue
			}
			p, ok := last[e.MissionID]
			if !ok {
				h.t.Errorf("log[%d]: event %s of mission %s appended before any Put of it", i, e.Event, e.MissionID)
				continue
			}
			if p.LastEvent != e.Event {
				h.t.Errorf("log[%d]: event %s of mission %s appended while the store holds the state of %s (%s)", i, e.Event, e.MissionID, p.LastEvent, p.State)
			}
		}
	}
}

func waitFor(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	testkit.Eventually(t, waitTimeout, fmt.Sprintf(format, args...), cond)
}

func exitCode(m ports.Mission) any {
	if m.ExitCode == nil {
		return nil
	}
	return *m.ExitCode
}
