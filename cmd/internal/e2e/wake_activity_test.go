package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// lastActivityKind is what last used environment name, as the REST API
// shows it ("" before anything did).
func lastActivityKind(t *testing.T, s *harness.Server, name string) string {
	t.Helper()
	got, err := s.Client().GetEnvironmentWithResponse(context.Background(), name)
	if err != nil || got.JSON200 == nil {
		t.Fatalf("get %s: %v %s", name, err, got.Body)
	}
	if k := got.JSON200.LastActivityKind; k != nil {
		return *k
	}
	return ""
}

// Every entry point through which work reaches an agent tells its
// environment it is used, through the real server and agent (the host
// runtime, which cannot hibernate: what is shown here is that the work
// reaches the environment's idle clock; waking is shown on engines that
// hibernate): an exec, a file call, a session's creation and its output,
// and a viewer joining it over /ws.
func TestWorkOnAnEnvironmentIsItsActivity(t *testing.T) {
	s := startServer(t, 0, t.TempDir())
	const name = "act-1"
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", name) })
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "host", name); code != 0 {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	c := s.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 4*patience)
	defer cancel()
	waitKind := func(what, want string) {
		t.Helper()
		var got string
		if !testkit.Within(patience, func() bool { got = lastActivityKind(t, s, name); return got == want }) {
			t.Fatalf("%s: last activity %q, want %q", what, got, want)
		}
	}

	// In /tmp: the host agent's commands may run as another user, who
	// cannot look into the test's own temporary directory.
	flag := filepath.Join("/tmp", fmt.Sprintf("agentic-e2e-activity-%d", os.Getpid()))
	_ = os.Remove(flag)
	t.Cleanup(func() { _ = os.Remove(flag) })
	// A session that writes only once the flag exists (no prompt, no
	// output before): its creation is a use of kind session.
	sess, err := c.CreateSessionWithResponse(ctx, name, restapi.CreateSessionRequest{
		Command: "sh", Args: ptr([]string{"-c", fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done; echo flag-seen; exec sleep 600", flag)}),
		Type: ptr(restapi.SessionBackground), Pty: ptr(false),
	})
	if err != nil || sess.JSON201 == nil {
		t.Fatalf("create session: %v %s", err, sess.Body)
	}
	id := sess.JSON201.SessionId
	waitKind("session created", "session")

	exe, err := c.ExecCommandWithResponse(ctx, name, restapi.ExecRequest{Command: "true"})
	if err != nil || exe.JSON200 == nil {
		t.Fatalf("exec: %v %s", err, exe.Body)
	}
	waitKind("exec", "exec")

	files, err := c.ListFilesWithResponse(ctx, name, &restapi.ListFilesParams{Path: "/"})
	if err != nil || files.JSON200 == nil {
		t.Fatalf("list files: %v %s", err, files.Body)
	}
	waitKind("file listing", "files")

	// The session's output (after every other use so far) touches it.
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitKind("session output", "session")

	// A viewer joining over /ws: the session writes nothing more.
	v := dialWS(t, s, s.Token)
	v.send(map[string]any{"type": "join_session", "id": "j1", "session_id": id, "role": "observer", "replay_from": 0})
	v.waitOutput(id, regexp.MustCompile("flag-seen"))
	waitKind("viewer joined", "viewer")
}
