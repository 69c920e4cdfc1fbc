package e2e

import (
	"context"
	"io"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// readOutput reads a session's whole log over REST.
func readOutput(t *testing.T, s *harness.Server, id string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	resp, err := s.Client().GetSessionOutput(ctx, id, &restapi.GetSessionOutputParams{From: ptr(int64(0))})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("output of %s: %d %v", id, resp.StatusCode, err)
	}
	return b
}

func sessionState(t *testing.T, s *harness.Server, id string) restapi.SessionState {
	t.Helper()
	resp, err := s.Client().GetSessionWithResponse(context.Background(), id)
	if err != nil || resp.JSON200 == nil {
		t.Fatalf("get session %s: %v %s", id, err, resp.Body)
	}
	return resp.JSON200.State
}

var tickRE = regexp.MustCompile(`tick-(\d+)\r\n`)

// ticks checks the background session's lines are tick-0, tick-1, … each
// exactly once, and returns how many there are.
func ticks(t *testing.T, out []byte) int {
	t.Helper()
	m := tickRE.FindAllSubmatch(out, -1)
	for i, x := range m {
		if n, _ := strconv.Atoi(string(x[1])); n != i {
			t.Fatalf("line %d is tick-%d: lost or repeated output\n%q", i, n, out)
		}
	}
	return len(m)
}

func waitTicks(t *testing.T, s *harness.Server, id string, atLeast int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := ticks(t, readOutput(t, s, id))
		if n >= atLeast {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("background session %s has %d ticks, want %d", id, n, atLeast)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// typeUntil types line into the shell until its log matches want.
func typeUntil(t *testing.T, v *wsViewer, s *harness.Server, id, line string, want *regexp.Regexp) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !want.Match(readOutput(t, s, id)); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("the shell never answered %q:\n%q", line, readOutput(t, s, id))
		}
		v.send(map[string]any{"type": "input", "session_id": id, "data": line + "\r"})
	}
}

// waitBack waits until a restarted server has a session back from its
// agent's report, running.
func waitBack(t *testing.T, s *harness.Server, id string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := s.Client().GetSessionWithResponse(context.Background(), id)
		if err == nil && resp.JSON200 != nil && resp.JSON200.State == restapi.SessionStateSessionRunning {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s not back after the server restart: %v %s", id, err, resp.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// An interactive shell and a background process kept in tmux outlive a
// killed agent process (the restarted one adopts them) and a restart of
// agentic-mgmt (they come back from the agent's report), and stay
// streamable and typable throughout; the background output has no gap and
// no duplicate across both.
func TestSessionsSurviveAgentAndServerRestarts(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir, privateTmux(t)...)

	v := dialWS(t, s, s.Token)
	v.send(map[string]any{"type": "start_shell", "id": "1", "agent_id": "host-01", "cols": 100, "rows": 30})
	shell := v.waitFor("session_started", func(f map[string]any) bool { return f["type"] == "session_started" })["session_id"].(string)
	v.waitFor("controller", func(f map[string]any) bool { return f["type"] == "role_changed" && f["role"] == "controller" })
	typeUntil(t, v, s, shell, "echo $((6*7))", regexp.MustCompile(`\b42\b`))

	bgType := restapi.SessionBackground
	bg := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &bgType, Name: ptr("ticker"), Command: "sh",
		Args: ptr([]string{"-c", "i=0; while :; do echo tick-$i; i=$((i+1)); sleep 0.1; done"})}).SessionId
	waitTicks(t, s, bg, 5)

	// Kill -9 the agent; the host supervisor starts a new one, which adopts both.
	old := harness.HostAgentPIDs(dataDir)["host-01"]
	since := connectedAt(t, s, "host-01")
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, patience, "the agent restarted", func() bool {
		pid := harness.HostAgentPIDs(dataDir)["host-01"]
		return pid != old && pid != 0
	})
	waitReconnected(t, s, "host-01", since)
	before := ticks(t, readOutput(t, s, bg))
	waitTicks(t, s, bg, before+10)
	for _, id := range []string{shell, bg} {
		if st := sessionState(t, s, id); st != restapi.SessionStateSessionRunning {
			t.Fatalf("session %s is %s after the agent restarted", id, st)
		}
	}
	typeUntil(t, v, s, shell, "echo adopted-$((2*21))", regexp.MustCompile(`adopted-42`))

	// Restart agentic-mgmt: the sessions come back from the agent's report
	// under their ids, with their logs.
	stop(t, s)
	s2 := restart(t, s)
	waitAgents(t, s2, "host-01")
	waitBack(t, s2, bg)
	before = ticks(t, readOutput(t, s2, bg))
	waitTicks(t, s2, bg, before+10)
	if st := sessionState(t, s2, shell); st != restapi.SessionStateSessionRunning {
		t.Fatalf("shell is %s after the server restart", st)
	}
	v2 := dialWS(t, s2, s2.Token)
	v2.send(map[string]any{"type": "join_session", "session_id": shell, "role": "controller"})
	v2.waitFor("controller", func(f map[string]any) bool { return f["type"] == "role_changed" && f["role"] == "controller" })
	typeUntil(t, v2, s2, shell, "echo back-$((50+50))", regexp.MustCompile(`back-100`))

	// Killing ends both, tmux sessions included.
	for _, id := range []string{shell, bg} {
		if resp, err := s2.Client().KillSessionWithResponse(context.Background(), id); err != nil || resp.StatusCode() >= 300 {
			t.Fatalf("kill %s: %v %d", id, err, resp.StatusCode())
		}
	}
	for _, id := range []string{shell, bg} {
		deadline := time.Now().Add(20 * time.Second)
		for sessionState(t, s2, id) == restapi.SessionStateSessionRunning {
			if time.Now().After(deadline) {
				t.Fatalf("session %s still running after kill", id)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// A background session without a terminal: stdin is a pipe that input
// frames write, and output is the process's bytes, untranslated.
func TestBackgroundSessionWithoutPTY(t *testing.T) {
	s := startServer(t, 1, "", privateTmux(t)...)
	v := dialWS(t, s, s.Token)
	v.send(map[string]any{"type": "create_session", "id": "1", "agent_id": "host-01", "session_type": "background", "pty": false,
		"command": "sh", "args": []string{"-c", `read x; echo "got-$x"; tty || true`}})
	id := v.waitFor("session_started", func(f map[string]any) bool { return f["type"] == "session_started" })["session_id"].(string)
	v.send(map[string]any{"type": "join_session", "session_id": id, "role": "controller", "replay_from": 0})
	v.waitFor("controller", func(f map[string]any) bool { return f["type"] == "role_changed" && f["role"] == "controller" })
	v.send(map[string]any{"type": "input", "session_id": id, "data": "piped\n"})
	v.waitFor("session_exited", func(f map[string]any) bool { return f["type"] == "session_exited" && f["session_id"] == id })
	if got := string(readOutput(t, s, id)); got != "got-piped\nnot a tty\n" {
		t.Fatalf("output %q", got)
	}
}

// A kept session that writes without pause loses no byte and repeats none
// across restarts of agentic-mgmt: what the agent had sent into the stream
// the old server closed is read before it goes, the rest follows on the
// next server's stream.
func TestKeptSessionOutputWholeAcrossServerRestarts(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir, privateTmux(t)...)
	bgType := restapi.SessionBackground
	bg := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &bgType, Name: ptr("fast-ticker"), Command: "sh",
		Args: ptr([]string{"-c", "i=0; while :; do for j in 0 1 2 3 4 5 6 7 8 9; do echo tick-$i; i=$((i+1)); done; sleep 0.005; done"})}).SessionId
	waitTicks(t, s, bg, 500)
	for range 3 {
		stop(t, s)
		s = restart(t, s)
		waitAgents(t, s, "host-01")
		waitBack(t, s, bg)
		waitTicks(t, s, bg, ticks(t, readOutput(t, s, bg))+500)
	}
	if resp, err := s.Client().KillSessionWithResponse(context.Background(), bg); err != nil || resp.StatusCode() >= 300 {
		t.Fatalf("kill %s: %v %d", bg, err, resp.StatusCode())
	}
}
