package rest

import (
	"encoding/json"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// TestTaskUsageIsShown: a task's usage through its injected secrets is in
// its JSON under usage (every counter, the cost as recorded), and a task
// that made no such request has no usage at all.
func TestTaskUsageIsShown(t *testing.T) {
	rec := ports.TaskRecord{ID: "t1", Name: "n", State: "failed", Reason: "budget_exhausted", Usage: ports.TaskUsage{
		Requests: 3, InputTokens: 11, OutputTokens: 22, CacheCreationInputTokens: 5, CacheReadInputTokens: 7, CostUSD: 0.0315,
		BytesSent: 1234, BytesReceived: 56789,
	}}
	b, err := json.Marshal(toTask(rec))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Reason string         `json:"reason"`
		Usage  map[string]any `json:"usage"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"requests": 3.0, "input_tokens": 11.0, "output_tokens": 22.0,
		"cache_creation_input_tokens": 5.0, "cache_read_input_tokens": 7.0, "cost_usd": 0.0315,
		"bytes_sent": 1234.0, "bytes_received": 56789.0}
	if got.Reason != "budget_exhausted" || len(got.Usage) != len(want) {
		t.Fatalf("task JSON %s", b)
	}
	for k, v := range want {
		if got.Usage[k] != v {
			t.Fatalf("usage.%s = %v, want %v (task JSON %s)", k, got.Usage[k], v, b)
		}
	}

	b, err = json.Marshal(toTask(ports.TaskRecord{ID: "t2", Name: "n", State: "completed"}))
	if err != nil {
		t.Fatal(err)
	}
	var none map[string]any
	if err := json.Unmarshal(b, &none); err != nil {
		t.Fatal(err)
	}
	if _, ok := none["usage"]; ok {
		t.Fatalf("a task without injected requests shows usage: %s", b)
	}
}
