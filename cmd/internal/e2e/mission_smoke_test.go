package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
)

// TestMissionCompletesEndToEnd is the smallest whole walk: aiwg serve (fake)
// registers us, dispatches `echo`, and hears assigned → started → completed.
func TestMissionCompletesEndToEnd(t *testing.T) {
	fake, err := fakeaiwg.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	s := startServer(t, 1, "", "AIWG_SERVE_ENDPOINT="+fake.URL())
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if _, err := fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.Event == "executor.resync" }); err != nil {
		t.Fatalf("no resync: %v\n%s", err, s.Log())
	}
	body, _ := json.Marshal(map[string]any{"mission_id": "m-smoke-1", "objective": "echo hello from the mission"})
	req, _ := http.NewRequest(http.MethodPost, s.RESTURL+"/api/v1/sessions/sess-1/dispatch", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+fake.ExecutorToken())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var acc map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&acc)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("dispatch: %d %v", resp.StatusCode, acc)
	}
	done, err := fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool {
		return f.MissionID == "m-smoke-1" && (f.Event == "mission.completed" || f.Event == "mission.failed")
	})
	if err != nil {
		t.Fatalf("no end: %v\n%s", err, s.Log())
	}
	var seq []string
	for _, f := range fake.Frames() {
		// mission.progress may come with the first output; the contract allows it.
		if f.MissionID == "m-smoke-1" && f.Event != "mission.progress" {
			seq = append(seq, f.Event)
		}
	}
	if done.Event != "mission.completed" || fmt.Sprint(seq) != "[mission.assigned mission.started mission.completed]" {
		t.Fatalf("events %v, last %+v", seq, done.Data)
	}
	if s, _ := done.Data["summary"].(string); !bytes.Contains([]byte(s), []byte("hello from the mission")) || done.Data["exit_code"] != float64(0) {
		t.Fatalf("completed data %+v", done.Data)
	}
}
