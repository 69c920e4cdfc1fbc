package e2e

import (
	"bytes"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/procexec"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// terminal is agenticctl running in a real PTY, as a person would run it.
type terminal struct {
	proc ports.Process
	mu   sync.Mutex
	out  bytes.Buffer
}

func (tm *terminal) output() []byte {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return append([]byte(nil), tm.out.Bytes()...)
}

// typeUntil types s until the screen output matches want.
func (tm *terminal) typeUntil(t *testing.T, s string, want *regexp.Regexp) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !want.Match(tm.output()); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s on the terminal after typing %q:\n%q", want, s, tm.output())
		}
		if err := tm.proc.WriteStdin([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAttachInARealTerminal(t *testing.T) {
	s := startServer(t, 1, "", privateTmux(t)...)
	interactive := restapi.SessionInteractive
	id := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &interactive, Name: ptr("attached"), Command: "sh"}).SessionId

	tm := &terminal{}
	tm.proc = procexec.Runner{}.Start(ports.CommandSpec{
		Command: bins.Ctl, Args: []string{"--server", s.RESTURL, "--token", s.Token, "attach", id},
		PTY: true, Cols: 100, Rows: 30, StdinOpen: true,
	}, func(_ ports.OutputStream, b []byte) {
		tm.mu.Lock()
		tm.out.Write(b)
		tm.mu.Unlock()
	})
	t.Cleanup(tm.proc.Kill)

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
	select {
	case <-tm.proc.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("attach did not end on the detach key:\n%q", tm.output())
	}
	if r := tm.proc.Wait(); r.ExitCode != 0 || !regexp.MustCompile(`detached from`).Match(tm.output()) {
		t.Fatalf("attach ended with %+v:\n%q", r, tm.output())
	}
	if st := sessionState(t, s, id); st != restapi.SessionStateSessionRunning {
		t.Fatalf("session is %s after detaching", st)
	}

	// Attached again, the session ending ends attach with its exit code.
	again := &terminal{}
	again.proc = procexec.Runner{}.Start(ports.CommandSpec{
		Command: bins.Ctl, Args: []string{"--server", s.RESTURL, "--token", s.Token, "attach", id},
		PTY: true, Cols: 100, Rows: 30, StdinOpen: true,
	}, func(_ ports.OutputStream, b []byte) {
		again.mu.Lock()
		again.out.Write(b)
		again.mu.Unlock()
	})
	t.Cleanup(again.proc.Kill)
	again.typeUntil(t, "echo second-$((2+3))\r", regexp.MustCompile(`second-5`))
	if err := again.proc.WriteStdin([]byte("exit 7\r")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-again.proc.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("attach did not end with the session:\n%q", again.output())
	}
	if r := again.proc.Wait(); r.ExitCode != 7 {
		t.Fatalf("attach exit %d, want the session's 7:\n%q", r.ExitCode, again.output())
	}
}
