package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// TaskStore keeps each task in a file of its own, <dir>/<id>.json, written
// atomically (temp file, fsync, rename, fsync of the directory): a Put costs
// the same with ten tasks stored or ten thousand.
type TaskStore struct {
	dir string
}

var _ ports.TaskStore = (*TaskStore)(nil)

// taskIDPattern is what a task id may be: it names a file.
var taskIDPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,127}$`)

// NewTaskStore opens (making it) the task directory.
func NewTaskStore(dir string) (*TaskStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &TaskStore{dir: dir}, nil
}

func (s *TaskStore) path(id string) (string, error) { return taskFile(s.dir, id, ".json") }

// taskFile is a task's file in dir: the id names it, so it is checked.
func taskFile(dir, id, ext string) (string, error) {
	if !taskIDPattern.MatchString(id) || strings.Contains(id, "..") {
		return "", fmt.Errorf("%w: bad id %q", ports.ErrTaskNotFound, id)
	}
	return filepath.Join(dir, id+ext), nil
}

// Put implements ports.TaskStore.
func (s *TaskStore) Put(ctx context.Context, t ports.TaskRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := s.path(t.ID)
	if err != nil {
		return err
	}
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	if err := fsatomic.WriteFile(p, b, 0o600); err != nil {
		return fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	return nil
}

// Get implements ports.TaskStore.
func (s *TaskStore) Get(_ context.Context, id string) (ports.TaskRecord, error) {
	p, err := s.path(id)
	if err != nil {
		return ports.TaskRecord{}, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return ports.TaskRecord{}, fmt.Errorf("%w: %s", ports.ErrTaskNotFound, id)
	}
	if err != nil {
		return ports.TaskRecord{}, err
	}
	var t ports.TaskRecord
	if err := json.Unmarshal(b, &t); err != nil {
		return ports.TaskRecord{}, fmt.Errorf("task %s: %w", id, err)
	}
	return t, nil
}

// List implements ports.TaskStore. A file that does not parse (written by
// something else) is skipped, not fatal.
func (s *TaskStore) List(ctx context.Context) ([]ports.TaskRecord, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	out := make([]ports.TaskRecord, 0, len(ents))
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if t, err := s.Get(ctx, id); err == nil {
			out = append(out, t)
		}
	}
	return out, nil
}

// Delete implements ports.TaskStore.
func (s *TaskStore) Delete(_ context.Context, id string) error {
	p, err := s.path(id)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return fsatomic.SyncDir(s.dir)
}
