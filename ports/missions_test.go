package ports

import (
	"reflect"
	"testing"
)

// A clone shares nothing with its original: changing every part of one
// that refers to memory leaves the other as it was.
func TestMissionCloneSharesNothing(t *testing.T) {
	code := 3
	mk := func() Mission {
		return Mission{
			ID:       "m-1",
			Filter:   MissionFilter{Capabilities: []string{"git"}},
			Metadata: []byte(`{"a":1}`),
			HITL:     &HITLRequest{ID: "h", Permission: &PermissionRequest{ToolName: "Bash"}},
			ExitCode: &code,
			LastEventData: map[string]any{
				"nested": map[string]any{"k": "v"},
				"list":   []any{"x", map[string]any{"k": "v"}},
			},
			Timeline: []TimelineEntry{{Event: EventAssigned}},
		}
	}
	orig, want := mk(), mk()
	c := orig.Clone()
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("clone differs from its original:\n%+v\n%+v", c, orig)
	}
	c.Filter.Capabilities[0] = "changed"
	c.Metadata[0] = 'X'
	c.HITL.ID = "changed"
	c.HITL.Permission.ToolName = "changed"
	*c.ExitCode = 9
	c.LastEventData["nested"].(map[string]any)["k"] = "changed"
	c.LastEventData["list"].([]any)[1].(map[string]any)["k"] = "changed"
	c.LastEventData["added"] = true
	c.Timeline[0].Note = "changed"
	if !reflect.DeepEqual(orig, want) {
		t.Fatalf("changing the clone changed the original:\n%+v\nwant\n%+v", orig, want)
	}
}
