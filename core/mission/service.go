// Service is the mission use case: it accepts dispatches, runs each
// objective as a background PTY session on an agent, turns what the session
// does into lifecycle transitions (decided by core/mission), and makes each
// one durable (store) before its event is emitted (outbox). It implements
// ports.Missions for REST and ports.ExecutorHub for the AIWG client.

package mission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/hitl"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Config is what the service needs.
type Config struct {
	Store  ports.MissionStore
	Outbox ports.EventOutbox
	Link   ports.AgentLink
	Agents ports.AgentDirectory
	Clock  ports.Clock
	IDs    ports.IDGenerator
	Logger *slog.Logger
	// HITLQuiet is how long a prompt must stay unanswered by more output
	// before it counts as waiting for a human.
	HITLQuiet time.Duration
	// Terminal size of mission sessions.
	Cols, Rows uint16
	// Permissions sends the answers to claude's permission prompts back to
	// the command that asked (nil: missions' claude gets no prompt tool).
	Permissions ports.PermissionDecider
	// Changes hears of every stored change of a mission or its HITL.
	Changes ports.ChangeNotifier
	// Reserved names the agents held for someone (a warm pool's idle
	// members): never a candidate (nil: none).
	Reserved ports.HeldAgents
	// Asleep names the agents whose environment is hibernated: a candidate
	// although not connected, woken by the mission's launch (its Link wakes
	// the environment it starts on). Nil: none sleeps.
	Asleep ports.AwaitedAgents
}

// summaryBytes bounds a mission's summary (the tail of its output).
const summaryBytes = 2048

// Service runs missions.
type Service struct {
	cfg  Config
	log  *slog.Logger
	stop chan struct{}
	wg   sync.WaitGroup

	mu        sync.Mutex
	missions  map[string]*live
	reserving map[string]chan struct{} // mission ids being dispatched right now
	bySession map[string]*live
	byHITL    map[string]*live
	suspended bool
}

// live is a mission known in memory, with what its session produced.
type live struct {
	// id and created never change, so they can be read without op.
	id      string
	created time.Time
	// op serialises transitions of this mission, across store and outbox,
	// so its events are emitted in the order its states were stored.
	op sync.Mutex
	m  ports.Mission

	cmd     ports.Command
	started chan struct{}
	startMu sync.Once
	output  chan struct{}

	outMu sync.Mutex
	tail  *hitl.Tail
	det   *hitl.Detector

	// asked are permission requests waiting for the open HITL request to be
	// answered (one question at a time); under op.
	asked []ports.PermissionRequest
}

func (l *live) markStarted() { l.startMu.Do(func() { close(l.started) }) }

func (l *live) onOutput(now func() time.Time) func(ports.OutputChunk) {
	return func(c ports.OutputChunk) {
		l.outMu.Lock()
		l.tail.Write(c.Data)
		l.det.Output(c.Data, now())
		l.outMu.Unlock()
		select {
		case l.output <- struct{}{}:
		default:
		}
	}
}

// New returns the service; call Recover before serving.
func New(cfg Config) *Service {
	if cfg.HITLQuiet <= 0 {
		cfg.HITLQuiet = 1500 * time.Millisecond
	}
	if cfg.Cols == 0 {
		cfg.Cols, cfg.Rows = 200, 50
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Changes == nil {
		cfg.Changes = ports.NoChanges{}
	}
	s := &Service{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "missions"),
		stop:      make(chan struct{}),
		missions:  map[string]*live{},
		reserving: map[string]chan struct{}{},
		bySession: map[string]*live{},
		byHITL:    map[string]*live{},
	}
	return s
}

func (s *Service) newLive(m ports.Mission) *live {
	return &live{
		id:      m.ID,
		created: m.CreatedAt,
		m:       m,
		started: make(chan struct{}),
		output:  make(chan struct{}, 1),
		tail:    hitl.NewTail(summaryBytes),
		det:     hitl.NewDetector(s.cfg.HITLQuiet),
	}
}

// commit makes the new state durable, then emits its events, in that order:
// a crash in between leaves a stored state no older than the last event.
func (s *Service) commit(ctx context.Context, ms []ports.Mission, evs []ports.Event) error {
	if len(ms) > 0 {
		if err := s.cfg.Store.Put(ctx, ms...); err != nil {
			return fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
		}
	}
	if len(evs) > 0 {
		if _, err := s.cfg.Outbox.Append(ctx, evs...); err != nil {
			return fmt.Errorf("%w: event outbox: %v", ports.ErrStoreUnavailable, err)
		}
	}
	// Callers hold the missions' locks until their new state is in place,
	// so a watcher that reads at once waits for it.
	s.cfg.Changes.Changed(ports.ChangeMissions | ports.ChangeHITL)
	return nil
}

// transition applies f to l's mission under its lock and commits the result.
// A refused transition (the mission moved on meanwhile) changes nothing.
func (s *Service) transition(l *live, f func(ports.Mission) (ports.Mission, ports.Event, error)) (ports.Mission, error) {
	l.op.Lock()
	defer l.op.Unlock()
	next, ev, err := f(l.m)
	if err != nil {
		return l.m, err
	}
	if err := s.commit(context.Background(), []ports.Mission{next}, []ports.Event{ev}); err != nil {
		s.log.Error("mission transition not stored", "mission_id", l.m.ID, "event", ev.Type, "err", err)
		return l.m, err
	}
	l.m = next
	return next, nil
}

// transitionDurably is transition for what a session did (it started, asks
// a human, ended): that cannot be refused, so a store that cannot write
// (a full disk) is retried with backoff until it can, or the service stops.
// Until then the mission stays in its stored state and nothing is emitted.
func (s *Service) transitionDurably(l *live, f func(ports.Mission) (ports.Mission, ports.Event, error)) (ports.Mission, error) {
	backoff := storeRetryMin
	for {
		m, err := s.transition(l, f)
		if err == nil || !errors.Is(err, ports.ErrStoreUnavailable) {
			return m, err
		}
		select {
		case <-s.stop:
			return m, err
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, storeRetryMax)
	}
}

// Bounds of the backoff of transitionDurably.
const (
	storeRetryMin = 100 * time.Millisecond
	storeRetryMax = 5 * time.Second
)

// Recover loads the stored missions and re-binds every unfinished one to its
// session, so output and results from agents that report back reach it.
// Call it before the agent port is served.
func (s *Service) Recover() error {
	ms, err := s.cfg.Store.Load()
	if err != nil {
		return err
	}
	if err := s.requeueLastEvents(ms); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range ms {
		l := s.newLive(m)
		s.missions[m.ID] = l
		if m.State.Terminal() {
			continue
		}
		if m.HITL != nil {
			s.byHITL[m.HITL.ID] = l
		}
		if m.SessionID == "" {
			continue
		}
		s.bySession[m.SessionID] = l
		if m.State != ports.MissionAssigned {
			l.markStarted()
		}
		l.cmd = s.cfg.Link.Attach(m.AgentID, m.SessionID, ports.StartOptions{
			Detached: true, OnOutput: l.onOutput(s.cfg.Clock.Now), OnStarted: l.markStarted,
		})
		s.wg.Add(1)
		go s.watch(l)
	}
	s.log.Info("missions recovered", "total", len(ms), "unfinished", len(Owned(ms)))
	return nil
}

// crashWindow bounds how long before the last stored change a state may
// have been stored without its event being queued (a crash between the two
// writes); it is generous, since duplicates are harmless and losses are not.
const crashWindow = 10 * time.Second

// requeueLastEvents queues again the last event of every mission changed
// just before the previous run stopped, unless the outbox still holds it.
// Delivery is at-least-once, so an event that was queued, delivered and
// compacted away may be sent twice; none is lost.
func (s *Service) requeueLastEvents(ms []ports.Mission) error {
	var newest time.Time
	for _, m := range ms {
		if m.LastEventAt.After(newest) {
			newest = m.LastEventAt
		}
	}
	queued, err := s.cfg.Outbox.Pending(s.cfg.Outbox.Acked(), math.MaxInt)
	if err != nil {
		return fmt.Errorf("reading the event outbox: %w", err)
	}
	type key struct {
		mission string
		event   ports.EventType
		at      int64
	}
	held := make(map[key]bool, len(queued))
	for _, e := range queued {
		held[key{e.MissionID, e.Type, e.TS.UnixNano()}] = true
	}
	sortMissions(ms)
	var again []ports.Event
	for _, m := range ms {
		ev, ok := LastEventOf(m)
		if !ok || ev.TS.Before(newest.Add(-crashWindow)) || held[key{ev.MissionID, ev.Type, ev.TS.UnixNano()}] {
			continue
		}
		again = append(again, ev)
	}
	if len(again) == 0 {
		return nil
	}
	sort.SliceStable(again, func(i, j int) bool { return again[i].TS.Before(again[j].TS) })
	if _, err := s.cfg.Outbox.Append(context.Background(), again...); err != nil {
		return fmt.Errorf("requeueing events: %w", err)
	}
	s.log.Info("queued again the last events of missions changed just before the previous stop", "count", len(again))
	return nil
}

// Dispatch accepts a mission.
func (s *Service) Dispatch(ctx context.Context, req ports.DispatchRequest) (ports.Mission, error) {
	for {
		s.mu.Lock()
		if s.suspended {
			s.mu.Unlock()
			return ports.Mission{}, fmt.Errorf("%w: shutting down", ports.ErrStoreUnavailable)
		}
		if l, ok := s.missions[req.MissionID]; ok {
			s.mu.Unlock()
			return sameOrConflict(l.snapshot(), req)
		}
		wait, busy := s.reserving[req.MissionID]
		if !busy {
			s.reserving[req.MissionID] = make(chan struct{})
			s.mu.Unlock()
			break
		}
		s.mu.Unlock()
		select { // the same mission_id is being dispatched concurrently
		case <-wait:
		case <-ctx.Done():
			return ports.Mission{}, ctx.Err()
		}
	}
	defer func() {
		s.mu.Lock()
		close(s.reserving[req.MissionID])
		delete(s.reserving, req.MissionID)
		s.mu.Unlock()
	}()

	if old, ok, err := s.cfg.Store.Archived(req.MissionID); err != nil {
		return ports.Mission{}, fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	} else if ok {
		return sameOrConflict(old, req)
	}
	agentID, err := Route(req.Filter, s.candidates(req.Filter.AgentID))
	switch {
	case errors.Is(err, ErrAgentNotConnected):
		return ports.Mission{}, ports.ErrAgentNotConnected
	case errors.Is(err, ErrNoAgent):
		return ports.Mission{}, ports.ErrNoAgent
	case err != nil:
		return ports.Mission{}, err
	}
	now := s.cfg.Clock.Now()
	m, ev := Assign(req, agentID, now, now)
	m.SessionID = s.cfg.IDs.NewID()
	if err := s.commit(ctx, []ports.Mission{m}, []ports.Event{ev}); err != nil {
		return ports.Mission{}, err
	}
	l := s.newLive(m)
	s.mu.Lock()
	s.missions[m.ID] = l
	s.bySession[m.SessionID] = l
	s.mu.Unlock()
	s.cfg.Changes.Changed(ports.ChangeMissions)
	s.wg.Add(1)
	// The mission outlives the dispatch request (Close ends it), but keeps
	// what its context carries (the request's trace).
	go s.launch(context.WithoutCancel(ctx), l) //nolint:gosec // a mission outlives the dispatch request; Close ends it
	return m, nil
}

func sameOrConflict(m ports.Mission, req ports.DispatchRequest) (ports.Mission, error) {
	if m.RequestHash != req.RequestHash {
		return ports.Mission{}, ports.ErrMissionConflict
	}
	return m, nil
}

func (l *live) snapshot() ports.Mission {
	l.op.Lock()
	defer l.op.Unlock()
	return l.m
}

// Candidates are the agents a mission may go to now (held ones left out):
// what the executor may advertise.
func (s *Service) Candidates() []Candidate { return s.candidates("") }

// candidates are the agents a mission may go to: the one it names, else
// every agent (one lookup, not a listing of thousands, when it names one).
func (s *Service) candidates(named string) []Candidate {
	var agents []ports.AgentInfo
	if named != "" {
		if a, ok := s.cfg.Agents.Agent(named); ok {
			agents = []ports.AgentInfo{a}
		} else if s.asleep(named) {
			// Hibernated before this server started: its agent has not
			// been seen since, but a wake brings it.
			return []Candidate{{ID: named, Status: ports.AgentDisconnected, Asleep: true}}
		}
	} else {
		agents = s.cfg.Agents.Agents()
	}
	out := make([]Candidate, 0, len(agents))
	for _, a := range agents {
		if s.cfg.Reserved != nil && s.cfg.Reserved.AgentHeld(a.ID) {
			continue
		}
		out = append(out, Candidate{
			ID: a.ID, Status: a.Status, Runtime: a.Runtime, Arch: a.System.Arch,
			Capabilities: a.Capabilities, Load: a.RunningCommands,
			Asleep: !a.Status.Working() && s.asleep(a.ID),
		})
	}
	return out
}

func (s *Service) asleep(agentID string) bool {
	return s.cfg.Asleep != nil && s.cfg.Asleep.AgentAwaited(agentID)
}

// agentRuntime names what runs the objective, for mission.started.
func agentRuntime(objective string) string {
	for _, prefix := range []string{"claude ", "claude\t"} {
		if len(objective) >= len(prefix) && objective[:len(prefix)] == prefix {
			return "claude-code"
		}
	}
	if objective == "claude" {
		return "claude-code"
	}
	return "shell"
}

// launch starts the objective's session on the agent, then watches it;
// ctx carries the dispatch request's values, never its end.
func (s *Service) launch(ctx context.Context, l *live) {
	m := l.snapshot()
	spec := ports.CommandSpec{
		Command:     "sh",
		Args:        []string{"-c", m.Objective},
		PTY:         true,
		Cols:        s.cfg.Cols,
		Rows:        s.cfg.Rows,
		Env:         map[string]string{"AIWG_MISSION_ID": m.ID},
		SessionID:   m.SessionID,
		SessionName: "mission-" + m.ID,
		// A claude the objective runs may ask through the permission tool
		// (AGENTIC_MCP_CONFIG): each question is a mission.hitl_required.
		PermissionPrompts: s.cfg.Permissions != nil,
	}
	cmd, err := s.cfg.Link.Start(ctx, m.AgentID, spec, ports.StartOptions{
		Detached: true, CommandID: m.SessionID, OnOutput: l.onOutput(s.cfg.Clock.Now), OnStarted: l.markStarted,
	})
	if err != nil {
		defer s.wg.Done() // Suspend waits until the failure is stored and announced
		reason := ReasonSessionStart
		if errors.Is(err, ports.ErrWakeFailed) {
			reason = ReasonWakeFailed
		}
		_, _ = s.transition(l, func(m ports.Mission) (ports.Mission, ports.Event, error) {
			return Fail(m, reason, "session could not start: "+err.Error(), nil, "", s.cfg.Clock.Now())
		})
		s.forgetSession(l)
		return
	}
	l.op.Lock()
	l.cmd = cmd
	ended := l.m.State.Terminal() // aborted while Start was on its way
	l.op.Unlock()
	if ended {
		if err := cmd.Kill(context.Background()); err != nil && !errors.Is(err, ports.ErrCommandEnded) {
			s.log.WarnContext(ctx, "could not kill the session of an aborted mission", "mission_id", l.id, "err", err)
		}
	}
	s.watch(l)
}

// watch turns the session's life into transitions until it ends or the
// service stops (the session itself goes on running).
func (s *Service) watch(l *live) {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	started := l.started
	l.op.Lock()
	done := l.cmd.Done()
	l.op.Unlock()
	for {
		select {
		case <-s.stop:
			timer.Stop()
			return
		case <-started:
			started = nil
			s.onStarted(l)
		case <-l.output:
			if next := s.onOutput(l); !next.IsZero() {
				timer.Reset(time.Until(next))
			}
		case <-timer.C:
			if next := s.checkHITL(l); !next.IsZero() {
				timer.Reset(time.Until(next))
			}
		case <-done:
			timer.Stop()
			// A process that started and ended at once may close done first.
			select {
			case <-started:
				s.onStarted(l)
			default:
			}
			s.onEnded(l)
			return
		}
	}
}

func (s *Service) onStarted(l *live) {
	_, _ = s.transitionDurably(l, func(m ports.Mission) (ports.Mission, ports.Event, error) {
		if m.State != ports.MissionAssigned {
			return m, ports.Event{}, ErrIllegalTransition // recovered mission already running
		}
		return Start(m, agentRuntime(m.Objective), m.SessionID, s.cfg.Clock.Now())
	})
}

// onOutput emits progress when due and returns when to check for a HITL prompt.
func (s *Service) onOutput(l *live) time.Time {
	l.outMu.Lock()
	last, summary, next := l.tail.LastLine(), l.tail.String(), l.det.NextCheck()
	l.outMu.Unlock()
	_, _ = s.transition(l, func(m ports.Mission) (ports.Mission, ports.Event, error) {
		m, ev, ok := Progress(m, last, summary, s.cfg.Clock.Now())
		if !ok {
			return m, ev, ErrIllegalTransition
		}
		return m, ev, nil
	})
	return next
}

func (s *Service) checkHITL(l *live) time.Time {
	now := s.cfg.Clock.Now()
	l.outMu.Lock()
	p, ok := l.det.Check(now)
	next := l.det.NextCheck()
	l.outMu.Unlock()
	if !ok {
		return next
	}
	req := ports.HITLRequest{ID: s.cfg.IDs.NewID(), Prompt: p.Text, Context: p.Context}
	if m, err := s.openHITL(l, req, now); err == nil {
		s.log.Info("mission waits for a human", "mission_id", m.ID, "hitl_id", req.ID)
	}
	return next
}

// openHITL puts l's running mission in hitl_required with req. The request
// is known before its event can reach anyone, so an answer that comes at
// once finds it (and then waits on the mission's lock for the commit); it
// is forgotten again when the mission does not take it.
func (s *Service) openHITL(l *live, req ports.HITLRequest, now time.Time) (ports.Mission, error) {
	s.mu.Lock()
	s.byHITL[req.ID] = l
	s.mu.Unlock()
	m, err := s.transitionDurably(l, func(m ports.Mission) (ports.Mission, ports.Event, error) {
		return RequireHITL(m, req, now)
	})
	if err != nil {
		s.mu.Lock()
		delete(s.byHITL, req.ID)
		s.mu.Unlock()
	}
	return m, err
}

func (s *Service) onEnded(l *live) {
	l.op.Lock()
	r := l.cmd.Result()
	l.op.Unlock()
	l.outMu.Lock()
	summary := l.tail.String()
	l.outMu.Unlock()
	m, err := s.transitionDurably(l, func(m ports.Mission) (ports.Mission, ports.Event, error) {
		return Finish(m, r, summary, s.cfg.Clock.Now())
	})
	if err == nil {
		s.log.Info("mission ended", "mission_id", m.ID, "state", m.State, "exit_code", r.ExitCode)
	}
	s.forgetSession(l)
}

// RetireAgent implements ports.AgentRetirer: the missions that ran on
// agentID fail with reason before their sessions end, so aiwg serve hears
// why rather than a lost session.
func (s *Service) RetireAgent(_ context.Context, agentID, reason string) {
	on := s.allLive()
	for _, l := range on {
		if l.snapshot().AgentID != agentID {
			continue
		}
		l.outMu.Lock()
		summary := l.tail.String()
		l.outMu.Unlock()
		m, err := s.transitionDurably(l, func(m ports.Mission) (ports.Mission, ports.Event, error) {
			return Fail(m, reason, "agent retired: "+reason, nil, summary, s.cfg.Clock.Now())
		})
		if err == nil {
			s.log.Info("mission failed: its agent was retired", "mission_id", m.ID, "agent_id", agentID, "reason", reason)
		}
	}
}

func (s *Service) forgetSession(l *live) {
	m := l.snapshot()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.bySession, m.SessionID)
}

// Mission finds a mission, archived or not.
func (s *Service) Mission(id string) (ports.Mission, error) {
	s.mu.Lock()
	l, ok := s.missions[id]
	s.mu.Unlock()
	if ok {
		return l.snapshot(), nil
	}
	m, ok, err := s.cfg.Store.Archived(id)
	if err != nil {
		return ports.Mission{}, fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	if !ok {
		return ports.Mission{}, ports.ErrMissionNotFound
	}
	return m, nil
}

// Missions lists missions in memory, oldest first.
func (s *Service) Missions(state ports.MissionState) []ports.Mission {
	ls := s.allLive()
	out := make([]ports.Mission, 0, len(ls))
	for _, l := range ls {
		if m := l.snapshot(); state == "" || m.State == state {
			out = append(out, m)
		}
	}
	sortMissions(out)
	return out
}

func sortMissions(ms []ports.Mission) {
	sort.Slice(ms, func(i, j int) bool {
		if !ms[i].CreatedAt.Equal(ms[j].CreatedAt) {
			return ms[i].CreatedAt.Before(ms[j].CreatedAt)
		}
		return ms[i].ID < ms[j].ID
	})
}

// OpenHITL lists unanswered HITL requests, oldest first.
func (s *Service) OpenHITL() []ports.OpenHITL {
	var out []ports.OpenHITL
	for _, m := range s.Missions(ports.MissionHITLRequired) {
		if m.HITL != nil {
			out = append(out, ports.OpenHITL{HITLRequest: *m.HITL, MissionID: m.ID, AgentID: m.AgentID, SessionID: m.SessionID})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// RespondHITL writes the answer to the session and resumes the mission.
func (s *Service) RespondHITL(ctx context.Context, hitlID, text string) (ports.Mission, error) {
	s.mu.Lock()
	l, ok := s.byHITL[hitlID]
	s.mu.Unlock()
	if !ok {
		return ports.Mission{}, ports.ErrHITLNotFound
	}
	l.op.Lock()
	defer l.op.Unlock()
	if l.m.State != ports.MissionHITLRequired || l.m.HITL == nil || l.m.HITL.ID != hitlID {
		return l.m, ports.ErrHITLNotOpen
	}
	if l.cmd == nil {
		return l.m, ports.ErrAgentNotConnected
	}
	if perm := l.m.HITL.Permission; perm != nil {
		allow, message := PermissionAnswer(text)
		if err := s.cfg.Permissions.DecidePermission(ctx, *perm, allow, message); err != nil {
			return l.m, err
		}
	} else if err := l.cmd.WriteStdin(ctx, []byte(text+"\n"), false); err != nil {
		return l.m, err
	}
	next, ev, err := AnswerHITL(l.m, hitlID, s.cfg.Clock.Now())
	if err != nil {
		return l.m, ports.ErrHITLNotOpen
	}
	if err := s.commit(ctx, []ports.Mission{next}, []ports.Event{ev}); err != nil {
		return l.m, err
	}
	l.m = next
	l.outMu.Lock()
	l.det.Answered()
	l.outMu.Unlock()
	if len(l.asked) > 0 {
		queued := l.asked[0]
		l.asked = l.asked[1:]
		s.wg.Add(1)
		go func() { // after this answer is committed (op is held until return)
			defer s.wg.Done()
			s.PermissionAsked(queued)
		}()
	}
	return next, nil
}

// PermissionAsked implements ports.PermissionAsker for the missions'
// commands: claude asking to use a tool becomes the mission's HITL request
// (mission.hitl_required with the tool and its input). The same request
// asked again (the agent asks again on every connect) is the open one.
func (s *Service) PermissionAsked(req ports.PermissionRequest) bool {
	s.mu.Lock()
	l, ok := s.bySession[req.CommandID]
	s.mu.Unlock()
	if !ok {
		return false
	}
	now := s.cfg.Clock.Now()
	l.op.Lock()
	if l.m.AgentID != req.AgentID || s.cfg.Permissions == nil {
		l.op.Unlock()
		return ok && l.m.AgentID == req.AgentID // another agent's: not ours to take
	}
	if h := l.m.HITL; h != nil && h.Permission != nil && h.Permission.RequestID == req.RequestID {
		l.op.Unlock()
		return true
	}
	if l.m.State != ports.MissionRunning {
		// One question at a time: this one waits for the open one.
		if l.m.State == ports.MissionHITLRequired && !slices.ContainsFunc(l.asked, func(q ports.PermissionRequest) bool { return q.RequestID == req.RequestID }) {
			l.asked = append(l.asked, req)
		}
		l.op.Unlock()
		return true
	}
	l.op.Unlock()
	hr := ports.HITLRequest{ID: s.cfg.IDs.NewID(), Prompt: "claude asks to use " + req.ToolName + ": answer allow or deny (a message may follow)", Context: clipInput(req.InputJSON), Permission: &req}
	// RequireHITL takes a running mission only: one that moved on meanwhile
	// keeps its state and the question is forgotten.
	if m, err := s.openHITL(l, hr, now); err == nil {
		s.log.Info("mission waits for a permission", "mission_id", m.ID, "hitl_id", hr.ID, "tool", req.ToolName)
	}
	return true
}

// clipInput bounds a tool input shown as a HITL request's context.
func clipInput(s string) string {
	const max = 4096
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// HITLResponded answers a HITL request that came over the executor stream.
func (s *Service) HITLResponded(ctx context.Context, hitlID, text string) error {
	_, err := s.RespondHITL(ctx, hitlID, text)
	return err
}

// KillSession kills a session; the mission in it, if any, is aborted first.
func (s *Service) KillSession(ctx context.Context, sessionID string) (string, error) {
	s.mu.Lock()
	l, ok := s.bySession[sessionID]
	s.mu.Unlock()
	if !ok {
		cmd, found := s.cfg.Link.Lookup(sessionID)
		if !found {
			return "", ports.ErrSessionNotFound
		}
		return "", cmd.Kill(ctx)
	}
	m, err := s.transition(l, func(m ports.Mission) (ports.Mission, ports.Event, error) {
		return Abort(m, "session killed by an operator", s.cfg.Clock.Now())
	})
	if errors.Is(err, ErrIllegalTransition) {
		return m.ID, ports.ErrCommandEnded
	}
	if err != nil {
		return m.ID, err
	}
	l.op.Lock()
	cmd := l.cmd
	l.op.Unlock()
	if cmd == nil {
		return m.ID, nil
	}
	if err := cmd.Kill(ctx); err != nil && !errors.Is(err, ports.ErrCommandEnded) {
		return m.ID, err
	}
	return m.ID, nil
}

// allLive is the missions in memory now.
func (s *Service) allLive() []*live {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.missions))
}

// holdAll locks every mission of ls in the one order, by id (sorting ls),
// so two callers holding them all cannot deadlock; it returns the release.
func holdAll(ls []*live) (release func()) {
	sort.Slice(ls, func(i, j int) bool { return ls[i].id < ls[j].id })
	for _, l := range ls {
		l.op.Lock()
	}
	return func() {
		for _, l := range ls {
			l.op.Unlock()
		}
	}
}

// Resync moves suspended missions back to running and returns the frames a
// new executor stream starts with.
func (s *Service) Resync(ctx context.Context) (ports.Event, []ports.Event, error) {
	ls := s.allLive()
	// Hold every mission still so no transition slips between the decision and its storage.
	defer holdAll(ls)()
	ms := make([]ports.Mission, len(ls))
	byID := make(map[string]*live, len(ls))
	for i, l := range ls {
		ms[i] = l.m
		byID[l.m.ID] = l
	}
	resync, pairs, changed := Resync(ms, s.cfg.IDs.NewID, s.cfg.Clock.Now())
	if len(changed) > 0 {
		if err := s.cfg.Store.Put(ctx, changed...); err != nil {
			return ports.Event{}, nil, fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
		}
		for _, m := range changed {
			byID[m.ID].m = m
		}
	}
	return resync, pairs, nil
}

// Suspend is the shutdown of agentic-mgmt: every unfinished mission is
// stored as suspended and its mission.suspended event is emitted. The
// sessions go on running on their agents.
func (s *Service) Suspend(ctx context.Context) error {
	s.mu.Lock()
	if s.suspended {
		s.mu.Unlock()
		return nil
	}
	s.suspended = true
	inflight := make([]chan struct{}, 0, len(s.reserving))
	for _, c := range s.reserving {
		inflight = append(inflight, c)
	}
	s.mu.Unlock()
	// A dispatch past its check adds its mission (and its launch to wg) before it lets go.
	for _, c := range inflight {
		select {
		case <-c:
		case <-ctx.Done():
		}
	}
	ls := s.allLive()
	close(s.stop)
	// A launch stuck in Start must not hold the shutdown past its budget;
	// the mission locks below keep whatever it does later in order.
	watchers := make(chan struct{})
	go func() { s.wg.Wait(); close(watchers) }()
	select {
	case <-watchers:
	case <-ctx.Done():
		s.log.WarnContext(ctx, "suspending while a session start is still pending")
	}
	now := s.cfg.Clock.Now()
	// Hold every mission until the suspension is stored and announced, so
	// no transition slips in between.
	defer holdAll(ls)()
	byAge := append([]*live(nil), ls...)
	sort.SliceStable(byAge, func(i, j int) bool { return byAge[i].created.Before(byAge[j].created) })
	var ms []ports.Mission
	var evs []ports.Event
	var moved []*live
	for _, l := range byAge {
		if next, ev, err := Suspend(l.m, s.cfg.IDs.NewID(), now); err == nil {
			ms = append(ms, next)
			evs = append(evs, ev)
			moved = append(moved, l)
		}
	}
	if err := s.commit(ctx, ms, evs); err != nil {
		return err
	}
	for i, l := range moved {
		l.m = ms[i]
	}
	s.log.InfoContext(ctx, "missions suspended for shutdown", "count", len(ms))
	return nil
}

// Run forgets finished missions once the store archived them, until ctx ends.
func (s *Service) Run(ctx context.Context) {
	clock.Every(ctx, 10*time.Second, s.forgetArchived)
}

// forgetArchived drops finished missions the store has archived from
// memory; the store still answers for them. Locks are taken one at a time: a
// mission's op lock is never held while waiting for s.mu here.
func (s *Service) forgetArchived() {
	ls := s.allLive()
	for _, l := range ls {
		m := l.snapshot()
		if !m.State.Terminal() {
			continue
		}
		// Only once the store answers for it from the archive, so a lookup
		// never misses a mission that is still on record.
		if _, archived, err := s.cfg.Store.Archived(m.ID); err != nil || !archived {
			continue
		}
		s.mu.Lock()
		delete(s.missions, l.id)
		for id, x := range s.byHITL {
			if x == l {
				delete(s.byHITL, id)
			}
		}
		s.mu.Unlock()
	}
}
