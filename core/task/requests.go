package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/core/access"
	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

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
	if err := s.checkInjected(m); err != nil {
		return Manifest{}, err
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
	return s.SubmitScoped(ctx, doc, idempotencyKey, nil)
}

// SubmitScoped is Submit for a caller with a label scope (core/access):
// the task carries the scope's labels over its manifest's, and so does the
// environment it runs in. A task of the same key or id outside the scope
// is ErrTaskConflict, and never returned.
func (s *Service) SubmitScoped(ctx context.Context, doc []byte, idempotencyKey string, scope map[string]string) (Submitted, error) {
	m, err := s.Check(doc)
	if err != nil {
		return Submitted{}, err
	}
	m.Metadata.Labels = access.WithScope(scope, m.Metadata.Labels)
	sum := sha256.Sum256(doc)
	hash := hex.EncodeToString(sum[:])
	runtime := m.Environment.Runtime
	if runtime == "" {
		// Asked outside the lock: the server's choice may look for runtimes.
		runtime = s.cfg.DefaultRuntime
		if s.cfg.DefaultRuntimeOf != nil {
			runtime = s.cfg.DefaultRuntimeOf()
		}
	}
	s.mu.Lock()
	for _, e := range s.tasks {
		same := (idempotencyKey != "" && e.rec.IdempotencyKey == idempotencyKey) || (m.Metadata.ID != "" && e.rec.ID == m.Metadata.ID)
		if !same {
			continue
		}
		rec := e.rec
		s.mu.Unlock()
		if !access.InScope(scope, rec.Labels) {
			return Submitted{}, fmt.Errorf("%w: the idempotency key or metadata.id is taken", ports.ErrTaskConflict)
		}
		if rec.ManifestSHA256 != hash {
			return Submitted{}, fmt.Errorf("%w: task %s", ports.ErrTaskConflict, rec.ID)
		}
		return Submitted{Task: rec.Clone()}, nil
	}
	id := m.Metadata.ID
	if id == "" {
		id = s.cfg.IDs.NewID()
	}
	now := s.cfg.Clock.Now()
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
	submitted := e.rec.Clone()
	s.mu.Unlock()
	s.startFrom(ctx, e)
	return Submitted{Task: submitted, Created: true}, nil
}

// EnvironmentName is the environment (and agent) of a task: derived from
// its id, within the names runtimes take.
func EnvironmentName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "task-" + hex.EncodeToString(sum[:8])
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
	return e.rec.Clone(), nil
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
		tasks = append(tasks, r.Clone())
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
