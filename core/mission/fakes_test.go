package mission

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
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
// ports.MissionStore

var errDisk = errors.New("disk full")

type fakeStore struct {
	log *opLog

	mu          sync.Mutex
	missions    map[string]ports.Mission
	archived    map[string]ports.Mission
	puts        []ports.Mission // every mission of every successful Put, in order
	putCalls    int
	putErr      error
	archivedErr error
	loadErr     error
	// putHook runs at the start of every Put, outside the store's lock (it may block).
	putHook func(ms []ports.Mission)
}

func newFakeStore(log *opLog) *fakeStore {
	return &fakeStore{log: log, missions: map[string]ports.Mission{}, archived: map[string]ports.Mission{}}
}

func (s *fakeStore) Load() ([]ports.Mission, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loadErr != nil {
		return nil, s.loadErr
	}
	out := make([]ports.Mission, 0, len(s.missions))
	for _, m := range s.missions {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

func (s *fakeStore) Put(ctx context.Context, ms ...ports.Mission) error {
	s.mu.Lock()
	hook, err := s.putHook, s.putErr
	s.putCalls++
	s.mu.Unlock()
	if hook != nil {
		hook(ms)
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range ms {
		s.missions[m.ID] = m
		s.puts = append(s.puts, m)
		s.log.add(logEntry{Kind: "put", MissionID: m.ID, State: m.State, LastEvent: m.LastEvent})
	}
	return nil
}

func (s *fakeStore) Archived(id string) (ports.Mission, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.archivedErr != nil {
		return ports.Mission{}, false, s.archivedErr
	}
	m, ok := s.archived[id]
	return m, ok, nil
}

func (s *fakeStore) Close() error { return nil }

func (s *fakeStore) setPutErr(err error) {
	s.mu.Lock()
	s.putErr = err
	s.mu.Unlock()
}

func (s *fakeStore) setPutHook(f func([]ports.Mission)) {
	s.mu.Lock()
	s.putHook = f
	s.mu.Unlock()
}

func (s *fakeStore) setArchivedErr(err error) {
	s.mu.Lock()
	s.archivedErr = err
	s.mu.Unlock()
}

// seed stores missions as if an earlier run had put them.
func (s *fakeStore) seed(ms ...ports.Mission) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range ms {
		s.missions[m.ID] = m
	}
}

// archive moves a mission to the archive, as retention does.
func (s *fakeStore) archive(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.archived[id] = s.missions[id]
	delete(s.missions, id)
}

func (s *fakeStore) putArchived(m ports.Mission) {
	s.mu.Lock()
	s.archived[m.ID] = m
	s.mu.Unlock()
}

func (s *fakeStore) get(id string) (ports.Mission, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.missions[id]
	return m, ok
}

func (s *fakeStore) putsOf(id string) []ports.Mission {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ports.Mission
	for _, m := range s.puts {
		if m.ID == id {
			out = append(out, m)
		}
	}
	return out
}

func (s *fakeStore) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.putCalls
}

// ---------------------------------------------------------------------------
// ports.EventOutbox

type fakeOutbox struct {
	log    *opLog
	mu     sync.Mutex
	events []ports.Event
	seq    uint64
	acked  uint64
	err    error
	notify chan struct{}
}

func newFakeOutbox(log *opLog) *fakeOutbox {
	return &fakeOutbox{log: log, notify: make(chan struct{}, 1)}
}

func (o *fakeOutbox) Append(ctx context.Context, evs ...ports.Event) ([]ports.Event, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return nil, o.err
	}
	out := make([]ports.Event, 0, len(evs))
	for _, e := range evs {
		o.seq++
		e.Seq = o.seq
		o.events = append(o.events, e)
		out = append(out, e)
		o.log.add(logEntry{Kind: "append", MissionID: e.MissionID, Event: e.Type})
	}
	select {
	case o.notify <- struct{}{}:
	default:
	}
	return out, nil
}

func (o *fakeOutbox) Pending(after uint64, max int) ([]ports.Event, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []ports.Event
	for _, e := range o.events {
		if e.Seq > after && len(out) < max {
			out = append(out, e)
		}
	}
	return out, nil
}

func (o *fakeOutbox) Ack(seq uint64) error {
	o.mu.Lock()
	o.acked = max(o.acked, seq)
	o.mu.Unlock()
	return nil
}

func (o *fakeOutbox) Acked() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.acked
}

func (o *fakeOutbox) Notify() <-chan struct{} { return o.notify }
func (o *fakeOutbox) Close() error            { return nil }

func (o *fakeOutbox) setErr(err error) {
	o.mu.Lock()
	o.err = err
	o.mu.Unlock()
}

func (o *fakeOutbox) all() []ports.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]ports.Event(nil), o.events...)
}

func (o *fakeOutbox) of(missionID string) []ports.Event {
	var out []ports.Event
	for _, e := range o.all() {
		if e.MissionID == missionID {
			out = append(out, e)
		}
	}
	return out
}

func (o *fakeOutbox) types(missionID string) []string {
	var out []string
	for _, e := range o.of(missionID) {
		out = append(out, string(e.Type))
	}
	return out
}

func (o *fakeOutbox) count(missionID string, typ ports.EventType) int {
	n := 0
	for _, e := range o.of(missionID) {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// ---------------------------------------------------------------------------
// ports.AgentLink and ports.Command

type startCall struct {
	AgentID string
	Spec    ports.CommandSpec
	Opts    ports.StartOptions
}

type attachCall struct {
	AgentID   string
	CommandID string
}

type fakeLink struct {
	log *opLog

	mu       sync.Mutex
	cmds     map[string]*fakeCmd
	starts   []startCall
	attaches []attachCall
	startErr error
	// startHook runs at the start of every Start, outside the lock (it may block).
	startHook func(agentID string, spec ports.CommandSpec)
	n         int
}

func newFakeLink(log *opLog) *fakeLink {
	return &fakeLink{log: log, cmds: map[string]*fakeCmd{}}
}

func (l *fakeLink) Start(ctx context.Context, agentID string, spec ports.CommandSpec, opts ports.StartOptions) (ports.Command, error) {
	l.mu.Lock()
	hook := l.startHook
	l.mu.Unlock()
	if hook != nil {
		hook(agentID, spec)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.starts = append(l.starts, startCall{AgentID: agentID, Spec: spec, Opts: opts})
	if l.startErr != nil {
		return nil, l.startErr
	}
	id := opts.CommandID
	if id == "" {
		l.n++
		id = fmt.Sprintf("link-cmd-%d", l.n)
	}
	if _, dup := l.cmds[id]; dup {
		return nil, fmt.Errorf("command id %q already in use", id)
	}
	c := newFakeCmd(l, id, agentID, opts)
	l.cmds[id] = c
	l.log.add(logEntry{Kind: "start", MissionID: spec.Env["AIWG_MISSION_ID"], CommandID: id})
	return c, nil
}

func (l *fakeLink) Lookup(id string) (ports.Command, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.cmds[id]
	if !ok {
		return nil, false
	}
	return c, true
}

func (l *fakeLink) Attach(agentID, id string, opts ports.StartOptions) ports.Command {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attaches = append(l.attaches, attachCall{AgentID: agentID, CommandID: id})
	if c, ok := l.cmds[id]; ok {
		return c
	}
	c := newFakeCmd(l, id, agentID, opts)
	l.cmds[id] = c
	return c
}

func (l *fakeLink) setStartErr(err error) {
	l.mu.Lock()
	l.startErr = err
	l.mu.Unlock()
}

func (l *fakeLink) setStartHook(f func(string, ports.CommandSpec)) {
	l.mu.Lock()
	l.startHook = f
	l.mu.Unlock()
}

// addCommand makes a command known to the link that runs no mission.
func (l *fakeLink) addCommand(id, agentID string) *fakeCmd {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := newFakeCmd(l, id, agentID, ports.StartOptions{})
	l.cmds[id] = c
	return c
}

func (l *fakeLink) startCalls() []startCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]startCall(nil), l.starts...)
}

func (l *fakeLink) attachCalls() []attachCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]attachCall(nil), l.attaches...)
}

func (l *fakeLink) cmd(id string) *fakeCmd {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cmds[id]
}

type fakeCmd struct {
	link    *fakeLink
	id      string
	agentID string
	opts    ports.StartOptions
	done    chan struct{}

	outMu  sync.Mutex // serialises callbacks, as the link's receive loop does
	offset uint64

	mu       sync.Mutex
	ended    bool
	result   ports.CommandResult
	stdin    []string
	kills    int
	stdinErr error
}

func newFakeCmd(l *fakeLink, id, agentID string, opts ports.StartOptions) *fakeCmd {
	return &fakeCmd{link: l, id: id, agentID: agentID, opts: opts, done: make(chan struct{})}
}

func (c *fakeCmd) ID() string                                   { return c.id }
func (c *fakeCmd) AgentID() string                              { return c.agentID }
func (c *fakeCmd) Done() <-chan struct{}                        { return c.done }
func (c *fakeCmd) Resize(context.Context, uint16, uint16) error { return nil }
func (c *fakeCmd) Signal(context.Context, int) error            { return nil }

func (c *fakeCmd) Result() ports.CommandResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.result
}

func (c *fakeCmd) WriteStdin(ctx context.Context, data []byte, eof bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return ports.ErrCommandEnded
	}
	if c.stdinErr != nil {
		return c.stdinErr
	}
	c.stdin = append(c.stdin, string(data))
	c.link.log.add(logEntry{Kind: "stdin", CommandID: c.id})
	return nil
}

func (c *fakeCmd) Kill(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return ports.ErrCommandEnded
	}
	c.kills++
	c.link.log.add(logEntry{Kind: "kill", CommandID: c.id})
	return nil
}

// emit delivers output, as the agent link's receive loop would.
func (c *fakeCmd) emit(s string) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if c.opts.OnOutput != nil {
		c.opts.OnOutput(ports.OutputChunk{Stream: ports.StreamPTY, Data: []byte(s), Offset: c.offset})
	}
	c.offset += uint64(len(s))
}

// start reports the process running.
func (c *fakeCmd) start() {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if c.opts.OnStarted != nil {
		c.opts.OnStarted()
	}
}

// finish ends the command with r.
func (c *fakeCmd) finish(r ports.CommandResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	c.ended = true
	c.result = r
	close(c.done)
}

func (c *fakeCmd) stdinWrites() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.stdin...)
}

func (c *fakeCmd) killCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kills
}

func (c *fakeCmd) setStdinErr(err error) {
	c.mu.Lock()
	c.stdinErr = err
	c.mu.Unlock()
}

// ---------------------------------------------------------------------------
// ports.AgentDirectory

type fakeDir struct {
	mu     sync.Mutex
	agents []ports.AgentInfo
}

func (d *fakeDir) Agents() []ports.AgentInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]ports.AgentInfo(nil), d.agents...)
}

func (d *fakeDir) Agent(id string) (ports.AgentInfo, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range d.agents {
		if a.ID == id {
			return a, true
		}
	}
	return ports.AgentInfo{}, false
}

func (d *fakeDir) set(agents ...ports.AgentInfo) {
	d.mu.Lock()
	d.agents = agents
	d.mu.Unlock()
}

func agentInfo(id, status string, load int) ports.AgentInfo {
	return ports.AgentInfo{ID: id, Status: ports.AgentStatus(status), Runtime: ports.KindHost, System: ports.SystemInfo{Arch: "amd64"}, RunningCommands: load}
}

// ---------------------------------------------------------------------------
// ports.Clock: the real clock, shifted by an offset the test can advance. The
// service's timers use the real clock, so the offset only ever grows.

type testClock struct {
	mu    sync.Mutex
	off   time.Duration
	calls int
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return time.Now().Add(c.off)
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

func (c *testClock) callCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// ---------------------------------------------------------------------------
// ports.IDGenerator

type seqIDs struct{ n atomic.Int64 }

func (g *seqIDs) NewID() string { return fmt.Sprintf("id-%d", g.n.Add(1)) }

// ---------------------------------------------------------------------------
// The harness: a service wired to fakes.

const (
	waitTimeout = 5 * time.Second
	hitlQuiet   = 100 * time.Millisecond
)

type harness struct {
	t      *testing.T
	log    *opLog
	store  *fakeStore
	outbox *fakeOutbox
	link   *fakeLink
	dir    *fakeDir
	clock  *testClock
	ids    *seqIDs
	svc    *Service
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

func newHarness(t *testing.T) *harness {
	t.Helper()
	log := &opLog{}
	h := &harness{
		t:      t,
		log:    log,
		store:  newFakeStore(log),
		outbox: newFakeOutbox(log),
		link:   newFakeLink(log),
		dir:    &fakeDir{},
		clock:  &testClock{},
		ids:    &seqIDs{},
	}
	h.dir.set(agentInfo("agent-1", "ready", 0))
	h.svc = h.newService()
	return h
}

// newService makes a service over the harness's fakes and stops it when the test ends.
func (h *harness) newService() *Service {
	s := New(Config{
		Store: h.store, Outbox: h.outbox, Link: h.link, Agents: h.dir, Clock: h.clock, IDs: h.ids,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		HITLQuiet: hitlQuiet, Permissions: &h.decisions, Changes: &h.changes,
	})
	h.t.Cleanup(func() {
		h.store.setPutHook(nil)
		h.link.setStartHook(nil)
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
	h.link = newFakeLink(h.log)
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
func (h *harness) cmd(id string) *fakeCmd {
	h.t.Helper()
	var c *fakeCmd
	waitFor(h.t, func() bool { c = h.link.cmd(id); return c != nil }, "command %s started on the link", id)
	return c
}

// run dispatches a mission and waits until it is running.
func (h *harness) run(id string) (ports.Mission, *fakeCmd) {
	h.t.Helper()
	m := h.dispatch(id)
	c := h.cmd(m.SessionID)
	c.start()
	h.waitEvent(id, "mission.started")
	return h.mission(id), c
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
	o  *fakeOutbox
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
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for "+format, args...)
		}
		time.Sleep(time.Millisecond)
	}
}

// within waits up to d for cond, reporting whether it held.
func within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func exitCode(m ports.Mission) any {
	if m.ExitCode == nil {
		return nil
	}
	return *m.ExitCode
}
