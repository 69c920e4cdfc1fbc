package e2e

import (
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"regexp"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/procexec"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// terminal is agenticctl running in a real PTY, as a person would run it.
type terminal struct {
	proc ports.Process
	out  testkit.Buffer
}

// attach runs agenticctl attach id in a PTY of 100x30; the test waits for
// it, pass or fail.
func attach(t *testing.T, s *harness.Server, id string) *terminal {
	tm := &terminal{}
	tm.proc = procexec.Runner{}.Start(ports.CommandSpec{
		Command: bins.Ctl, Args: []string{"--server", s.RESTURL, "--token", s.Token, "attach", id},
		PTY: true, Cols: 100, Rows: 30, StdinOpen: true,
	}, func(_ ports.OutputStream, b []byte) { _, _ = tm.out.Write(b) })
	t.Cleanup(func() { tm.proc.Kill(); tm.proc.Wait() })
	return tm
}

func (tm *terminal) output() []byte { return []byte(tm.out.String()) }

// typeUntil types s, again every second, until the screen output matches
// want.
func (tm *terminal) typeUntil(t *testing.T, s string, want *regexp.Regexp) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !want.Match(tm.output()); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s on the terminal after typing %q:\n%q", want, s, tm.output())
		}
		if err := tm.proc.WriteStdin([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
}

// ended waits for attach to end (after what) and is its result.
func (tm *terminal) ended(t *testing.T, what string) ports.CommandResult {
	t.Helper()
	select {
	case <-tm.proc.Done():
	case <-time.After(time.Minute):
		t.Fatalf("attach did not end %s:\n%q", what, tm.output())
	}
	return tm.proc.Wait()
}

func TestAttachInARealTerminal(t *testing.T) {
	s := startServer(t, 1, "", privateTmux(t)...)
	interactive := restapi.SessionInteractive
	id := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &interactive, Name: ptr("attached"), Command: "sh"}).SessionId

	tm := attach(t, s, id)
	// Raw mode: keys reach the shell one by one and it answers.
	tm.typeUntil(t, "echo $((6*7))\r", regexp.MustCompile(`\b42\b`))
	// This terminal's size change reaches the session (tmux keeps a row).
	if err := tm.proc.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	tm.typeUntil(t, "stty size\r", regexp.MustCompile(`(39|40) 120`))
	// The detach key ends attach with 0 and leaves the session running.
	if err := tm.proc.WriteStdin([]byte{0x1d}); err != nil {
		t.Fatal(err)
	}
	if r := tm.ended(t, "on the detach key"); r.ExitCode != 0 || !regexp.MustCompile(`detached from`).Match(tm.output()) {
		t.Fatalf("attach ended with %+v:\n%q", r, tm.output())
	}
	if st := sessionState(t, s, id); st != restapi.SessionStateSessionRunning {
		t.Fatalf("session is %s after detaching", st)
	}

	// Attached again, the session ending ends attach with its exit code.
	again := attach(t, s, id)
	again.typeUntil(t, "echo second-$((2+3))\r", regexp.MustCompile(`second-5`))
	if err := again.proc.WriteStdin([]byte("exit 7\r")); err != nil {
		t.Fatal(err)
	}
	if r := again.ended(t, "with the session"); r.ExitCode != 7 {
		t.Fatalf("attach exit %d, want the session's 7:\n%q", r.ExitCode, again.output())
	}
}
