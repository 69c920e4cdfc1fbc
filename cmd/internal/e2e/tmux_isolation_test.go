package e2e

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// Two host agents each keep a session named "dev" in tmux: each runs its
// own (no attaching to the other's), and killing one leaves the other.
func TestHostAgentsDoNotShareTmux(t *testing.T) {
	s := startServer(t, 2, "")
	bg := restapi.SessionBackground
	one := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &bg, Name: ptr("dev"), Command: "sh",
		Args: ptr([]string{"-c", "echo first-is-$AGENT_ID; sleep 600"})})
	two := createSession(t, s, "host-02", restapi.CreateSessionRequest{Type: &bg, Name: ptr("dev"), Command: "sh",
		Args: ptr([]string{"-c", "echo second-is-$AGENT_ID; sleep 600"})})
	output := func(id string) string {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		resp, err := s.Client().GetSessionOutput(ctx, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	eventually(t, patience, "both sessions to print", func() bool {
		return strings.Contains(output(one.SessionId), "first-is-host-01") && strings.Contains(output(two.SessionId), "second-is-host-02")
	})
	if o := output(two.SessionId); strings.Contains(o, "first-is") {
		t.Fatalf("host-02's dev shows host-01's session: %q", o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if r, err := s.Client().KillSessionWithResponse(ctx, two.SessionId); err != nil || r.StatusCode() >= 300 {
		t.Fatalf("kill: %v %v", err, r.Status())
	}
	eventually(t, patience, "host-02's session to end", func() bool {
		got, err := s.Client().GetSessionWithResponse(ctx, two.SessionId)
		return err == nil && got.JSON200 != nil && got.JSON200.State != restapi.SessionStateSessionRunning
	})
	time.Sleep(500 * time.Millisecond)
	got, err := s.Client().GetSessionWithResponse(ctx, one.SessionId)
	if err != nil || got.JSON200 == nil || got.JSON200.State != restapi.SessionStateSessionRunning {
		t.Fatalf("host-01's dev after host-02's was killed: %v %s", err, got.Body)
	}
}
