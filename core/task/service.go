package task

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Environments is what tasks need of the environment use case.
type Environments interface {
	Create(ctx context.Context, req environment.Request) (environment.Environment, error)
	Get(name string) (environment.Environment, bool)
	Delete(ctx context.Context, name string) error
}

// SecretSource resolves a manifest's secret reference; ok is false when
// there is no such secret (the environment use case's, for theirs).
type SecretSource = environment.SecretSource

// Config is what the task use case runs on.
type Config struct {
	Store        ports.TaskStore
	Workspace    ports.Workspace
	Environments Environments
	Files        ports.AgentFiles
	Link         ports.AgentLink
	Secrets      SecretSource
	Clock        ports.Clock
	IDs          ports.IDGenerator
	Logger       *slog.Logger
	// DefaultRuntime runs a task whose manifest names none.
	DefaultRuntime string
	// DefaultRuntimeOf, when set, is asked instead at each submit: the
	// server's choice changes as runtimes start to answer.
	DefaultRuntimeOf func() string
	// Runtimes are the names a manifest may give (the server's catalog,
	// whether or not each answers now).
	Runtimes []string
	// ReadyTimeout bounds provisioning (default 5 min).
	ReadyTimeout time.Duration
	// ResultGrace is how long claude may take to exit after its result
	// event before it is ended (default 10 s).
	ResultGrace time.Duration
	// ReapEvery is how often preserved environments past their time are
	// destroyed (default 30 s).
	ReapEvery time.Duration
	// ObserveEnd records a task's end: its state and submission → end.
	ObserveEnd func(state string, d time.Duration)
	// Permissions answers claude's permission prompts (skip_permissions:
	// false); the server's agent link.
	Permissions ports.PermissionDecider
	// EventLog keeps each task's events across restarts (nil: in memory
	// only).
	EventLog ports.TaskEventLog
	// Hold, when set, keeps a task this long in a state it enters before
	// doing that state's work: a fault-injection hook that lets the restart
	// tests kill the server in each phase (AGENTIC_TEST_TASK_HOLD). Unset
	// in production.
	Hold func(State) time.Duration
	// Changes hears of every change of a task's record, progress or open
	// questions.
	Changes ports.ChangeNotifier
	// Injected keeps the values of runs' injected secrets (nil: manifests
	// with inject are refused).
	Injected *inject.Registry
	// EgressBound, when set, bounds the hosts an injected secret may name
	// (AGENTIC_EGRESS_ALLOWED_HOSTS).
	EgressBound []egress.Rule
	// Random fills placeholders (nil: crypto/rand).
	Random func([]byte) error
	// Carry gives a submitted task's run what follows it from the submit
	// request (its trace); nil: nothing.
	Carry ports.ContextCarrier
}

// WorkspaceDir is the workspace on the agent, relative to where its
// commands start.
const WorkspaceDir = "workspace"

// Service runs tasks.
type Service struct {
	cfg  Config
	log  *slog.Logger
	life context.Context
	end  context.CancelFunc
	wg   sync.WaitGroup

	mu    sync.Mutex
	tasks map[string]*entry
}

type entry struct {
	rec      ports.TaskRecord
	manifest Manifest
	cancel   context.CancelFunc
	// secrets are the resolved values: in memory only, for the process.
	secrets   map[string]string
	cancelled bool
	running   bool
	// watch is what the current run's output has told.
	watch *runWatch
	// events is the task's event stream.
	events eventLog
	// hitl are its open permission questions, by id.
	hitl map[string]*HITL
	// held is the last state Config.Hold kept it in (once per state).
	held State
}

// New returns the use case; call Recover, then it takes tasks.
func New(cfg Config) *Service {
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 5 * time.Minute
	}
	if cfg.ResultGrace <= 0 {
		cfg.ResultGrace = 10 * time.Second
	}
	if cfg.ReapEvery <= 0 {
		cfg.ReapEvery = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Changes == nil {
		cfg.Changes = ports.NoChanges{}
	}
	life, end := context.WithCancel(context.Background())
	s := &Service{cfg: cfg, log: cfg.Logger.With("component", "tasks"), life: life, end: end, tasks: map[string]*entry{}}
	s.wg.Add(1)
	go s.reap()
	return s
}

// Close stops every task's goroutine (tasks stay where their checkpoint
// says: the next start continues them).
func (s *Service) Close() {
	s.end()
	s.wg.Wait()
}

// Load reads every stored task, so that the API answers for them from the
// first request; Resume then continues those that had not ended.
func (s *Service) Load(ctx context.Context) error {
	recs, err := s.cfg.Store.List(ctx)
	if err != nil {
		return err
	}
	for _, r := range recs {
		m, err := Parse([]byte(r.Manifest))
		if err != nil {
			s.log.ErrorContext(ctx, "a stored task's manifest no longer parses", "task_id", r.ID, "err", err)
			continue
		}
		e := &entry{rec: r, manifest: m}
		restored, outputBytes := s.restoreEvents(e)
		e.events.keep = s.keeper(r.ID, outputBytes)
		if !restored {
			for _, p := range r.Phases {
				e.events.add(EventState, StateData{State: p.State, At: p.At})
			}
		}
		if State(r.State).Terminal() {
			// Ended before current_tool was cleared at the end: nothing is
			// in use.
			e.rec.Progress.CurrentTool = ""
			e.events.add(EventEnd, e.rec.Clone())
		}
		s.mu.Lock()
		s.tasks[r.ID] = e
		s.mu.Unlock()
	}
	return nil
}

// Resume continues every loaded task that had not ended, from its
// checkpoint (after the environments are recovered, so a task finds its own).
func (s *Service) Resume() {
	s.mu.Lock()
	var todo []*entry
	for _, e := range s.tasks {
		if !State(e.rec.State).Terminal() && !e.running {
			todo = append(todo, e)
		}
	}
	s.mu.Unlock()
	for _, e := range todo {
		s.log.Info("task continues from its checkpoint", "task_id", e.rec.ID, "state", e.rec.State)
		s.start(e)
	}
	// A task that ended just before a stop may have left its environment.
	s.mu.Lock()
	var ended []*entry
	for _, e := range s.tasks {
		if st := State(e.rec.State); st.Terminal() && st != FailedPreserved {
			ended = append(ended, e)
		}
	}
	s.mu.Unlock()
	for _, e := range ended {
		if _, ok := s.cfg.Environments.Get(e.rec.Environment.Name); ok {
			s.destroy(s.life, e)
		}
	}
}

// update changes a task's record under the lock and checkpoints it.
func (s *Service) update(e *entry, f func(r *ports.TaskRecord)) {
	s.mu.Lock()
	f(&e.rec)
	rec := e.rec.Clone()
	s.mu.Unlock()
	s.cfg.Changes.Changed(ports.ChangeTasks)
	if err := s.cfg.Store.Put(context.Background(), rec); err != nil {
		s.log.Error("task checkpoint not stored", "task_id", rec.ID, "state", rec.State, "err", err)
	}
}

func (s *Service) transition(e *entry, to State) {
	now := s.cfg.Clock.Now()
	s.update(e, func(r *ports.TaskRecord) {
		if err := CheckTransition(State(r.State), to); err != nil {
			s.log.Error("task transition refused", "task_id", r.ID, "err", err)
			return
		}
		r.State, r.StateChangedAt = string(to), now
		r.Phases = append(r.Phases, ports.TaskPhase{State: string(to), At: now})
		if to == Running && r.StartedAt.IsZero() {
			r.StartedAt = now
		}
		if to.Terminal() {
			r.FinishedAt = now
			r.Progress.CurrentTool = "" // nothing is in use once it has ended
			if s.cfg.ObserveEnd != nil {
				s.cfg.ObserveEnd(string(to), now.Sub(r.CreatedAt))
			}
		}
		// The end event is the task as it ended (finished_at and all).
		e.events.add(EventState, StateData{State: string(to), At: now, Reason: r.Reason})
		if to.Terminal() {
			e.events.add(EventEnd, r.Clone())
		}
	})
	s.log.Info("task", "task_id", e.rec.ID, "state", to)
}

// reap destroys preserved environments whose time is up, every ReapEvery
// until the service ends.
func (s *Service) reap() {
	defer s.wg.Done()
	clock.Every(s.life, s.cfg.ReapEvery, s.reapDue)
}

func (s *Service) reapDue() {
	now := s.cfg.Clock.Now()
	var due []*entry
	s.mu.Lock()
	for _, e := range s.tasks {
		if e.rec.State == string(FailedPreserved) && !e.rec.PreserveUntil.IsZero() && now.After(e.rec.PreserveUntil) {
			due = append(due, e)
		}
	}
	s.mu.Unlock()
	for _, e := range due {
		s.destroy(s.life, e)
		s.update(e, func(r *ports.TaskRecord) { r.PreserveUntil = time.Time{} })
	}
}
