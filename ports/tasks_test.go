package ports

import (
	"reflect"
	"testing"
)

// A task record's clone shares nothing with its original.
func TestTaskRecordCloneSharesNothing(t *testing.T) {
	code := 1
	mk := func() TaskRecord {
		return TaskRecord{ID: "t-1", Labels: map[string]string{"k": "v"}, Phases: []TaskPhase{{State: "pending"}},
			ExitCode: &code, Artifacts: []Artifact{{Name: "a"}}}
	}
	orig, want := mk(), mk()
	c := orig.Clone()
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("clone differs from its original:\n%+v\n%+v", c, orig)
	}
	c.Labels["k"] = "changed"
	c.Phases[0].State = "changed"
	*c.ExitCode = 9
	c.Artifacts[0].Name = "changed"
	if !reflect.DeepEqual(orig, want) {
		t.Fatalf("changing the clone changed the original:\n%+v\nwant\n%+v", orig, want)
	}
}
