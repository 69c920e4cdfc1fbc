package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// Input for a command that never reads it must not freeze its agent: the
// agent's receive loop also carries every other command and every kill.
func TestUnreadStdinDoesNotFreezeTheAgent(t *testing.T) {
	s := startServer(t, 1, "")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
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

// Ended sessions hold no file descriptors in agentic-mgmt.
func TestEndedSessionsHoldNoFiles(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir)
	sessionFiles := func() int {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", s.Cmd.Process.Pid))
		n := 0
		for _, fd := range fds {
			if target, err := os.Readlink(fd); err == nil && strings.HasPrefix(target, filepath.Join(dataDir, "sessions")) {
				n++
			}
		}
		return n
	}
	bg := restapi.SessionBackground
	var ids []string
	for i := range 12 {
		sess := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &bg, Name: ptr(fmt.Sprintf("short-%d", i)), Command: "echo",
			Args: ptr([]string{"done"})})
		ids = append(ids, sess.SessionId)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	eventually(t, patience, "the sessions to end", func() bool {
		for _, id := range ids {
			got, err := s.Client().GetSessionWithResponse(ctx, id)
			if err != nil || got.JSON200 == nil || got.JSON200.State == restapi.SessionStateSessionRunning || got.JSON200.State == restapi.SessionStateSessionStarting {
				return false
			}
		}
		return true
	})
	eventually(t, patience, "the ended sessions' files to close", func() bool { return sessionFiles() == 0 })
	// Their output is still there to read.
	resp, err := s.Client().GetSessionOutput(ctx, ids[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "done") {
		t.Fatalf("output after release: %q", b)
	}
}
