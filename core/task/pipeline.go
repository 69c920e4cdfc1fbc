package task

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/claudefeed"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// start runs e's pipeline (stage → provision → run → collect, each step
// from its checkpoint) on a goroutine of its own.
func (s *Service) start(e *entry) { s.startFrom(context.Background(), e) }

// startFrom is start for a task its caller submitted just now: the run
// carries what Config.Carry takes from the request's context (its trace),
// never the request's end.
func (s *Service) startFrom(request context.Context, e *entry) {
	ctx, cancel := context.WithCancel(s.life)
	if s.cfg.Carry != nil {
		ctx = s.cfg.Carry(request, ctx)
	}
	s.mu.Lock()
	// Submit and Resume may both start a task submitted while the server
	// resumes the ones it had (REST serves by then): it runs once.
	if e.running {
		s.mu.Unlock()
		cancel()
		return
	}
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
			// launch moves it to running just before the process starts, so
			// its output never comes before that state in the event stream.
			cmd, reason, err = s.launch(ctx, e)
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
			reason, err = why, errors.New(FailureMessage(end, why, e.manifest))
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
			s.log.WarnContext(ctx, "task failed", "task_id", e.rec.ID, "state", state, "reason", reason, "err", err)
			s.failure(ctx, e, reason, err)
			return
		}
	}
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
		if ok && sec.Inject == nil { // an injected one is read again at launch
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
		Resources: ports.Resources{CPUs: env.CPUs, MemoryMB: env.MemoryMB, DiskGB: env.DiskGB}, Tier: env.Isolation, Placement: env.Placement,
		Labels: envLabels(e.rec.Labels),
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

// launch uploads the workspace, moves the task to running and starts the
// run, detached so that it outlives a restart of the server.
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
	injected, endpoints, reason, err := s.grantInjected(e, agent)
	if err != nil {
		return nil, reason, err
	}
	for k, v := range injected {
		env[k] = v
	}
	commandID := "task-" + e.rec.ID
	s.update(e, func(r *ports.TaskRecord) { r.Workspace, r.CommandID = l.Path, commandID })
	// Running from here: a restart now binds to the command id (and fails
	// the task as lost if the agent never got it), as it does from ready.
	s.transition(e, Running)
	cmd, err := s.cfg.Link.Start(ctx, agent, ports.CommandSpec{
		Command: argv[0], Args: argv[1:], WorkingDir: dir, Env: env, Timeout: e.manifest.Lifecycle.Timeout,
		// No session type: the run is the task's, not a session the
		// session reconciler would kill as unknown after a restart.
		PermissionPrompts: e.manifest.Claude != nil && !e.manifest.Claude.SkipPermissions,
		InjectEndpoints:   endpoints,
	}, ports.StartOptions{CommandID: commandID, Detached: true, OnOutput: s.onOutput(e)})
	if err != nil {
		return nil, ReasonAgentLost, err
	}
	return cmd, "", nil
}

// runWatch is what the output of a run tells.
type runWatch struct {
	mu         sync.Mutex
	parser     *claudefeed.Parser
	lastOutput time.Time
	result     bool
	resultErr  bool
	resultAt   time.Time
	// stderr is the end of what the run wrote on stderr, for the error of
	// a run that fails (its last line says why, as a shell's would).
	stderr []byte
}

// maxStderrTail bounds runWatch.stderr.
const maxStderrTail = 4 << 10

// lastLine is the last non-empty line of b.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
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
		if c.Stream == ports.StreamStderr {
			w.stderr = append(w.stderr, c.Data...)
			if n := len(w.stderr); n > maxStderrTail {
				w.stderr = append(w.stderr[:0], w.stderr[n-maxStderrTail:]...)
			}
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
			text := ev.Text
			if ev.Kind == claudefeed.KindResult && text == "" {
				text = ev.Result // the result's text is what a feed shows of it
			}
			e.events.add(EventActivity, ActivityData{Kind: string(ev.Kind), Text: text, ToolName: ev.ToolName, IsError: ev.IsError, CostUSD: ev.CostUSD})
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
		s.restoreInjected(e)
	}
	// The run's secrets end with it (a stopping server forgets them anyway).
	defer s.forgetInjected(e)
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
	var idled, lingered, spent bool
	for {
		select {
		case <-cmd.Done():
			r := cmd.Result()
			if r.Error == ports.ErrCommandLost.Error() || r.Error == ports.ErrAgentGone.Error() {
				return RunEnd{}, errors.New(r.Error)
			}
			code := r.ExitCode
			// The run is over: no tool is in use any more.
			s.update(e, func(rec *ports.TaskRecord) {
				rec.ExitCode = &code
				rec.Progress.Activity, rec.Progress.CurrentTool = "idle", ""
			})
			w.mu.Lock()
			end := RunEnd{Kind: kind, ExitCode: code, ResultSeen: w.result, ResultIsError: w.resultErr, TimedOut: r.TimedOut, IdleTimedOut: idled,
				Error: r.Error, Stderr: lastLine(w.stderr), Result: w.parser.Summary().Result, BudgetSpent: spent}
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
			if s.injectedUsage(e) && !spent {
				spent = true
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
		s.log.WarnContext(ctx, "task environment not destroyed", "task_id", e.rec.ID, "environment", name, "err", err)
	}
}

func clipText(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "…"
	}
	return s
}

// envLabels are the labels a task's environment carries: the task's, so
// that a token scoped to them reaches its agent and sessions too; each one
// an environment may not carry (a value too long for it, a reserved key)
// is left out, and past environment.MaxLabels the rest (by key), so the
// task still runs (a scope's labels always qualify, but for a manifest of
// more labels than an environment takes).
func envLabels(labels map[string]string) map[string]string {
	var out map[string]string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if len(out) == environment.MaxLabels {
			break
		}
		if environment.CheckLabels(map[string]string{k: labels[k]}) != nil {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = labels[k]
	}
	return out
}
