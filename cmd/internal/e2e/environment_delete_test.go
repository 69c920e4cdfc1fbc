package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// Deleting an environment retires its agent at once: it leaves the agent
// list (no grace period as "disconnected"), its session ends, and the
// mission that ran there fails with reason environment_deleted.
func TestDeletingAnEnvironmentEndsWhatRanThere(t *testing.T) {
	e := newContract(t, copts{})
	s := e.s()
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", "doomed") })
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "host", "doomed"); code != 0 {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	bg := restapi.SessionBackground
	sess := createSession(t, s, "doomed", restapi.CreateSessionRequest{Type: &bg, Name: ptr("sleeper"), Command: "sleep", Args: ptr([]string{"6123"})})
	e.dispatch("m-doomed", "sleep 6124", "executor_filter", map[string]any{"agent_id": "doomed"})
	e.waitEvent("m-doomed", evStarted, patience)

	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "rm", "doomed"); code != 0 {
		t.Fatalf("rm: %d %q %q", code, out, errOut)
	}
	// At once: the answer to rm came after the agent was forgotten.
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	a, err := s.Client().GetAgentWithResponse(ctx, "doomed")
	if err != nil || a.StatusCode() != http.StatusNotFound {
		t.Fatalf("agent after rm: %v %d %s", err, a.StatusCode(), a.Body)
	}

	end := e.waitEnd("m-doomed", patience)
	if end.Event != evFailed || end.Data["reason"] != "environment_deleted" {
		t.Fatalf("mission ended with %s %v, want mission.failed reason environment_deleted", end.Event, end.Data)
	}
	if st := e.missionState("m-doomed"); st != "failed" {
		t.Fatalf("stored mission state %q", st)
	}
	eventually(t, patience, "the session on the deleted environment to end", func() bool {
		got, err := s.Client().GetSessionWithResponse(ctx, sess.SessionId)
		return err == nil && got.JSON200 != nil && got.JSON200.State != restapi.SessionStateSessionRunning && got.JSON200.State != restapi.SessionStateSessionStarting
	})
	// Not only in the server's books: the processes are gone too, the one
	// kept in tmux included.
	eventually(t, patience, "the environment's processes to end", func() bool {
		return !running("\x006123\x00") && !running("\x006124\x00") && !running(" 6124\x00")
	})
}

// running reports whether a process whose command line contains cmdline
// (arguments NUL-separated, as in /proc) exists.
func running(cmdline string) bool {
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), cmdline) {
			return true
		}
	}
	return false
}
