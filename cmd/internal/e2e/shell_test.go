package e2e

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/procexec"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// ctlInPTY runs agenticctl args… in a PTY of 100x30, as a person would in
// a terminal; the test waits for it, pass or fail.
func ctlInPTY(t *testing.T, s *harness.Server, args ...string) *terminal {
	tm := &terminal{}
	tm.proc = procexec.Runner{}.Start(ports.CommandSpec{
		Command: bins.Ctl, Args: append([]string{"--server", s.RESTURL, "--token", s.Token}, args...),
		PTY: true, Cols: 100, Rows: 30, StdinOpen: true,
	}, func(_ ports.OutputStream, b []byte) { _, _ = tm.out.Write(b) })
	t.Cleanup(func() { tm.proc.Kill(); tm.proc.Wait() })
	return tm
}

// waitFor waits until the terminal shows want.
func (tm *terminal) waitFor(t *testing.T, want *regexp.Regexp) {
	t.Helper()
	if !testkit.Within(patience, func() bool { return want.Match(tm.output()) }) {
		t.Fatalf("no %s on the terminal:\n%q", want, tm.output())
	}
}

// agenticctl shell: a shell made and attached in one step, in a real
// terminal, that ends agenticctl with its exit code; detached, it goes on
// and attach brings it back; an environment's name opens a shell in it.
func TestShellInARealTerminal(t *testing.T) {
	s := startServer(t, 1, "", privateTmux(t)...)

	// One step: type, see the answer, and the shell's exit code is agenticctl's.
	tm := ctlInPTY(t, s, "shell", "host-01")
	tm.typeUntil(t, "echo ready-$((40+2))\r", regexp.MustCompile(`ready-42`))
	if err := tm.proc.WriteStdin([]byte("echo hi; exit 3\r")); err != nil {
		t.Fatal(err)
	}
	if r := tm.ended(t, "when the shell exited"); r.ExitCode != 3 {
		t.Fatalf("shell exit %d, want the shell's 3:\n%q", r.ExitCode, tm.output())
	}
	// "hi" alone on a line, drawn by tmux: after a newline or a cursor
	// move, before a carriage return or an erase to the end of the line.
	if out := tm.output(); !regexp.MustCompile(`(\n|\x1b\[[0-9;]*H)hi(\r|\x1b\[K)`).Match(out) || !regexp.MustCompile(`Ctrl-\] detaches`).Match(out) {
		t.Fatalf("no line 'hi' or no word on the detach key:\n%q", out)
	}
	list, errOut, code := ctl(t, s.RESTURL, s.Token, "sessions", "list", "--agent", "host-01")
	if code != 0 || !regexp.MustCompile(`shell-\w+\s+interactive\s+exited\s+3`).MatchString(list) {
		t.Fatalf("the shell's session is not listed as exited with 3: %d %q %q", code, list, errOut)
	}

	// The session starts at the terminal's size and follows it.
	tm = ctlInPTY(t, s, "shell", "--name", "keep", "host-01")
	tm.typeUntil(t, "stty size\r", regexp.MustCompile(`(29|30) 100`))
	if err := tm.proc.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	tm.typeUntil(t, "stty size\r", regexp.MustCompile(`(39|40) 120`))
	tm.typeUntil(t, "x=kept-9; echo set-$((1+1))-$x\r", regexp.MustCompile(`set-2-kept-9`))
	// The detach key leaves it running and says how to come back.
	if err := tm.proc.WriteStdin([]byte{0x1d}); err != nil {
		t.Fatal(err)
	}
	if r := tm.ended(t, "on the detach key"); r.ExitCode != 0 {
		t.Fatalf("detach: exit %d:\n%q", r.ExitCode, tm.output())
	}
	m := regexp.MustCompile(`detached from (\S+); it goes on\. Re-attach: agenticctl attach (\S+)\]`).FindSubmatch(tm.output())
	if m == nil || string(m[1]) != string(m[2]) {
		t.Fatalf("no re-attach hint after detaching:\n%q", tm.output())
	}
	id := string(m[1])
	if st := sessionState(t, s, id); st != restapi.SessionStateSessionRunning {
		t.Fatalf("session %s is %s after detaching", id, st)
	}
	// Re-attached, it is the same shell (its variable is still set), and
	// its end is attach's.
	again := attach(t, s, id)
	again.typeUntil(t, "echo $x\r", regexp.MustCompile(`kept-9`))
	if err := again.proc.WriteStdin([]byte("exit 5\r")); err != nil {
		t.Fatal(err)
	}
	if r := again.ended(t, "with the shell"); r.ExitCode != 5 {
		t.Fatalf("attach exit %d, want the shell's 5:\n%q", r.ExitCode, again.output())
	}

	// Killed from elsewhere, the shell ends agenticctl with a failure.
	victim := ctlInPTY(t, s, "shell", "--name", "victim", "host-01")
	victim.typeUntil(t, "echo alive-$((5*5))\r", regexp.MustCompile(`alive-25`))
	vm := regexp.MustCompile(`shell victim on host-01 \(session (\S+)\)`).FindSubmatch(victim.output())
	if vm == nil {
		t.Fatalf("the shell did not name its session:\n%q", victim.output())
	}
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "sessions", "kill", string(vm[1])); code != 0 {
		t.Fatalf("kill: %d %q %q", code, out, errOut)
	}
	if r := victim.ended(t, "when its session was killed"); r.ExitCode == 0 || !regexp.MustCompile(`session \S+ killed`).Match(victim.output()) {
		t.Fatalf("a killed shell: exit %d:\n%q", r.ExitCode, victim.output())
	}

	// A command instead of the shell.
	cmd := ctlInPTY(t, s, "shell", "host-01", "--", "sh", "-c", "echo reading-$((2*2)); read line; echo got-$line; exit 4")
	cmd.waitFor(t, regexp.MustCompile(`reading-4`))
	if err := cmd.proc.WriteStdin([]byte("x\r")); err != nil {
		t.Fatal(err)
	}
	if r := cmd.ended(t, "when the command exited"); r.ExitCode != 4 {
		t.Fatalf("shell -- CMD exit %d, want 4:\n%q", r.ExitCode, cmd.output())
	}

	// Without a terminal, stdin goes through as it comes. (The shell
	// outlives its output a while: a tmux client draws the pane when it
	// gets to it, and a shell that ran the whole line before the first
	// draw and exited at once left nothing drawn on a loaded machine.)
	piped := exec.Command(bins.Ctl, "--server", s.RESTURL, "--token", s.Token, "shell", "host-01")
	piped.Stdin = strings.NewReader("echo piped-$((1+1)); sleep 5; exit 5\n")
	pipedOut, err := piped.CombinedOutput()
	if code := piped.ProcessState.ExitCode(); code != 5 || !strings.Contains(string(pipedOut), "piped-2") {
		t.Fatalf("shell with stdin from a pipe: exit %d (%v):\n%q", code, err, pipedOut)
	}

	// An environment's name opens a shell in it.
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "host", "sh-env"); code != 0 {
		t.Fatalf("env create: %d %q %q", code, out, errOut)
	}
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", "sh-env") })
	env := ctlInPTY(t, s, "shell", "sh-env")
	env.typeUntil(t, "echo in-$AGENT_ID\r", regexp.MustCompile(`in-sh-env`))
	if err := env.proc.WriteStdin([]byte("exit 6\r")); err != nil {
		t.Fatal(err)
	}
	if r := env.ended(t, "when the environment's shell exited"); r.ExitCode != 6 {
		t.Fatalf("shell in an environment: exit %d, want 6:\n%q", r.ExitCode, env.output())
	}

	// Nothing there: a reason and what to look at, exit 1.
	_, errOut, code = ctl(t, s.RESTURL, s.Token, "shell", "nosuch")
	if code != 1 || !strings.Contains(errOut, "agent_not_found") || !strings.Contains(errOut, "'agenticctl env list'") {
		t.Fatalf("shell on nothing: %d %q", code, errOut)
	}
}
