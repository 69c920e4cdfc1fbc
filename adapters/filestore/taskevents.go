package filestore

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// TaskEventLog keeps each task's events in <dir>/<id>.jsonl, a JSON line
// an event, appended (O_APPEND) and not synced.
type TaskEventLog struct {
	dir string
}

var _ ports.TaskEventLog = (*TaskEventLog)(nil)

// NewTaskEventLog opens (making it) the directory.
func NewTaskEventLog(dir string) (*TaskEventLog, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &TaskEventLog{dir: dir}, nil
}

func (l *TaskEventLog) path(id string) (string, error) { return taskFile(l.dir, id, ".jsonl") }

// storedEvent is an event's line: Data as JSON, not base64.
type storedEvent struct {
	ID   int64           `json:"id"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// Append implements ports.TaskEventLog.
func (l *TaskEventLog) Append(taskID string, ev ports.TaskEvent) error {
	p, err := l.path(taskID)
	if err != nil {
		return err
	}
	if !json.Valid(ev.Data) {
		return fmt.Errorf("event %d of task %s: data is not JSON", ev.ID, taskID)
	}
	line, err := json.Marshal(storedEvent{ID: ev.ID, Type: ev.Type, Data: ev.Data})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	// One write of the whole line: appends never interleave.
	_, err = f.Write(append(line, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	return nil
}

// Read implements ports.TaskEventLog.
func (l *TaskEventLog) Read(taskID string) ([]ports.TaskEvent, error) {
	p, err := l.path(taskID)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ports.TaskEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var ev storedEvent
		// A line that does not parse can only be the last, cut by a crash.
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.ID <= 0 {
			break
		}
		out = append(out, ports.TaskEvent{ID: ev.ID, Type: ev.Type, Data: []byte(ev.Data)})
	}
	return out, nil
}
