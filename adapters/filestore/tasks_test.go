package filestore

import (
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

func TestTaskStoreConformance(t *testing.T) {
	portstest.RunTaskStoreSuite(t, func(t *testing.T, dir string) ports.TaskStore {
		s, err := NewTaskStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestTaskEventLogConformance(t *testing.T) {
	portstest.RunTaskEventLogSuite(t, func(t *testing.T, dir string) ports.TaskEventLog {
		l, err := NewTaskEventLog(dir)
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}
