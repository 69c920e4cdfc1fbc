package portstest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// RunTaskEventLogSuite is the conformance suite of ports.TaskEventLog;
// open returns a log kept in dir (the same dir again is the log reopened).
func RunTaskEventLogSuite(t *testing.T, open func(t *testing.T, dir string) ports.TaskEventLog) {
	t.Run("AppendAndReadBackInOrder", func(t *testing.T) {
		dir := t.TempDir()
		l := open(t, dir)
		for i := int64(1); i <= 50; i++ {
			if err := l.Append("t1", ports.TaskEvent{ID: i, Type: "output", Data: fmt.Appendf(nil, `{"offset":%d,"data":"x"}`, i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Append("t2", ports.TaskEvent{ID: 1, Type: "state", Data: []byte(`{"state":"pending"}`)}); err != nil {
			t.Fatal(err)
		}
		got, err := open(t, dir).Read("t1")
		if err != nil || len(got) != 50 {
			t.Fatalf("reopened: %d events, %v", len(got), err)
		}
		for i, ev := range got {
			if ev.ID != int64(i+1) || ev.Type != "output" || !bytes.Contains(ev.Data, []byte(`"data":"x"`)) {
				t.Fatalf("event %d: %+v", i, ev)
			}
		}
		if other, _ := l.Read("t2"); len(other) != 1 || other[0].Type != "state" {
			t.Fatalf("another task's events: %+v", other)
		}
	})
	t.Run("NeverSeenIsEmpty", func(t *testing.T) {
		if got, err := open(t, t.TempDir()).Read("nobody"); err != nil || len(got) != 0 {
			t.Fatalf("%v %v", got, err)
		}
	})
	t.Run("HostileIDsAreRefused", func(t *testing.T) {
		l := open(t, t.TempDir())
		for _, id := range []string{"", "../x", "a/b", ".."} {
			if err := l.Append(id, ports.TaskEvent{ID: 1, Type: "state", Data: []byte(`{}`)}); !errors.Is(err, ports.ErrTaskNotFound) {
				t.Errorf("append %q: %v", id, err)
			}
		}
	})
	t.Run("DataMustBeJSON", func(t *testing.T) {
		if err := open(t, t.TempDir()).Append("t1", ports.TaskEvent{ID: 1, Type: "state", Data: []byte(`{`)}); err == nil {
			t.Fatal("accepted data that is not JSON")
		}
	})
	t.Run("ACutLastLineIsLeftOut", func(t *testing.T) {
		dir := t.TempDir()
		l := open(t, dir)
		for i := int64(1); i <= 3; i++ {
			_ = l.Append("t1", ports.TaskEvent{ID: i, Type: "state", Data: []byte(`{"state":"x"}`)})
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		if len(files) != 1 {
			t.Fatalf("files: %v", files)
		}
		f, _ := os.OpenFile(files[0], os.O_WRONLY|os.O_APPEND, 0)
		_, _ = f.WriteString(`{"id":4,"type":"state","da`)
		_ = f.Close()
		got, err := open(t, dir).Read("t1")
		if err != nil || len(got) != 3 {
			t.Fatalf("after a cut line: %d %v", len(got), err)
		}
	})
}
