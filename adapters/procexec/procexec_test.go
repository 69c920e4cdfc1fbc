package procexec

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// collector records output and checks the OnOutput contract: calls never
// overlap, no call after Wait returned, chunks never above the read buffer.
type collector struct {
	t        *testing.T
	mu       sync.Mutex
	out      map[ports.OutputStream]*bytes.Buffer
	chunks   int
	inFlight atomic.Int32
	waited   atomic.Bool
	changed  chan struct{}
}

func newCollector(t *testing.T) *collector {
	return &collector{t: t, out: map[ports.OutputStream]*bytes.Buffer{}, changed: make(chan struct{}, 1)}
}

func (c *collector) on(s ports.OutputStream, b []byte) {
	if c.inFlight.Add(1) != 1 {
		c.t.Errorf("overlapping OnOutput calls")
	}
	defer c.inFlight.Add(-1)
	if c.waited.Load() {
		c.t.Errorf("OnOutput called after Wait returned")
	}
	if len(b) == 0 || len(b) > readMax {
		c.t.Errorf("chunk of %d bytes", len(b))
	}
	c.mu.Lock()
	if c.out[s] == nil {
		c.out[s] = &bytes.Buffer{}
	}
	c.out[s].Write(b)
	c.chunks++
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *collector) get(s ports.OutputStream) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out[s] == nil {
		return ""
	}
	return c.out[s].String()
}

// waitFor waits until stream s contains sub.
func (c *collector) waitFor(s ports.OutputStream, sub string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		if strings.Contains(c.get(s), sub) {
			return true
		}
		select {
		case <-c.changed:
		case <-deadline:
			return false
		}
	}
}

func start(t *testing.T, spec Spec) (*Process, *collector) {
	t.Helper()
	c := newCollector(t)
	p, err := Start(spec, c.on)
	if err != nil {
		t.Fatalf("Start(%q): %v", spec.Command, err)
	}
	t.Cleanup(func() {
		// Never leave a process behind a failed test, nor hang on one
		// whose drain a test pushed out of reach.
		if !p.finished() {
			p.Kill()
		}
		select {
		case <-p.Done():
		case <-time.After(15 * time.Second):
			t.Errorf("process %d did not finish after Kill", p.Pid())
		}
	})
	return p, c
}

func wait(t *testing.T, p *Process, c *collector, d time.Duration) ports.CommandResult {
	t.Helper()
	testkit.Receive(t, d, p.Done(), fmt.Sprintf("process %d did not finish", p.Pid()))
	r := p.Wait()
	c.waited.Store(true)
	return r
}

func run(t *testing.T, spec Spec) (ports.CommandResult, *collector) {
	t.Helper()
	p, c := start(t, spec)
	return wait(t, p, c, 20*time.Second), c
}

func sh(script string, args ...string) Spec {
	return Spec{Command: "sh", Args: append([]string{"-c", script, "sh"}, args...)}
}

func (s Spec) withDir(dir string) Spec { s.Dir = dir; return s }

// procGone: absent from /proc, or a zombie nobody reaped.
func procGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// firstLinePid reads a pid the command printed on its first line.
func firstLinePid(t *testing.T, c *collector, s ports.OutputStream) int {
	t.Helper()
	if !c.waitFor(s, "\n", 15*time.Second) {
		t.Fatalf("no pid printed; output %q", c.get(s))
	}
	line, _, _ := strings.Cut(c.get(s), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("bad pid line %q", line)
	}
	t.Cleanup(func() {
		if !procGone(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	r, _ := run(t, sh("exit 42"))
	if r.ExitCode != 42 || r.Signal != 0 || r.TimedOut || r.Error != "" || r.Success() {
		t.Fatalf("result %+v", r)
	}
	if r.Duration <= 0 {
		t.Fatalf("duration %v", r.Duration)
	}
	r, _ = run(t, Spec{Command: "true"})
	if !r.Success() {
		t.Fatalf("true: %+v", r)
	}
}

func TestStdoutStderrSeparate(t *testing.T) {
	t.Parallel()
	r, c := run(t, sh("echo out; echo err >&2; echo out2"))
	if r.ExitCode != 0 {
		t.Fatalf("result %+v", r)
	}
	if got := c.get(ports.StreamStdout); got != "out\nout2\n" {
		t.Errorf("stdout %q", got)
	}
	if got := c.get(ports.StreamStderr); got != "err\n" {
		t.Errorf("stderr %q", got)
	}
	if got := c.get(ports.StreamPTY); got != "" {
		t.Errorf("pty stream %q", got)
	}
}

func TestSignalExit(t *testing.T) {
	t.Parallel()
	r, _ := run(t, sh("kill -9 $$"))
	if r.ExitCode != 137 || r.Signal != 9 || r.TimedOut {
		t.Fatalf("result %+v", r)
	}
}

// Output is forwarded per read, not per line and not at exit.
func TestStreaming(t *testing.T) {
	for _, pty := range []bool{false, true} {
		t.Run(fmt.Sprintf("pty=%v", pty), func(t *testing.T) {
			// The command goes on past "a" only once the test made the gate.
			gate := filepath.Join(t.TempDir(), "gate")
			spec := sh(`printf a; while [ ! -e "$1" ]; do sleep 0.01; done; printf b`, gate)
			spec.PTY = pty
			stream := ports.StreamStdout
			if pty {
				stream = ports.StreamPTY
			}
			p, c := start(t, spec)
			if !c.waitFor(stream, "a", 15*time.Second) {
				t.Fatal("no 'a'")
			}
			select {
			case <-p.Done():
				t.Fatal("'a' arrived only after the process ended")
			default:
			}
			if got := c.get(stream); got != "a" {
				t.Fatalf("early output %q", got)
			}
			if err := os.WriteFile(gate, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			r := wait(t, p, c, 15*time.Second)
			if r.ExitCode != 0 || c.get(stream) != "ab" {
				t.Fatalf("result %+v output %q", r, c.get(stream))
			}
		})
	}
}

// A fast command gets EOF at once and must not pay the drain grace: the
// grace outlasts the wait here, so only the EOF can end the drain in time.
func TestFastExitNoGrace(t *testing.T) {
	defer func(d time.Duration) { drainGrace = d }(drainGrace)
	drainGrace = time.Hour
	for _, pty := range []bool{false, true} {
		t.Run(fmt.Sprintf("pty=%v", pty), func(t *testing.T) {
			for i := 0; i < 5; i++ {
				p, c := start(t, Spec{Command: "true", PTY: pty})
				r := wait(t, p, c, 15*time.Second)
				if r.ExitCode != 0 {
					t.Fatalf("result %+v", r)
				}
			}
		})
	}
}

// A background grandchild holding the output open must not make Wait hang:
// the drain ends after its grace of silence. drainMax, its other end, is
// pushed past the wait here, and the grandchild outlives the wait, so only
// the grace can end the drain in time. (Not parallel: it sets drainMax.)
func TestLingeringGrandchild(t *testing.T) {
	defer func(d time.Duration) { drainMax = d }(drainMax)
	drainMax = time.Hour
	for _, pty := range []bool{false, true} {
		t.Run(fmt.Sprintf("pty=%v", pty), func(t *testing.T) {
			// Ignoring SIGHUP keeps it alive when the PTY session leader exits.
			spec := sh(`trap "" HUP; sleep 30 & echo $!; echo done`)
			spec.PTY = pty
			stream := ports.StreamStdout
			if pty {
				stream = ports.StreamPTY
			}
			p, c := start(t, spec)
			pid := firstLinePid(t, c, stream)
			r := wait(t, p, c, 15*time.Second)
			if r.ExitCode != 0 || r.Signal != 0 {
				t.Fatalf("result %+v", r)
			}
			if !strings.Contains(c.get(stream), "done") {
				t.Fatalf("output %q", c.get(stream))
			}
			if procGone(pid) {
				t.Fatalf("grandchild %d should still run (only the drain stops)", pid)
			}
			syscall.Kill(pid, syscall.SIGKILL)
		})
	}
}

func TestTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	spec := sh("sleep 300 & echo $!; wait")
	spec.Timeout = time.Second
	spec.KillGrace = 500 * time.Millisecond
	p, c := start(t, spec)
	pid := firstLinePid(t, c, ports.StreamStdout)
	r := wait(t, p, c, 10*time.Second)
	if !r.TimedOut || r.Signal != int(syscall.SIGTERM) || r.ExitCode != 128+int(syscall.SIGTERM) || r.Error == "" {
		t.Fatalf("result %+v", r)
	}
	// At least the timeout (its own timer); the wait above tells that it
	// did not run on to the sleep's end.
	if r.Duration < time.Second {
		t.Fatalf("duration %v", r.Duration)
	}
	if !procGone(pid) {
		t.Fatalf("grandchild %d still alive", pid)
	}
}

// Everything ignores SIGTERM: the SIGKILL after KillGrace still ends it.
func TestTimeoutSIGKILL(t *testing.T) {
	t.Parallel()
	spec := sh(`trap "" TERM; sleep 300 & echo $!; wait`)
	spec.Timeout = 500 * time.Millisecond
	spec.KillGrace = 300 * time.Millisecond
	p, c := start(t, spec)
	pid := firstLinePid(t, c, ports.StreamStdout)
	r := wait(t, p, c, 10*time.Second)
	if !r.TimedOut || r.Signal != int(syscall.SIGKILL) || r.ExitCode != 137 {
		t.Fatalf("result %+v", r)
	}
	if r.Duration < 800*time.Millisecond {
		t.Fatalf("SIGKILL came before the grace: %v", r.Duration)
	}
	if !procGone(pid) {
		t.Fatalf("grandchild %d still alive", pid)
	}
}

// The main process dies on SIGTERM but a grandchild ignores it: Kill still
// SIGKILLs the group, and Wait returns only once it is gone.
func TestKillGrandchildIgnoringTERM(t *testing.T) {
	t.Parallel()
	spec := sh(`(trap "" TERM; exec sleep 300) & echo $!; wait`)
	spec.KillGrace = 300 * time.Millisecond
	p, c := start(t, spec)
	pid := firstLinePid(t, c, ports.StreamStdout)
	p.Kill()
	p.Kill() // idempotent
	r := wait(t, p, c, 10*time.Second)
	if r.TimedOut || r.Signal != int(syscall.SIGTERM) || r.ExitCode != 143 {
		t.Fatalf("result %+v", r)
	}
	if !procGone(pid) {
		t.Fatalf("grandchild %d still alive", pid)
	}
}

func TestKill(t *testing.T) {
	t.Parallel()
	for _, pty := range []bool{false, true} {
		t.Run(fmt.Sprintf("pty=%v", pty), func(t *testing.T) {
			p, c := start(t, Spec{Command: "sleep", Args: []string{"30"}, PTY: pty})
			p.Kill()
			r := wait(t, p, c, 10*time.Second)
			if r.TimedOut || r.Signal != 15 || r.ExitCode != 143 {
				t.Fatalf("result %+v", r)
			}
			// After the end: no-ops and clear errors.
			p.Kill()
			if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
				t.Errorf("Signal after done: %v", err)
			}
			if err := p.WriteStdin([]byte("x")); err == nil {
				t.Errorf("WriteStdin after done succeeded")
			}
		})
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"procexec-no-such-command", "/nonexistent/dir/tool"} {
		p, err := Start(Spec{Command: name}, nil)
		if err == nil {
			p.Wait()
			t.Fatalf("%s: started", name)
		}
		r := StartFailure(err)
		if r.ExitCode != 127 || !strings.Contains(r.Error, name) || r.Success() {
			t.Errorf("%s: %+v", name, r)
		}
	}
	r := StartFailure(func() error { _, err := Start(Spec{Command: "procexec-nope"}, nil); return err }())
	if r.Error != `command not found: "procexec-nope"` {
		t.Errorf("message %q", r.Error)
	}
}

func TestNotExecutable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "script")
	if err := os.WriteFile(file, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("\x00\x01\x02 not a program"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []Spec{
		{Command: file},
		{Command: dir},  // a directory
		{Command: junk}, // executable bit but no valid format
		{Command: "script", Env: []string{"PATH=" + dir}},
	}
	for _, spec := range cases {
		p, err := Start(spec, nil)
		if err == nil {
			p.Wait()
			t.Fatalf("%s: started", spec.Command)
		}
		r := StartFailure(err)
		if r.ExitCode != 126 || !strings.Contains(r.Error, spec.Command) {
			t.Errorf("%s: %+v", spec.Command, r)
		}
	}
}

func TestPTYSize(t *testing.T) {
	t.Parallel()
	r, c := run(t, Spec{Command: "stty", Args: []string{"size"}, PTY: true, Cols: 100, Rows: 30})
	if r.ExitCode != 0 || strings.TrimSpace(c.get(ports.StreamPTY)) != "30 100" {
		t.Fatalf("result %+v output %q", r, c.get(ports.StreamPTY))
	}
	r, c = run(t, Spec{Command: "stty", Args: []string{"size"}, PTY: true})
	if strings.TrimSpace(c.get(ports.StreamPTY)) != "24 80" {
		t.Fatalf("default size: %q", c.get(ports.StreamPTY))
	}
	if c.get(ports.StreamStdout) != "" || c.get(ports.StreamStderr) != "" {
		t.Fatal("PTY output on a piped stream")
	}
}

func TestPTYResize(t *testing.T) {
	t.Parallel()
	p, c := start(t, Spec{Command: "sh", Args: []string{"-c", "stty size; read x; stty size"}, PTY: true, Cols: 100, Rows: 30})
	if !c.waitFor(ports.StreamPTY, "30 100", 15*time.Second) {
		t.Fatalf("output %q", c.get(ports.StreamPTY))
	}
	if err := p.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	r := wait(t, p, c, 10*time.Second)
	if r.ExitCode != 0 || !strings.Contains(c.get(ports.StreamPTY), "40 120") {
		t.Fatalf("result %+v output %q", r, c.get(ports.StreamPTY))
	}
}

func TestPTYSigint(t *testing.T) {
	t.Parallel()
	p, c := start(t, Spec{Command: "sleep", Args: []string{"30"}, PTY: true})
	// Signal the running sleep, not the child before its exec.
	testkit.Eventually(t, 15*time.Second, "sleep running", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.Pid()))
		return string(b) == "sleep\n"
	})
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	r := wait(t, p, c, 10*time.Second)
	if r.ExitCode != 130 || r.Signal != 2 || r.TimedOut {
		t.Fatalf("result %+v", r)
	}
}

func TestPTYTerm(t *testing.T) {
	t.Parallel()
	r, c := run(t, Spec{Command: "sh", Args: []string{"-c", "echo $TERM; tty"}, PTY: true, Env: []string{"TERM=dumb", "PATH=/usr/bin:/bin"}})
	out := c.get(ports.StreamPTY)
	if r.ExitCode != 0 || !strings.HasPrefix(out, "xterm-256color\r\n/dev/pts/") {
		t.Fatalf("result %+v output %q", r, out)
	}
	_, c = run(t, Spec{Command: "sh", Args: []string{"-c", "echo $TERM"}, PTY: true, Term: "vt100"})
	if got := c.get(ports.StreamPTY); got != "vt100\r\n" {
		t.Fatalf("output %q", got)
	}
}

func TestPTYStdinEOF(t *testing.T) {
	t.Parallel()
	p, c := start(t, Spec{Command: "cat", PTY: true})
	if err := p.WriteStdin([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	r := wait(t, p, c, 10*time.Second)
	// Once echoed by the terminal, once by cat.
	if r.ExitCode != 0 || strings.Count(c.get(ports.StreamPTY), "hello\r\n") != 2 {
		t.Fatalf("result %+v output %q", r, c.get(ports.StreamPTY))
	}
}

func TestPipedStdin(t *testing.T) {
	t.Parallel()
	p, c := start(t, Spec{Command: "cat", StdinOpen: true})
	in := []byte("hello\x00world\n\xff\xfe no newline")
	if err := p.WriteStdin(in[:7]); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin(in[7:]); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	r := wait(t, p, c, 10*time.Second)
	if r.ExitCode != 0 || c.get(ports.StreamStdout) != string(in) {
		t.Fatalf("result %+v output %q", r, c.get(ports.StreamStdout))
	}
	if err := p.Resize(10, 10); !errors.Is(err, ErrNotPTY) {
		t.Fatalf("Resize on piped: %v", err)
	}
}

func TestStdinClosedByDefault(t *testing.T) {
	t.Parallel()
	p, c := start(t, Spec{Command: "cat"})
	if err := p.WriteStdin([]byte("x")); !errors.Is(err, ErrNoStdin) {
		t.Fatalf("WriteStdin: %v", err)
	}
	if err := p.CloseStdin(); !errors.Is(err, ErrNoStdin) {
		t.Fatalf("CloseStdin: %v", err)
	}
	r := wait(t, p, c, 15*time.Second)
	if r.ExitCode != 0 || c.get(ports.StreamStdout) != "" {
		t.Fatalf("result %+v", r)
	}
}

// A child that never reads stdin must not leave WriteStdin blocked forever.
func TestBlockedWriteStdinReleased(t *testing.T) {
	t.Parallel()
	p, c := start(t, Spec{Command: "sleep", Args: []string{"0.3"}, StdinOpen: true})
	errc := make(chan error, 1)
	go func() { errc <- p.WriteStdin(make([]byte, 1<<20)) }() // far above the pipe buffer
	wait(t, p, c, 10*time.Second)
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("write to a process that never read succeeded")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("WriteStdin still blocked after Wait")
	}
}

func TestLargeOutput(t *testing.T) {
	t.Parallel()
	for _, size := range []int{1 << 20, 16 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "data")
			data := make([]byte, size)
			rand.Read(data)
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
			r, c := run(t, Spec{Command: "cat", Args: []string{file}})
			if r.ExitCode != 0 {
				t.Fatalf("result %+v", r)
			}
			if got := c.get(ports.StreamStdout); got != string(data) {
				t.Fatalf("got %d bytes, want %d (or content differs)", len(got), size)
			}
		})
	}
}

func TestPTYLargeOutput(t *testing.T) {
	t.Parallel()
	var want bytes.Buffer
	for i := 0; want.Len() < 1<<20; i++ {
		fmt.Fprintf(&want, "line %07d abcdefghijklmnopqrstuvwxyz\n", i)
	}
	file := filepath.Join(t.TempDir(), "text")
	if err := os.WriteFile(file, want.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	r, c := run(t, Spec{Command: "cat", Args: []string{file}, PTY: true})
	got := strings.ReplaceAll(c.get(ports.StreamPTY), "\r\n", "\n") // the terminal's ONLCR
	if r.ExitCode != 0 || got != want.String() {
		t.Fatalf("result %+v: got %d bytes, want %d", r, len(got), want.Len())
	}
}

func TestEnv(t *testing.T) {
	// t.Setenv: not parallel.
	t.Setenv("PROCEXEC_TEST_INHERIT", "inherited")
	_, c := run(t, sh(`echo "$PROCEXEC_TEST_INHERIT"`))
	if got := c.get(ports.StreamStdout); got != "inherited\n" {
		t.Errorf("inherited env: %q", got)
	}

	env := []string{"A=1", "B=two words", "PATH=/usr/bin:/bin"}
	_, c = run(t, Spec{Command: "env", Env: env})
	lines := strings.Split(strings.TrimSpace(c.get(ports.StreamStdout)), "\n")
	slices.Sort(lines)
	if !slices.Equal(lines, env) {
		t.Errorf("explicit env: got %q want %q", lines, env)
	}

	// An empty (non-nil) Env is an empty environment.
	_, c = run(t, Spec{Command: "env", Env: []string{}})
	if got := c.get(ports.StreamStdout); got != "" {
		t.Errorf("empty env: %q", got)
	}
}

func TestDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.sh"), []byte("#!/bin/sh\necho hello from $(pwd)\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(dir)

	r, c := run(t, Spec{Command: "pwd", Dir: dir})
	if r.ExitCode != 0 {
		t.Fatalf("result %+v", r)
	}
	if got, _ := filepath.EvalSymlinks(strings.TrimSpace(c.get(ports.StreamStdout))); got != real {
		t.Errorf("pwd %q want %q", got, real)
	}
	// With an inherited environment PWD follows Dir, as exec.Cmd does.
	_, c = run(t, sh(`echo "$PWD"`).withDir(dir))
	if got := strings.TrimSpace(c.get(ports.StreamStdout)); got != dir {
		t.Errorf("PWD %q want %q", got, dir)
	}
	// A relative command with a slash is relative to Dir.
	r, c = run(t, Spec{Command: "./hello.sh", Dir: dir})
	if r.ExitCode != 0 || !strings.HasPrefix(c.get(ports.StreamStdout), "hello from ") {
		t.Errorf("relative command: %+v %q", r, c.get(ports.StreamStdout))
	}
	// A missing directory is a start failure naming the command.
	_, err := Start(Spec{Command: "pwd", Dir: filepath.Join(dir, "missing")}, nil)
	if err == nil || !strings.Contains(StartFailure(err).Error, "pwd") {
		t.Errorf("missing dir: %v", err)
	}
}

// The command is found through the PATH of its own environment.
func TestPATHFromEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "procexec-tool"), []byte("#!/bin/sh\necho tool ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, c := run(t, Spec{Command: "procexec-tool", Env: []string{"PATH=" + dir + ":/usr/bin:/bin"}})
	if r.ExitCode != 0 || c.get(ports.StreamStdout) != "tool ran\n" {
		t.Fatalf("result %+v output %q", r, c.get(ports.StreamStdout))
	}
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	const n = 20
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pty := i%2 == 1
			spec := sh(`echo "out $1"; echo "err $1" >&2; sleep 0.2; exit $1`, strconv.Itoa(i))
			spec.PTY = pty
			c := newCollector(t)
			p, err := Start(spec, c.on) // not start(): no t.Fatal off the test goroutine
			if err != nil {
				t.Errorf("#%d: %v", i, err)
				return
			}
			r := p.Wait()
			c.waited.Store(true)
			if r.ExitCode != i {
				t.Errorf("#%d: result %+v", i, r)
			}
			if pty {
				if got := c.get(ports.StreamPTY); got != fmt.Sprintf("out %d\r\nerr %d\r\n", i, i) {
					t.Errorf("#%d: pty %q", i, got)
				}
				return
			}
			if got := c.get(ports.StreamStdout); got != fmt.Sprintf("out %d\n", i) {
				t.Errorf("#%d: stdout %q", i, got)
			}
			if got := c.get(ports.StreamStderr); got != fmt.Sprintf("err %d\n", i) {
				t.Errorf("#%d: stderr %q", i, got)
			}
		}()
	}
	wg.Wait()
}

// "kill 0" signals the command's own group, which must not include us.
func TestKillOwnGroup(t *testing.T) {
	t.Parallel()
	for _, pty := range []bool{false, true} {
		spec := sh("kill -TERM 0; sleep 5")
		spec.PTY = pty
		r, _ := run(t, spec)
		if r.Signal != int(syscall.SIGTERM) {
			t.Fatalf("pty=%v: result %+v", pty, r)
		}
	}
	// Still here; and our group is not the command's.
	p, c := start(t, Spec{Command: "sleep", Args: []string{"0"}})
	wait(t, p, c, 15*time.Second)
	if p.Pid() == syscall.Getpgrp() {
		t.Fatal("command shares our process group")
	}
}

func TestPidIsGroupLeader(t *testing.T) {
	t.Parallel()
	for _, pty := range []bool{false, true} {
		spec := sh(`cut -d" " -f5 /proc/$$/stat`) // pgrp of the shell
		spec.PTY = pty
		p, c := start(t, spec)
		wait(t, p, c, 15*time.Second)
		out := strings.TrimSpace(c.get(ports.StreamStdout) + c.get(ports.StreamPTY))
		if out != strconv.Itoa(p.Pid()) {
			t.Fatalf("pty=%v: pgrp %q, pid %d", pty, out, p.Pid())
		}
	}
}

func TestWaitConcurrent(t *testing.T) {
	t.Parallel()
	p, c := start(t, sh("sleep 0.2; exit 3"))
	var wg sync.WaitGroup
	results := make([]ports.CommandResult, 8)
	for i := range results {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = p.Wait() }()
	}
	wg.Wait()
	c.waited.Store(true)
	for _, r := range results {
		if r != results[0] || r.ExitCode != 3 {
			t.Fatalf("results differ: %+v", results)
		}
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Wait")
	}
}

func TestRunAs(t *testing.T) {
	t.Parallel()
	testreq.Root(t, "switching users")
	u, err := user.Lookup("nobody")
	testreq.Need(t, err == nil, "the user nobody", "useradd --system nobody")
	for _, who := range []string{"nobody", u.Uid} {
		spec := sh(`echo "$(id -u) $(id -g) $(id -G) $HOME $USER $LOGNAME"`)
		spec.RunAs = who
		spec.Dir = "/"
		r, c := run(t, spec)
		want := fmt.Sprintf("%s %s %s %s nobody nobody\n", u.Uid, u.Gid, u.Gid, u.HomeDir)
		if r.ExitCode != 0 || c.get(ports.StreamStdout) != want {
			t.Errorf("RunAs %s: %+v %q want %q (stderr %q)", who, r, c.get(ports.StreamStdout), want, c.get(ports.StreamStderr))
		}
	}
	spec := Spec{Command: "id", Args: []string{"-u"}, PTY: true, RunAs: "nobody"}
	r, c := run(t, spec)
	if r.ExitCode != 0 || strings.TrimSpace(c.get(ports.StreamPTY)) != u.Uid {
		t.Errorf("PTY RunAs: %+v %q", r, c.get(ports.StreamPTY))
	}
	if _, err := Start(Spec{Command: "true", RunAs: "procexec-no-such-user"}, nil); err == nil {
		t.Error("unknown user started")
	}
}

// After Wait, every goroutine of the process is gone.
func TestNoGoroutineLeak(t *testing.T) {
	settle := func(max int) int {
		n := runtime.NumGoroutine()
		for i := 0; i < 1500 && n > max; i++ {
			time.Sleep(10 * time.Millisecond)
			n = runtime.NumGoroutine()
		}
		return n
	}
	time.Sleep(50 * time.Millisecond) // let earlier tests' goroutines end
	base := runtime.NumGoroutine()
	specs := []Spec{
		{Command: "true"},
		{Command: "true", PTY: true},
		{Command: "cat", StdinOpen: true},
		sh(`trap "" HUP; sleep 30 & echo $!`),
		{Command: "sleep", Args: []string{"30"}, Timeout: 100 * time.Millisecond, KillGrace: 100 * time.Millisecond},
		{Command: "sleep", Args: []string{"30"}, PTY: true, Timeout: 100 * time.Millisecond},
	}
	for _, spec := range specs {
		c := newCollector(t)
		p, err := Start(spec, c.on)
		if err != nil {
			t.Fatal(err)
		}
		if spec.StdinOpen {
			p.CloseStdin()
		}
		r := p.Wait()
		c.waited.Store(true)
		if spec.Command == "sh" {
			pid, _ := strconv.Atoi(strings.TrimSpace(c.get(ports.StreamStdout)))
			if pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if n := settle(base); n > base {
			t.Fatalf("%v (%+v): %d goroutines after Wait, %d before", spec.Args, r, n, base)
		}
	}
}

func BenchmarkStartWaitTrue(b *testing.B) {
	for b.Loop() {
		p, err := Start(Spec{Command: "true"}, func(ports.OutputStream, []byte) {})
		if err != nil {
			b.Fatal(err)
		}
		if r := p.Wait(); r.ExitCode != 0 {
			b.Fatal(r)
		}
	}
}

func BenchmarkPTYTrue(b *testing.B) {
	for b.Loop() {
		p, err := Start(Spec{Command: "true", PTY: true}, func(ports.OutputStream, []byte) {})
		if err != nil {
			b.Fatal(err)
		}
		if r := p.Wait(); r.ExitCode != 0 {
			b.Fatal(r)
		}
	}
}

// A consumer slower than the drain grace (an agent whose outbox is full)
// must not lose the end of the output of a command that already exited.
func TestSlowConsumerGetsAllOutput(t *testing.T) {
	for _, pty := range []bool{false, true} {
		var mu sync.Mutex
		var got []byte
		first := true
		p, err := Start(Spec{Command: "sh", Args: []string{"-c", "printf a; sleep 0.05; printf b"}, PTY: pty}, func(_ ports.OutputStream, b []byte) {
			mu.Lock()
			got = append(got, b...)
			slow := first
			first = false
			mu.Unlock()
			if slow {
				time.Sleep(3 * drainGrace) // the process exits meanwhile
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if r := p.Wait(); r.ExitCode != 0 {
			t.Fatalf("pty=%v: %+v", pty, r)
		}
		mu.Lock()
		if string(got) != "ab" {
			t.Errorf("pty=%v: output %q, want \"ab\"", pty, got)
		}
		mu.Unlock()
	}
}

// A reader the machine leaves unscheduled past the drain grace still hands
// on the bytes the process wrote before it exited: they are in the pipe or
// the terminal, and the last read takes them (the deadline that stopped the
// reader fails a read before it looks).
func TestStalledReaderLosesNothing(t *testing.T) {
	for _, pty := range []bool{false, true} {
		stall := func(p *Process) {
			for !p.finished() {
				p.mu.Lock()
				exited := p.exited
				p.mu.Unlock()
				if exited {
					time.Sleep(3 * drainGrace) // the drain ends meanwhile
					return
				}
				time.Sleep(time.Millisecond)
			}
		}
		betweenReads.Store(&stall)
		r, c := run(t, Spec{Command: "sh", Args: []string{"-c", "printf first; sleep 0.05; printf second"}, PTY: pty})
		betweenReads.Store(nil)
		s := ports.StreamStdout
		if pty {
			s = ports.StreamPTY
		}
		if r.ExitCode != 0 || c.get(s) != "firstsecond" {
			t.Errorf("pty=%v: %+v, output %q, want \"firstsecond\"", pty, r, c.get(s))
		}
	}
}

// A process that writes 1 MiB in one write has it read in a few large
// chunks: the stdout pipe holds it all (enlarged) and a read takes what is
// buffered, up to readMax. With the default 64 KiB pipe and 32 KiB reads it
// took 32 chunks, each a message and a hand-off downstream. Each chunk is
// the caller's: the ones kept still hold their bytes at the end. Not
// parallel: parallel tests' pipes could take the enlarged pipes' bound.
func TestLargeWriteReadInFewChunks(t *testing.T) {
	var mu sync.Mutex
	var kept [][]byte
	c := newCollector(t)
	p, err := Start(Spec{Command: "dd", Args: []string{"if=/dev/urandom", "bs=1M", "count=1", "status=none"}}, func(s ports.OutputStream, b []byte) {
		c.on(s, b)
		mu.Lock()
		kept = append(kept, b)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	res := wait(t, p, c, 20*time.Second)
	if res.ExitCode != 0 {
		t.Fatalf("dd: %+v", res)
	}
	out := c.get(ports.StreamStdout)
	if len(out) != 1<<20 {
		t.Fatalf("got %d bytes, want 1 MiB", len(out))
	}
	if c.chunks > 1<<20/readMax+2 {
		t.Errorf("1 MiB written at once came in %d chunks, want at most %d", c.chunks, 1<<20/readMax+2)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := string(bytes.Join(kept, nil)); got != out {
		t.Errorf("the chunks kept changed after they were handed on")
	}
}
