package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// Input for a command that never reads it must not freeze its agent: the
// agent's receive loop also carries every other command and every kill.
func TestUnreadStdinDoesNotFreezeTheAgent(t *testing.T) {
	s := startServer(t, 1, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	started, err := s.Client().StartCommandWithResponse(ctx, "host-01", restapi.ExecRequest{Command: "sleep", Args: ptr([]string{"120"})})
	if err != nil || started.JSON202 == nil {
		t.Fatalf("start: %v %s", err, started.Body)
	}
	id := started.JSON202.CommandId
	chunk := strings.Repeat("x", 200<<10) // far beyond a pipe's 64 KiB
	for range 3 {
		r, err := s.Client().WriteCommandStdinWithResponse(ctx, id, restapi.StdinRequest{Data: &chunk})
		if err != nil || r.StatusCode() >= 300 {
			t.Fatalf("stdin: %v %d %s", err, r.StatusCode(), r.Body)
		}
	}
	execCtx, execCancel := context.WithTimeout(ctx, 20*time.Second)
	defer execCancel()
	exe, err := s.Client().ExecCommandWithResponse(execCtx, "host-01", restapi.ExecRequest{Command: "echo", Args: ptr([]string{"alive"})})
	if err != nil || exe.JSON200 == nil || !strings.Contains(exe.JSON200.Stdout, "alive") {
		t.Fatalf("the agent froze behind unread input: %v %s", err, func() []byte {
			if exe != nil {
				return exe.Body
			}
			return nil
		}())
	}
	if k, err := s.Client().KillCommandWithResponse(ctx, id); err != nil || k.StatusCode() >= 300 {
		t.Fatalf("kill: %v %v", err, k.Status())
	}
}
