package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/claudefeed"
	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Environments is what tasks need of the environment use case.
type Environments interface {
	Create(ctx context.Context, req environment.Request) (environment.Environment, error)
	Get(name string) (environment.Environment, bool)
	Delete(ctx context.Context, name string) error
}

// SecretSource resolves a manifest's secret reference; ok is false when
// there is no such secret.
type SecretSource interface {
	Resolve(source, key string) (value string, ok bool, err error)
}

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
			s.log.Error("a stored task's manifest no longer parses", "task_id", r.ID, "err", err)
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
			e.events.add(EventEnd, cloneRecord(r))
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

// Check parses a manifest as this server would take it: Parse, and a
// runtime the server knows.
func (s *Service) Check(doc []byte) (Manifest, error) {
	m, err := Parse(doc)
	if err != nil {
		return Manifest{}, err
	}
	if r := m.Environment.Runtime; r != "" && !slices.Contains(s.cfg.Runtimes, r) {
		return Manifest{}, fmt.Errorf("%w: environment.runtime: must be one of %s", ErrInvalidManifest, strings.Join(s.cfg.Runtimes, ", "))
	}
	if _, err := egress.ParseRules(m.Environment.AllowedHosts); err != nil {
		return Manifest{}, fmt.Errorf("%w: environment.allowed_hosts: %v", ErrInvalidManifest, err)
	}
	return m, nil
}

// Submitted is a submit's answer: the task, and whether it is new.
type Submitted struct {
	Task    ports.TaskRecord
	Created bool
}

// Submit stores a task and starts it. The same idempotency key (or
// metadata.id) with the same manifest returns the same task; with another
// manifest, ErrTaskConflict.
func (s *Service) Submit(ctx context.Context, doc []byte, idempotencyKey string) (Submitted, error) {
	m, err := s.Check(doc)
	if err != nil {
		return Submitted{}, err
	}
	sum := sha256.Sum256(doc)
	hash := hex.EncodeToString(sum[:])
	s.mu.Lock()
	for _, e := range s.tasks {
		same := (idempotencyKey != "" && e.rec.IdempotencyKey == idempotencyKey) || (m.Metadata.ID != "" && e.rec.ID == m.Metadata.ID)
		if !same {
			continue
		}
		rec := e.rec
		s.mu.Unlock()
		if rec.ManifestSHA256 != hash {
			return Submitted{}, fmt.Errorf("%w: task %s", ports.ErrTaskConflict, rec.ID)
		}
		return Submitted{Task: cloneRecord(rec)}, nil
	}
	id := m.Metadata.ID
	if id == "" {
		id = s.cfg.IDs.NewID()
	}
	now := s.cfg.Clock.Now()
	runtime := m.Environment.Runtime
	if runtime == "" {
		runtime = s.cfg.DefaultRuntime
	}
	name := m.Metadata.Name
	if name == "" {
		name = "task"
	}
	e := &entry{manifest: m, rec: ports.TaskRecord{
		ID: id, Name: name, Labels: m.Metadata.Labels, State: string(Pending), CreatedAt: now, StateChangedAt: now,
		Phases: []ports.TaskPhase{{State: string(Pending), At: now}}, Manifest: string(doc), IdempotencyKey: idempotencyKey,
		ManifestSHA256: hash, Environment: ports.TaskEnvironment{Name: EnvironmentName(id), Runtime: runtime},
	}}
	e.events.keep = s.keeper(id, 0)
	e.events.add(EventState, StateData{State: string(Pending), At: now})
	s.tasks[id] = e
	s.mu.Unlock()
	s.cfg.Changes.Changed(ports.ChangeTasks)
	if err := s.cfg.Store.Put(ctx, e.rec); err != nil {
		s.mu.Lock()
		delete(s.tasks, id)
		s.mu.Unlock()
		return Submitted{}, err
	}
	// The answer is the task as submitted (pending), whatever its run has
	// done by the time the caller reads it.
	s.mu.Lock()
	submitted := cloneRecord(e.rec)
	s.mu.Unlock()
	s.start(e)
	return Submitted{Task: submitted, Created: true}, nil
}

// EnvironmentName is the environment (and agent) of a task: derived from
// its id, within the names runtimes take.
func EnvironmentName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "task-" + hex.EncodeToString(sum[:8])
}

func (s *Service) start(e *entry) {
	ctx, cancel := context.WithCancel(s.life)
	s.mu.Lock()
	e.cancel, e.running = cancel, true
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		s.run(ctx, e)
		s.mu.Lock()
		e.running = false
		s.mu.Unlock()
	}()
}

// Counts is how many tasks are in each state (every state named).
func (s *Service) Counts() map[string]int {
	out := map[string]int{}
	for _, st := range States {
		out[string(st)] = 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.tasks {
		out[e.rec.State]++
	}
	return out
}

// Get returns a task.
func (s *Service) Get(id string) (ports.TaskRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.tasks[id]
	if !ok {
		return ports.TaskRecord{}, fmt.Errorf("%w: %s", ports.ErrTaskNotFound, id)
	}
	return cloneRecord(e.rec), nil
}

// Filter selects tasks for List.
type Filter struct {
	States []string
	Labels map[string]string
	Limit  int
	// After is the cursor: the last task of the previous page.
	After string
}

// List returns tasks newest first (ties by id), a page at a time; next is
// the cursor of the following page, "" at the end.
func (s *Service) List(f Filter) (tasks []ports.TaskRecord, next string) {
	s.mu.Lock()
	all := make([]ports.TaskRecord, 0, len(s.tasks))
	for _, e := range s.tasks {
		all = append(all, e.rec)
	}
	s.mu.Unlock()
	sort.Slice(all, func(i, j int) bool {
		if !all[i].CreatedAt.Equal(all[j].CreatedAt) {
			return all[i].CreatedAt.After(all[j].CreatedAt)
		}
		return all[i].ID > all[j].ID
	})
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 100
	}
	skipping := f.After != ""
	for _, r := range all {
		if skipping {
			if r.ID == f.After {
				skipping = false
			}
			continue
		}
		if len(f.States) > 0 && !slices.Contains(f.States, r.State) {
			continue
		}
		match := true
		for k, v := range f.Labels {
			if r.Labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		if len(tasks) == f.Limit {
			return tasks, tasks[len(tasks)-1].ID
		}
		tasks = append(tasks, cloneRecord(r))
	}
	return tasks, ""
}

// Cancel ends a task: its process and environment are ended, its state is
// cancelled. A preserved failed task has its environment destroyed now.
func (s *Service) Cancel(ctx context.Context, id string) (ports.TaskRecord, error) {
	s.mu.Lock()
	e, ok := s.tasks[id]
	if !ok {
		s.mu.Unlock()
		return ports.TaskRecord{}, fmt.Errorf("%w: %s", ports.ErrTaskNotFound, id)
	}
	state := State(e.rec.State)
	if !state.Terminal() {
		e.cancelled = true
		if e.cancel != nil {
			e.cancel()
		}
	}
	s.mu.Unlock()
	if state == FailedPreserved {
		s.destroy(ctx, e)
	}
	return s.Get(id)
}

// OpenArtifact reads one of a task's artifacts.
func (s *Service) OpenArtifact(id, name string) (io.ReadCloser, ports.Artifact, error) {
	rec, err := s.Get(id)
	if err != nil {
		return nil, ports.Artifact{}, err
	}
	for _, a := range rec.Artifacts {
		if a.Name == name {
			r, err := s.cfg.Workspace.Open(id, name)
			return r, a, err
		}
	}
	return nil, ports.Artifact{}, fmt.Errorf("%w: %s", ports.ErrArtifactNotFound, name)
}

func cloneRecord(r ports.TaskRecord) ports.TaskRecord {
	r.Phases = slices.Clone(r.Phases)
	r.Artifacts = slices.Clone(r.Artifacts)
	if r.ExitCode != nil {
		c := *r.ExitCode
		r.ExitCode = &c
	}
	return r
}

// update changes a task's record under the lock and checkpoints it.
func (s *Service) update(e *entry, f func(r *ports.TaskRecord)) {
	s.mu.Lock()
	f(&e.rec)
	rec := cloneRecord(e.rec)
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
		e.events.add(EventState, StateData{State: string(to), At: now, Reason: r.Reason})
		if to.Terminal() {
			e.events.add(EventEnd, cloneRecord(*r))
		}
		if to == Running && r.StartedAt.IsZero() {
			r.StartedAt = now
		}
		if to.Terminal() {
			r.FinishedAt = now
			if s.cfg.ObserveEnd != nil {
				s.cfg.ObserveEnd(string(to), now.Sub(r.CreatedAt))
			}
		}
	})
	s.log.Info("task", "task_id", e.rec.ID, "state", to)
}

// failure ends a task that failed: what it made is collected when it can
// be, then its environment is kept (failure_action: preserve) or destroyed.
func (s *Service) failure(ctx context.Context, e *entry, reason Reason, err error) {
	msg := ""
	if err != nil {
		msg = clipText(err.Error())
	}
	s.mu.Lock()
	haveEnv := e.rec.State != string(Pending) && e.rec.State != string(Staging)
	preserve := e.manifest.Lifecycle.FailureAction == FailurePreserve
	s.mu.Unlock()
	end := FailureState(preserve, haveEnv)
	s.update(e, func(r *ports.TaskRecord) {
		r.Reason, r.Error = string(reason), msg
		if end == FailedPreserved {
			r.PreserveUntil = s.cfg.Clock.Now().Add(e.manifest.Lifecycle.PreserveFor)
		}
	})
	if end == Failed && haveEnv {
		s.destroy(ctx, e)
	}
	s.transition(e, end)
}

func (s *Service) destroy(ctx context.Context, e *entry) {
	name := e.rec.Environment.Name
	if _, ok := s.cfg.Environments.Get(name); !ok {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := s.cfg.Environments.Delete(dctx, name); err != nil && !errors.Is(err, ports.ErrEnvNotFound) {
		s.log.Warn("task environment not destroyed", "task_id", e.rec.ID, "environment", name, "err", err)
	}
}

func clipText(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "…"
	}
	return s
}

// run drives a task from its checkpoint to an end.
func (s *Service) run(ctx context.Context, e *entry) {
	var cmd ports.Command
	for {
		s.mu.Lock()
		state, cancelled := State(e.rec.State), e.cancelled
		s.mu.Unlock()
		if state.Terminal() {
			return
		}
		if cancelled || errors.Is(ctx.Err(), context.Canceled) && s.life.Err() == nil {
			s.cancelNow(e, cmd)
			return
		}
		if s.life.Err() != nil {
			return // the server stops: the checkpoint stays, the next start continues
		}
		if s.cfg.Hold != nil && e.held != state {
			e.held = state
			if d := s.cfg.Hold(state); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
				}
				continue
			}
		}
		var reason Reason
		var err error
		switch state {
		case Pending:
			s.transition(e, Staging)
			continue
		case Staging:
			reason, err = s.stage(ctx, e)
			if err == nil {
				s.transition(e, Provisioning)
			}
		case Provisioning:
			reason, err = s.provision(ctx, e)
			if err == nil {
				s.transition(e, Ready)
			}
		case Ready:
			if e.rec.CommandID != "" {
				// Started before a restart (or maybe not): never twice.
				// Running binds to it, and a process the agent does not
				// have fails the task as lost.
				s.transition(e, Running)
				continue
			}
			if reason, err = s.waitReady(ctx, e); err != nil {
				break
			}
			cmd, reason, err = s.launch(ctx, e)
			if err == nil {
				s.transition(e, Running)
			}
		case Running:
			var end RunEnd
			end, err = s.wait(ctx, e, cmd)
			if err != nil {
				reason = ReasonAgentLost
				break
			}
			ok, why := Outcome(end)
			if ok {
				s.transition(e, Completing)
				continue
			}
			// Keep what it made before deciding on the environment.
			_ = s.collect(ctx, e)
			reason, err = why, fmt.Errorf("%s (exit code %d)", why, end.ExitCode)
		case Completing:
			if _, err = s.waitReady(ctx, e); err != nil {
				reason = ReasonAgentLost
				break
			}
			if err = s.collect(ctx, e); err != nil {
				reason = ReasonArtifactsMissing
				break
			}
			// Completed once what it made is safe; its environment goes
			// next (Resume destroys one a stop left behind).
			s.transition(e, Completed)
			s.destroy(ctx, e)
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				continue // cancelled or stopping: the loop's top decides
			}
			if reason == "" {
				reason = ReasonInternal
			}
			s.log.Warn("task failed", "task_id", e.rec.ID, "state", state, "reason", reason, "err", err)
			s.failure(ctx, e, reason, err)
			return
		}
	}
}

func (s *Service) cancelNow(e *entry, cmd ports.Command) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if cmd == nil && e.rec.CommandID != "" {
		cmd, _ = s.cfg.Link.Lookup(e.rec.CommandID)
	}
	if cmd != nil {
		_ = cmd.Kill(ctx)
	}
	s.destroy(ctx, e)
	s.update(e, func(r *ports.TaskRecord) { r.Reason = string(ReasonCancelled) })
	s.transition(e, Cancelled)
}

// stage resolves the secrets and fetches the repository.
func (s *Service) stage(ctx context.Context, e *entry) (Reason, error) {
	secrets := map[string]string{}
	for _, sec := range e.manifest.Secrets {
		v, ok, err := s.cfg.Secrets.Resolve(sec.Source, sec.Key)
		if err != nil || (!ok && sec.Required) {
			why := "not found"
			if err != nil {
				why = err.Error()
			}
			// The reference only, never a value.
			return ReasonSecretUnresolved, fmt.Errorf("secret %s (%s %s): %s", sec.Name, sec.Source, sec.Key, why)
		}
		if ok {
			secrets[sec.Name] = v
		}
	}
	s.mu.Lock()
	e.secrets = secrets
	s.mu.Unlock()
	if r := e.manifest.Repository; r != nil {
		base, err := s.cfg.Workspace.Stage(ctx, e.rec.ID, ports.TaskRepository{URL: r.URL, Branch: r.Branch, Commit: r.Commit}, taskMD(e.manifest))
		if err != nil {
			return ReasonStagingFailed, err
		}
		s.update(e, func(rec *ports.TaskRecord) { rec.BaseCommit = base })
	}
	return "", nil
}

func taskMD(m Manifest) string {
	if m.Claude != nil {
		return m.Claude.Prompt + "\n"
	}
	return "command: " + strings.Join(m.Command.Argv, " ") + "\n"
}

// provision makes the task's environment (a left-over one from before a
// restart is replaced) and waits for its agent.
func (s *Service) provision(ctx context.Context, e *entry) (Reason, error) {
	name := e.rec.Environment.Name
	if _, ok := s.cfg.Environments.Get(name); ok {
		if err := s.cfg.Environments.Delete(ctx, name); err != nil && !errors.Is(err, ports.ErrEnvNotFound) {
			return ReasonProvisionFailed, err
		}
	}
	env := e.manifest.Environment
	_, err := s.cfg.Environments.Create(ctx, environment.Request{
		Runtime: e.rec.Environment.Runtime, Name: name, Image: env.Image, Network: env.NetworkMode, AllowedHosts: env.AllowedHosts,
		Resources: ports.Resources{CPUs: env.CPUs, MemoryMB: env.MemoryMB, DiskGB: env.DiskGB},
	})
	if err != nil {
		return ReasonProvisionFailed, err
	}
	return s.waitReady(ctx, e)
}

// waitReady waits for the task's environment to have its agent: after
// provisioning, and after a restart before its files are used again (the
// agent reconnects some time after the server is back).
func (s *Service) waitReady(ctx context.Context, e *entry) (Reason, error) {
	name := e.rec.Environment.Name
	deadline := time.NewTimer(s.cfg.ReadyTimeout)
	defer deadline.Stop()
	// Polled: the environments use case has no notification yet. 5 ms
	// costs nothing and keeps the wait from adding to every task.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		got, ok := s.cfg.Environments.Get(name)
		switch {
		case !ok:
			return ReasonProvisionFailed, errors.New("the environment is gone")
		case got.State == environment.StateReady:
			s.update(e, func(r *ports.TaskRecord) { r.AgentID = got.AgentID })
			return "", nil
		case got.State == environment.StateFailed:
			return ReasonProvisionFailed, errors.New(got.Error)
		}
		select {
		case <-ctx.Done():
			return ReasonProvisionFailed, ctx.Err()
		case <-deadline.C:
			return ReasonProvisionFailed, fmt.Errorf("the environment's agent was not ready within %v", s.cfg.ReadyTimeout)
		case <-tick.C:
		}
	}
}

// launch uploads the workspace and starts the run, detached so that it
// outlives a restart of the server.
func (s *Service) launch(ctx context.Context, e *entry) (ports.Command, Reason, error) {
	agent := e.rec.AgentID
	// Where relative paths start on the agent, asked while the tree goes
	// up: the workspace is there.
	type based struct {
		l   ports.FileListing
		err error
	}
	base := make(chan based, 1)
	go func() {
		l, err := s.cfg.Files.ListFiles(ctx, agent, ".")
		base <- based{l, err}
	}()
	if e.manifest.Repository != nil {
		tree, err := s.cfg.Workspace.Tree(ctx, e.rec.ID)
		if err != nil {
			<-base
			return nil, ReasonStagingFailed, err
		}
		err = s.cfg.Files.WriteArchive(ctx, agent, WorkspaceDir, tree)
		tree.Close()
		if err != nil {
			<-base
			return nil, ReasonStagingFailed, fmt.Errorf("uploading the workspace: %w", err)
		}
	} else if err := s.cfg.Files.WriteFile(ctx, agent, WorkspaceDir+"/TASK.md", 0o644, strings.NewReader(taskMD(e.manifest))); err != nil {
		<-base
		return nil, ReasonStagingFailed, fmt.Errorf("making the workspace: %w", err)
	}
	b := <-base
	if b.err != nil {
		return nil, ReasonStagingFailed, b.err
	}
	l := ports.FileListing{Path: strings.TrimSuffix(b.l.Path, "/") + "/" + WorkspaceDir}
	dir := l.Path
	if r := e.manifest.Repository; r != nil && r.Subpath != "" {
		dir += "/" + r.Subpath
	}
	argv := Argv(e.manifest)
	s.mu.Lock()
	env := map[string]string{}
	for k, v := range e.secrets {
		env[k] = v
	}
	s.mu.Unlock()
	commandID := "task-" + e.rec.ID
	s.update(e, func(r *ports.TaskRecord) { r.Workspace, r.CommandID = l.Path, commandID })
	cmd, err := s.cfg.Link.Start(ctx, agent, ports.CommandSpec{
		Command: argv[0], Args: argv[1:], WorkingDir: dir, Env: env, Timeout: e.manifest.Lifecycle.Timeout,
		// No session type: the run is the task's, not a session the
		// session reconciler would kill as unknown after a restart.
		PermissionPrompts: e.manifest.Claude != nil && !e.manifest.Claude.SkipPermissions,
	}, ports.StartOptions{CommandID: commandID, Detached: true, OnOutput: s.onOutput(e)})
	if err != nil {
		return nil, ReasonAgentLost, err
	}
	return cmd, "", nil
}

// Argv is the process a task runs, in argv form: claude headless with
// stream-json (which -p needs --verbose for), or the manifest's command.
func Argv(m Manifest) []string {
	if m.Command != nil {
		return slices.Clone(m.Command.Argv)
	}
	c := m.Claude
	argv := []string{"claude", "-p", c.Prompt, "--output-format", "stream-json", "--verbose"}
	if c.Model != "" {
		argv = append(argv, "--model", c.Model)
	}
	if c.MaxTurns > 0 {
		argv = append(argv, "--max-turns", fmt.Sprint(c.MaxTurns))
	}
	if len(c.AllowedTools) > 0 {
		argv = append(argv, "--allowedTools", strings.Join(c.AllowedTools, ","))
	}
	if c.SkipPermissions {
		argv = append(argv, "--dangerously-skip-permissions")
	} else {
		// Each prompt goes to an operator as a HITL request.
		argv = append(argv, "--permission-prompt-tool", PermissionTool, "--mcp-config", ports.ClaudePermissionMCPConfig)
	}
	return argv
}

// runWatch is what the output of a run tells.
type runWatch struct {
	mu         sync.Mutex
	parser     *claudefeed.Parser
	lastOutput time.Time
	result     bool
	resultErr  bool
	resultAt   time.Time
}

func (s *Service) onOutput(e *entry) func(ports.OutputChunk) {
	w := &runWatch{parser: claudefeed.NewParser(), lastOutput: s.cfg.Clock.Now()}
	s.mu.Lock()
	e.watch = w
	s.mu.Unlock()
	return func(c ports.OutputChunk) {
		now := s.cfg.Clock.Now()
		w.mu.Lock()
		w.lastOutput = now
		var events []claudefeed.Event
		if e.manifest.Claude != nil && c.Stream != ports.StreamStderr {
			events = w.parser.Write(c.Data)
		}
		for _, ev := range events {
			if ev.Kind == claudefeed.KindResult {
				w.result, w.resultErr, w.resultAt = true, ev.IsError, now
			}
		}
		sum := w.parser.Summary()
		current := ""
		for i := len(events) - 1; i >= 0; i-- {
			if events[i].Kind == claudefeed.KindToolCall {
				current = events[i].ToolName
				break
			}
		}
		w.mu.Unlock()
		s.mu.Lock()
		e.events.add(EventOutput, OutputData{Offset: e.rec.Progress.OutputBytes, Data: string(c.Data)})
		for _, ev := range events {
			if ev.Kind == claudefeed.KindInvalid {
				continue
			}
			e.events.add(EventActivity, ActivityData{Kind: string(ev.Kind), Text: ev.Text, ToolName: ev.ToolName, IsError: ev.IsError, CostUSD: ev.CostUSD})
		}
		p := &e.rec.Progress
		p.OutputBytes += int64(len(c.Data))
		p.LastActivityAt = now
		// An open question keeps it waiting: output that comes after (it
		// may overtake the question on the agent link, or precede it) does
		// not mean claude works on.
		if len(e.hitl) == 0 {
			p.Activity = "working"
		}
		if e.manifest.Claude != nil {
			p.ToolCalls, p.Turns, p.CostUSD = sum.ToolCalls, sum.Turns, sum.CostUSD
			if current != "" {
				p.CurrentTool = current
			}
		}
		s.mu.Unlock()
		s.cfg.Changes.Changed(ports.ChangeTasks)
	}
}

// wait waits for the run to end: its result, a cancel, the idle timeout,
// or claude lingering after its result.
func (s *Service) wait(ctx context.Context, e *entry, cmd ports.Command) (RunEnd, error) {
	if cmd == nil {
		// After a restart: the agent kept the process; bind to it again.
		cmd = s.cfg.Link.Attach(e.rec.AgentID, e.rec.CommandID, ports.StartOptions{CommandID: e.rec.CommandID, Detached: true, OnOutput: s.onOutput(e)})
	}
	s.mu.Lock()
	w := e.watch
	s.mu.Unlock()
	kind := RunCommand
	if e.manifest.Claude != nil {
		kind = RunClaude
	}
	idle := e.manifest.Lifecycle.IdleTimeout
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var idled, lingered bool
	for {
		select {
		case <-cmd.Done():
			r := cmd.Result()
			if r.Error == ports.ErrCommandLost.Error() || r.Error == ports.ErrAgentGone.Error() {
				return RunEnd{}, errors.New(r.Error)
			}
			code := r.ExitCode
			s.update(e, func(rec *ports.TaskRecord) { rec.ExitCode = &code; rec.Progress.Activity = "idle" })
			w.mu.Lock()
			end := RunEnd{Kind: kind, ExitCode: code, ResultSeen: w.result, ResultIsError: w.resultErr, TimedOut: r.TimedOut, IdleTimedOut: idled}
			w.mu.Unlock()
			if lingered && end.ExitCode != 0 && end.ResultSeen {
				end.ExitCode = 0 // ended by the server after its result: the result decides
			}
			return end, nil
		case <-ctx.Done():
			if s.life.Err() != nil {
				// The server stops: the run goes on on its agent, and the
				// next start binds to it again.
				return RunEnd{}, ctx.Err()
			}
			_ = cmd.Kill(context.Background()) // cancelled
			<-cmd.Done()
			return RunEnd{}, ctx.Err()
		case <-tick.C:
			now := s.cfg.Clock.Now()
			w.mu.Lock()
			last, result, resultAt := w.lastOutput, w.result, w.resultAt
			w.mu.Unlock()
			if idle > 0 && !idled && now.Sub(last) >= idle {
				idled = true
				_ = cmd.Kill(ctx)
			}
			if result && !lingered && now.Sub(resultAt) >= s.cfg.ResultGrace {
				lingered = true
				_ = cmd.Kill(ctx)
			}
		}
	}
}

// collect keeps the artifacts and the patch, before the environment is
// touched.
func (s *Service) collect(ctx context.Context, e *entry) error {
	s.mu.Lock()
	agent, ws, base := e.rec.AgentID, e.rec.Workspace, e.rec.BaseCommit
	s.mu.Unlock()
	if agent == "" || ws == "" {
		return errors.New("no workspace to collect")
	}
	tree, err := s.cfg.Files.ReadArchive(ctx, agent, ws)
	if err != nil {
		return fmt.Errorf("reading the workspace: %w", err)
	}
	defer tree.Close()
	patterns := e.manifest.Lifecycle.ArtifactPatterns
	arts, err := s.cfg.Workspace.Collect(ctx, e.rec.ID, tree, base, patterns)
	s.update(e, func(r *ports.TaskRecord) { r.Artifacts = arts })
	if err != nil {
		return err
	}
	// A pattern that names one file (no wildcard) must have found it.
	for _, p := range patterns {
		if strings.ContainsAny(p, "*?[") {
			continue
		}
		if !slices.ContainsFunc(arts, func(a ports.Artifact) bool { return a.Name == p }) {
			return fmt.Errorf("artifact %s was not made", p)
		}
	}
	return nil
}

// reap destroys preserved environments whose time is up.
func (s *Service) reap() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.ReapEvery)
	defer t.Stop()
	for {
		select {
		case <-s.life.Done():
			return
		case <-t.C:
		}
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
}
