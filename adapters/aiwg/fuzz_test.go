package aiwg

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// FuzzInboundFrame feeds arbitrary frames to the inbound handler: it must
// never panic, and must reach the hub only for a well-formed HITL answer.
func FuzzInboundFrame(f *testing.F) {
	for _, s := range []string{
		`{"event":"mission.hitl_responded","data":{"hitl_id":"h1","text":"yes"}}`,
		`{"event":"mission.hitl_responded","data":{"hitl_id":"h1","text":""}}`,
		`{"event":"mission.hitl_responded","data":{"hitl_id":"h1"}}`,
		`{"event":"mission.hitl_responded","data":null}`,
		`{"event":"mission.hitl_responded","data":[1,2]}`,
		`{"event":"mission.hitl_responded"}`,
		`{"event":"executor.ping"}`, `{"event":7}`, `{}`, `[]`, `null`, `"x"`, ``, `{`, "\xff",
	} {
		f.Add([]byte(s))
	}
	hub := &stubHub{}
	c := New(Config{Endpoint: "http://127.0.0.1:1", Hub: hub})
	f.Fuzz(func(t *testing.T, raw []byte) {
		before := hub.calls()
		c.handleInbound(context.Background(), raw)
		called := hub.calls() > before

		var fr struct {
			Event string `json:"event"`
			Data  struct {
				HITLID *string `json:"hitl_id"`
				Text   *string `json:"text"`
			} `json:"data"`
		}
		valid := json.Unmarshal(raw, &fr) == nil && ports.EventType(fr.Event) == ports.EventHITLResponded &&
			fr.Data.HITLID != nil && *fr.Data.HITLID != "" && fr.Data.Text != nil
		if called && !valid {
			t.Fatalf("hub called for %q", raw)
		}
		if valid && !called {
			t.Fatalf("hub not called for %q", raw)
		}
	})
}
