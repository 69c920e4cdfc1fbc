package task

import (
	"context"
	"io"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// Fakes of what the task use case reaches through ports, recording what
// was asked of them.

type fakeWorkspace struct{ staged, collected atomic.Int32 }

func (w *fakeWorkspace) Stage(context.Context, string, ports.TaskRepository, string) (string, error) {
	w.staged.Add(1)
	return "base123", nil
}
func (w *fakeWorkspace) Tree(context.Context, string) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("tar")), nil
}
func (w *fakeWorkspace) Collect(_ context.Context, _ string, tree io.Reader, _ string, _ []string) ([]ports.Artifact, error) {
	_, _ = io.Copy(io.Discard, tree)
	w.collected.Add(1)
	return []ports.Artifact{{Name: "changes.patch", Size: 1}}, nil
}
func (w *fakeWorkspace) Open(string, string) (io.ReadCloser, error) {
	return nil, ports.ErrArtifactNotFound
}
func (w *fakeWorkspace) Remove(string) error { return nil }

type fakeEnvs struct {
	mu               sync.Mutex
	envs             map[string]environment.Environment
	created, deleted int
	// requests are the create requests, in order.
	requests []environment.Request
}

func (f *fakeEnvs) Create(_ context.Context, req environment.Request) (environment.Environment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.envs[req.Name]; ok {
		return environment.Environment{}, ports.ErrEnvExists
	}
	f.created++
	f.requests = append(f.requests, req)
	e := environment.Environment{Name: req.Name, Runtime: req.Runtime, State: environment.StateReady, AgentID: req.Name}
	f.envs[req.Name] = e
	return e, nil
}
func (f *fakeEnvs) Get(name string) (environment.Environment, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.envs[name]
	return e, ok
}
func (f *fakeEnvs) Delete(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.envs[name]; !ok {
		return ports.ErrEnvNotFound
	}
	f.deleted++
	delete(f.envs, name)
	return nil
}

type fakeFiles struct{ ports.AgentFiles }

func (fakeFiles) WriteArchive(_ context.Context, _, _ string, r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	return err
}
func (fakeFiles) WriteFile(_ context.Context, _, _ string, _ fs.FileMode, r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	return err
}
func (fakeFiles) ListFiles(context.Context, string, string) (ports.FileListing, error) {
	return ports.FileListing{Path: "/w/workspace"}, nil
}
func (fakeFiles) ReadArchive(context.Context, string, string) (ports.FileReader, error) {
	return readerOf("tar"), nil
}

type sizedReader struct{ io.Reader }

func (sizedReader) Close() error { return nil }
func (sizedReader) Size() int64  { return -1 }

func readerOf(s string) ports.FileReader { return sizedReader{strings.NewReader(s)} }

type noSecrets struct{}

func (noSecrets) Resolve(string, string) (string, bool, error) { return "", false, nil }

type seq struct{ n atomic.Int32 }

func (s *seq) NewID() string { return "id" + string(rune('a'+s.n.Add(1))) }

// A server that stopped in any state continues each task from its
// checkpoint: staging and provisioning are redone (a left-over environment
// replaced), a run is never started twice (bound again when its command id
// was stored), and it ends with its real outcome.
func TestEveryStateContinuesAfterARestart(t *testing.T) {
	const manifest = "repository: {url: /r}\ncommand: {argv: [\"true\"]}\nenvironment: {runtime: host}\n"
	for _, c := range []struct {
		state       State
		commandID   bool // a command id was stored before the stop
		kept        bool // the agent still has that command
		want        State
		starts      int
		attaches    int
		leftoverEnv bool
	}{
		{state: Pending, want: Completed, starts: 1},
		{state: Staging, want: Completed, starts: 1},
		{state: Provisioning, want: Completed, starts: 1, leftoverEnv: true},
		{state: Ready, want: Completed, starts: 1, leftoverEnv: true},
		{state: Ready, commandID: true, kept: true, want: Completed, attaches: 1, leftoverEnv: true},
		{state: Ready, commandID: true, kept: false, want: Failed, attaches: 1, leftoverEnv: true},
		{state: Running, commandID: true, kept: true, want: Completed, attaches: 1, leftoverEnv: true},
		{state: Running, commandID: true, kept: false, want: Failed, attaches: 1, leftoverEnv: true},
		{state: Completing, commandID: true, want: Completed, leftoverEnv: true},
	} {
		name := string(c.state)
		store := portsfake.NewTaskStore()
		now := time.Now()
		rec := ports.TaskRecord{ID: "t1", State: string(c.state), Manifest: manifest, CreatedAt: now,
			Phases: []ports.TaskPhase{{State: string(c.state), At: now}}, Environment: ports.TaskEnvironment{Name: EnvironmentName("t1"), Runtime: "host"}}
		if c.state == Ready || c.state == Running || c.state == Completing {
			rec.AgentID, rec.Workspace = EnvironmentName("t1"), "/w/workspace"
		}
		if c.commandID {
			rec.CommandID = "task-t1"
		}
		_ = store.Put(context.Background(), rec)
		envs := &fakeEnvs{envs: map[string]environment.Environment{}}
		if c.leftoverEnv {
			envs.envs[rec.Environment.Name] = environment.Environment{Name: rec.Environment.Name, State: environment.StateReady, AgentID: rec.Environment.Name}
		}
		// Every run exits 0; a command bound again exits 0 where the
		// agent kept it, and is lost where it did not.
		bound := (*portsfake.Command).Lose
		if c.kept {
			bound = func(c *portsfake.Command) { c.Exit(0) }
		}
		link := portsfake.NewLink(portsfake.WithScript(func(c *portsfake.Command) { c.Exit(0) }), portsfake.WithAttachScript(bound))
		ws := &fakeWorkspace{}
		s := New(Config{Store: store, Workspace: ws, Environments: envs, Files: fakeFiles{}, Link: link, Secrets: noSecrets{},
			Clock: clock.Wall{}, IDs: &seq{}, DefaultRuntime: "host"})
		if err := s.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get("t1"); err != nil {
			t.Fatalf("%s: not loaded: %v", name, err)
		}
		s.Resume()
		var got ports.TaskRecord
		testkit.Within(15*time.Second, func() bool { got, _ = s.Get("t1"); return State(got.State).Terminal() })
		s.Close()
		if State(got.State) != c.want {
			t.Errorf("%s (command id %v, kept %v): ended %s (%s %s), want %s", name, c.commandID, c.kept, got.State, got.Reason, got.Error, c.want)
		}
		if starts, attaches := len(link.Starts()), len(link.Attaches()); starts != c.starts || attaches != c.attaches {
			t.Errorf("%s: started %d, attached %d; want %d, %d", name, starts, attaches, c.starts, c.attaches)
		}
		if len(envs.envs) != 0 {
			t.Errorf("%s: environments left %v", name, envs.envs)
		}
		if stored, _ := store.Get(context.Background(), "t1"); stored.State != got.State {
			t.Errorf("%s: the checkpoint says %s, the task %s", name, stored.State, got.State)
		}
		if c.want == Completed && ws.collected.Load() != 1 {
			t.Errorf("%s: collected %d times", name, ws.collected.Load())
		}
	}
}

// gatedWorkspace holds every staging until the gate is closed, saying on
// entered that one waits.
type gatedWorkspace struct {
	fakeWorkspace
	entered chan struct{}
	gate    chan struct{}
}

func (w *gatedWorkspace) Stage(ctx context.Context, id string, repo ports.TaskRepository, dir string) (string, error) {
	select {
	case w.entered <- struct{}{}:
	default:
	}
	<-w.gate
	return w.fakeWorkspace.Stage(ctx, id, repo, dir)
}

// A task started twice while it runs — Submit's start and Resume's, when a
// task comes in while the server resumes its own — runs once (it ran twice:
// "illegal task transition", "command id already in use", then agent_lost).
func TestATaskStartedTwiceRunsOnce(t *testing.T) {
	const manifest = "repository: {url: /r}\ncommand: {argv: [\"true\"]}\nenvironment: {runtime: host}\n"
	store := portsfake.NewTaskStore()
	now := time.Now()
	_ = store.Put(context.Background(), ports.TaskRecord{ID: "t1", State: string(Pending), Manifest: manifest, CreatedAt: now,
		Phases: []ports.TaskPhase{{State: string(Pending), At: now}}, Environment: ports.TaskEnvironment{Name: EnvironmentName("t1"), Runtime: "host"}})
	link := portsfake.NewLink(portsfake.WithScript(func(c *portsfake.Command) { c.Exit(0) }))
	ws := &gatedWorkspace{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	s := New(Config{Store: store, Workspace: ws, Environments: &fakeEnvs{envs: map[string]environment.Environment{}}, Files: fakeFiles{},
		Link: link, Secrets: noSecrets{}, Clock: clock.Wall{}, IDs: &seq{}, DefaultRuntime: "host"})
	defer s.Close()
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	e := s.tasks["t1"]
	s.mu.Unlock()
	s.start(e)
	testkit.Receive(t, 15*time.Second, ws.entered, "the first start did not reach staging")
	s.start(e) // the first is held in staging
	close(ws.gate)
	var got ports.TaskRecord
	if !testkit.Within(15*time.Second, func() bool { got, _ = s.Get("t1"); return State(got.State).Terminal() }) {
		t.Fatalf("not ended: %+v", got)
	}
	if State(got.State) != Completed || ws.staged.Load() != 1 || len(link.Starts()) != 1 {
		t.Fatalf("ended %s (%s), staged %d times, started %d; want completed, once each", got.State, got.Error, ws.staged.Load(), len(link.Starts()))
	}
}

// A server that stops leaves a running task's process alone (the next
// start binds to it); a cancel kills it.
func TestStoppingTheServerLeavesTheRunAlone(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		store := portsfake.NewTaskStore()
		link := portsfake.NewLink() // the run goes on until killed
		kills := func() (n int) {
			for _, c := range link.Commands() {
				k, _ := c.Killed()
				n += k
			}
			return n
		}
		s := New(Config{Store: store, Workspace: &fakeWorkspace{}, Environments: &fakeEnvs{envs: map[string]environment.Environment{}},
			Files: fakeFiles{}, Link: link, Secrets: noSecrets{}, Clock: clock.Wall{}, IDs: &seq{}, DefaultRuntime: "host"})
		sub, err := s.Submit(context.Background(), []byte("command: {argv: [sleep, \"100\"]}\n"), "")
		if err != nil {
			t.Fatal(err)
		}
		in := func(st State) func() bool {
			return func() bool { got, _ := s.Get(sub.Task.ID); return got.State == string(st) }
		}
		testkit.Within(15*time.Second, in(Running))
		if cancel {
			_, _ = s.Cancel(context.Background(), sub.Task.ID)
			testkit.Within(15*time.Second, in(Cancelled))
		}
		s.Close()
		got, _ := store.Get(context.Background(), sub.Task.ID)
		switch {
		case !cancel && (kills() != 0 || got.State != string(Running)):
			t.Errorf("server stop: %d kills, checkpoint %s; want the run left alone, running", kills(), got.State)
		case cancel && (kills() == 0 || got.State != string(Cancelled)):
			t.Errorf("cancel: %d kills, checkpoint %s; want it killed and cancelled", kills(), got.State)
		}
	}
}
