package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// Issue 11, attack 10, against the real server: an operator (or a runaway
// orchestrator) cannot make one agent keep unbounded state: live sessions
// and REST background commands per agent have a limit answered with 429,
// and ended sessions are forgotten with their logs after the retention.
func TestStateStaysBoundedPerAgent(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir, "AGENTIC_SESSION_RETENTION=2s")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := s.Client()

	// Sessions: 128 live ones, the next refused with the limit named.
	bg := restapi.SessionBackground
	var sessions []string
	for i := range 128 {
		sess := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &bg, Name: ptr(fmt.Sprintf("live-%d", i)),
			Command: "sleep", Args: ptr([]string{"300"})})
		sessions = append(sessions, sess.SessionId)
	}
	over, err := c.CreateSessionWithResponse(ctx, "host-01", restapi.CreateSessionRequest{Type: &bg, Name: ptr("one-too-many"),
		Command: "sleep", Args: ptr([]string{"300"})})
	if err != nil {
		t.Fatal(err)
	}
	if over.StatusCode() != http.StatusTooManyRequests || errorCode(over.Body) != "too_many_sessions" || !strings.Contains(string(over.Body), "128") {
		t.Fatalf("session 129: %d %s", over.StatusCode(), over.Body)
	}
	for _, id := range sessions {
		if r, err := c.KillSessionWithResponse(ctx, id); err != nil || r.StatusCode() >= 300 {
			t.Fatalf("kill session %s: %v %v", id, err, r)
		}
	}

	// The limit counts every command the agent runs, sessions' too.
	eventually(t, patience, "the killed sessions' commands to end", func() bool {
		a, err := c.GetAgentWithResponse(ctx, "host-01")
		return err == nil && a.JSON200 != nil && a.JSON200.RunningCommands == 0
	})

	// REST background commands: 256 running, the next refused.
	var commands []string
	for range 256 {
		r, err := c.StartCommandWithResponse(ctx, "host-01", restapi.ExecRequest{Command: "sleep", Args: ptr([]string{"300"})})
		if err != nil || r.JSON202 == nil {
			t.Fatalf("start: %v %v", err, r)
		}
		commands = append(commands, r.JSON202.CommandId)
	}
	r, err := c.StartCommandWithResponse(ctx, "host-01", restapi.ExecRequest{Command: "sleep", Args: ptr([]string{"300"})})
	if err != nil {
		t.Fatal(err)
	}
	if r.StatusCode() != http.StatusTooManyRequests || errorCode(r.Body) != "too_many_commands" || !strings.Contains(string(r.Body), "256") {
		t.Fatalf("command 257: %d %s", r.StatusCode(), r.Body)
	}
	for _, id := range commands {
		if k, err := c.KillCommandWithResponse(ctx, id); err != nil || k.StatusCode() >= 300 {
			t.Fatalf("kill command %s: %v %v", id, err, k)
		}
	}
	// Once they end, there is room again.
	eventually(t, patience, "room for a command once the killed ones end", func() bool {
		r, err := c.StartCommandWithResponse(ctx, "host-01", restapi.ExecRequest{Command: "true"})
		return err == nil && r.JSON202 != nil
	})

	// Retention: an ended session and its log are gone after 2 s (and the
	// sweep that runs every second at that retention).
	ended := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &bg, Name: ptr("short"), Command: "echo", Args: ptr([]string{"done"})})
	logs := func() []string {
		m, _ := filepath.Glob(filepath.Join(dataDir, "sessions", "*"+ended.SessionId+"*"))
		return m
	}
	eventually(t, patience, "the session to end", func() bool {
		g, err := c.GetSessionWithResponse(ctx, ended.SessionId)
		return err == nil && g.JSON200 != nil && g.JSON200.State != restapi.SessionStateSessionRunning && g.JSON200.State != restapi.SessionStateSessionStarting
	})
	if len(logs()) == 0 {
		entries, _ := os.ReadDir(filepath.Join(dataDir, "sessions"))
		t.Fatalf("no log of session %s among %v: the test would not see it go", ended.SessionId, entries)
	}
	eventually(t, patience, "the ended session to be forgotten", func() bool {
		g, err := c.GetSessionWithResponse(ctx, ended.SessionId)
		return err == nil && g.StatusCode() == http.StatusNotFound
	})
	if left := logs(); len(left) != 0 {
		t.Fatalf("the forgotten session's log is still there: %v", left)
	}
}
