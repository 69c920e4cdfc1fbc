package agentd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A background session kept in tmux has no client: tmux pipes the pane's raw
// output (what the process wrote to its terminal, not tmux's rendering) into
// a log file that the agent follows. Offsets are file offsets, so an agent
// process that adopts the session streams it under the same command from
// offset 0 and the server drops what it already has: nothing is lost while
// no agent ran. Input goes in with send-keys.
const (
	// logPoll is how often the follower looks for new output at the end of
	// the file, idleLogPoll once nothing came for idleAfter (hundreds of idle
	// sessions must cost next to nothing); livenessPoll how often it checks
	// that the session is there.
	logPoll     = 20 * time.Millisecond
	idleLogPoll = 100 * time.Millisecond
	idleAfter   = time.Second
	logChunk    = 32 << 10
	// pipeDrainWait bounds the wait, once the session ended, for pipe-pane's
	// cat to have written its last bytes (the EOF marker its command leaves)
	// while tmux keeps the dead pane (remain-on-exit), so keeps the pipe
	// open; pipeOrphanWait while the pane is gone, when only a cat killed
	// by someone else can fail to leave it. Neither is a wait for a slow
	// machine: on a loaded one cat may take seconds to write its last bytes.
	pipeDrainWait  = 2 * time.Second
	pipeOrphanWait = 5 * time.Minute
	// pipeCheckEvery is how often, while waiting for the marker, tmux is
	// asked whether it keeps the dead pane.
	pipeCheckEvery = 100 * time.Millisecond
	// newSessionTries bounds the new-session retries when it met a tmux
	// server on its way out (its last session just ended).
	newSessionTries = 5
)

// logWrapper is the pane's command of a background session: it waits until
// the pipe is in place, so the first bytes are logged too, then runs "$@"
// and writes its status to $0. Then it lets go of the terminal and lives on
// until tmux hangs it up. tmux ends a pane when its process has exited and
// the pty has nothing left to read, but it asks the pty with FIONREAD, which
// does not count the bytes the kernel still holds on their way from the
// pane's terminal to tmux: a pane whose process exits right after a flood
// lost its last few KiB now and then (about 1 in 40 floods of 128 KiB, 8
// at once). Once no process holds the terminal, tmux reads every byte
// before the pty reports its end, and only then ends the pane and hangs up
// the terminal. What the wrapper's exit would have hung up (the rest of its
// process group, as the kernel does when a session leader exits) is hung up
// first; something else that keeps the terminal open (ignoring the hang-up)
// ends the wait after wrapperHangupWait, as tmux would have at once.
func logWrapper() string {
	return `f=$0; tmux wait-for "$1"; shift; "$@"; s=$?; echo $s >"$f.tmp" && mv "$f.tmp" "$f"
trap '' HUP; kill -HUP 0 2>/dev/null; trap - HUP; exec sleep ` + strconv.Itoa(int(wrapperHangupWait/time.Second)) + ` </dev/null >/dev/null 2>&1`
}

// wrapperHangupWait bounds how long a background session's wrapper waits,
// once its command ended, for tmux to hang it up (a variable so that a
// test can make the hang-up the only way to end).
var wrapperHangupWait = 5 * time.Second

// livenessPoll is how often the follower checks that the session is there,
// when no exit notice woke it first (a variable so that a test can make the
// notice the only way to end).
var livenessPoll = 500 * time.Millisecond

type tmuxLogProc struct {
	name, exitFile, logFile string
	eofFile                 string // left by the pipe's command once cat is done; "" for none
	onOutput                func(ports.OutputStream, []byte)
	start                   time.Time
	pid                     int
	liveness                time.Duration // livenessPoll when made

	mu       sync.Mutex
	killed   bool
	detached bool
	stop     chan struct{}
	done     chan struct{}
	result   ports.CommandResult
}

var _ ports.Process = (*tmuxLogProc)(nil)

// startTmuxLog creates spec's session detached, pipes its pane into the log
// and then lets the command start.
func startTmuxLog(spec ports.CommandSpec, onOutput func(ports.OutputStream, []byte)) ports.Process {
	makeSessionsDir()
	base := sessionFileBase(spec)
	t := &tmuxLogProc{name: spec.SessionName, exitFile: base + ".exit", logFile: base + ".log", eofFile: base + ".log.eof", onOutput: onOutput,
		start: time.Now(), liveness: livenessPoll, stop: make(chan struct{}), done: make(chan struct{})}
	_ = os.Remove(t.exitFile)
	_ = os.Remove(t.eofFile)
	_ = os.Remove(pipePidFile(t.eofFile))
	if err := os.WriteFile(t.logFile, nil, 0o600); err != nil {
		return t.failed(err)
	}
	giveTmuxUser(t.logFile) // its pipe-pane cat appends to it
	channel := "agentic-go-" + spec.SessionName
	wrapped := append([]string{"sh", "-c", logWrapper(), t.exitFile, channel}, sessionCommand(spec)...)
	args := newSessionArgs(spec, true, wrapped, optExitFile, t.exitFile, optLogFile, t.logFile, optLogEOF, t.eofFile)
	// Once tmux closes the pipe (the pane is gone), cat writes what it
	// holds and exits; the marker after it says the log is complete.
	// Its shell's pid says, while the marker has not come, whether it still can.
	args = append(args, ";", "pipe-pane", "-o", "-t", "="+spec.SessionName+":",
		"echo $$ > '"+pipePidFile(t.eofFile)+"'; cat >> '"+t.logFile+"'; : > '"+t.eofFile+"'")
	if err := newDetachedSession(args); err != nil {
		_ = os.Remove(t.logFile)
		return t.failed(tmuxError(err))
	}
	// The pane's pid before its command may start: the pane waits for the
	// channel, so it is there to ask. Once the command runs, the session
	// can be over (the server gone with it) before tmux could be asked.
	t.pid = panePid(t.name)
	if _, err := tmuxCmd(context.Background(), "wait-for", "-S", channel); err != nil {
		t.Kill()
	}
	go t.follow()
	return t
}

// followTmuxLog takes over a background session an earlier agent process ran.
func followTmuxLog(found foundSession, onOutput func(ports.OutputStream, []byte)) ports.Process {
	t := &tmuxLogProc{name: found.name, exitFile: found.exitFile, logFile: found.logFile, eofFile: found.eofFile, onOutput: onOutput,
		start: found.created, liveness: livenessPoll, stop: make(chan struct{}), done: make(chan struct{})}
	t.pid = panePid(t.name)
	go t.follow()
	return t
}

func (t *tmuxLogProc) failed(err error) ports.Process {
	t.result = ports.CommandResult{ExitCode: 127, Error: "tmux: " + err.Error()}
	close(t.done)
	return t
}

func tmuxError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return errors.New(string(ee.Stderr))
	}
	return err
}

func panePid(name string) int {
	out, err := tmuxCmd(context.Background(), "display-message", "-p", "-t", "="+name+":", "#{pane_pid}")
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(out))
	return pid
}

// follow streams the log until the session is gone and the log is drained
// (then the result is the exit file's), or until Detach.
func (t *tmuxLogProc) follow() {
	f, err := os.Open(t.logFile)
	if err != nil {
		t.finish(ports.CommandResult{ExitCode: -1, Error: "session log: " + err.Error(), Duration: time.Since(t.start)})
		return
	}
	defer f.Close()
	// The pane's process ending wakes the follower at once; the liveness
	// poll below stays as the fallback (and the judge: ended()).
	exited, stopNotice := exitNotice(t.pid)
	defer stopNotice()
	buf := make([]byte, logChunk)
	lastCheck, lastOutput := time.Now(), time.Now()
	gone := false
	for {
		n, err := f.Read(buf)
		if n > 0 {
			t.onOutput(ports.StreamPTY, append([]byte(nil), buf[:n]...))
			lastOutput = time.Now()
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			t.finish(ports.CommandResult{ExitCode: -1, Error: "session log: " + err.Error(), Duration: time.Since(t.start)})
			return
		}
		if gone {
			// Drained after the session ended: pipe-pane's cat has exited.
			break
		}
		select {
		case <-t.stop:
			t.finish(ports.CommandResult{ExitCode: -1, Error: "detached: the session lives on in tmux", Duration: time.Since(t.start)})
			return
		case <-exited:
			exited = nil // once
			lastCheck = time.Time{}
		case <-time.After(pollAfter(lastOutput)):
		}
		if time.Since(lastCheck) >= t.liveness {
			lastCheck = time.Now()
			if t.ended() {
				gone = true
				t.waitPipe()
			}
		}
	}
	t.mu.Lock()
	killed := t.killed
	t.mu.Unlock()
	r := endResult(t.exitFile, killed, t.start)
	_ = os.Remove(t.logFile)
	if t.eofFile != "" {
		_ = os.Remove(t.eofFile)
		_ = os.Remove(pipePidFile(t.eofFile))
	}
	t.finish(r)
}

// waitPipe waits, once the session ended, until pipe-pane's cat has written
// its last bytes: its command leaves the EOF marker after cat exits, which
// it does once tmux destroys the pane and so closes the pipe. On a loaded
// machine that can take seconds, so the wait is not a time but as long as
// the marker can still come: while the pipe's shell lives, unless tmux
// keeps the dead pane (remain-on-exit: the pipe stays open; then
// pipeDrainWait). A session without the marker (started by an older agent)
// gets logPoll, one without the shell's pid pipeDrainWait, as before;
// pipeOrphanWait bounds it all.
func (t *tmuxLogProc) waitPipe() {
	if t.eofFile == "" {
		time.Sleep(logPoll)
		return
	}
	pipePid := readPid(pipePidFile(t.eofFile))
	start, lastCheck := time.Now(), time.Now()
	for {
		if _, err := os.Stat(t.eofFile); err == nil {
			return
		}
		if pipePid <= 0 { // its shell may not have run its first line yet
			pipePid = readPid(pipePidFile(t.eofFile))
		}
		waited := time.Since(start)
		switch {
		case pipePid > 0 && processEnded(pipePid):
			return // the shell is gone without leaving it: killed
		case waited > pipeOrphanWait:
			return
		case waited > pipeDrainWait && pipePid <= 0:
			return
		case waited > pipeDrainWait && time.Since(lastCheck) >= pipeCheckEvery:
			lastCheck = time.Now()
			if t.paneKeptDead() {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// pipePidFile holds the pid of the shell pipe-pane runs for the log whose
// EOF marker is eofFile.
func pipePidFile(eofFile string) string { return eofFile + ".pid" }

// readPid is the pid written in path, 0 when there is none.
func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

// paneKeptDead reports whether tmux keeps the session's pane after its
// process ended (remain-on-exit): the pipe, and so cat, stay open with it.
func (t *tmuxLogProc) paneKeptDead() bool {
	out, err := tmuxCmd(context.Background(), "display-message", "-p", "-t", "="+t.name+":", "#{pane_dead}")
	return err == nil && strings.TrimSpace(out) == "1"
}

// newDetachedSession runs tmux with args (a detached new-session and what
// follows it). A server whose last session just ended exits; a client that
// reaches it then gets "server exited unexpectedly" and nothing was made,
// so the command is tried again (a new server starts).
func newDetachedSession(args []string) error {
	var err error
	for range newSessionTries {
		if _, err = tmuxCmd(context.Background(), args...); err == nil || !serverWentAway(err) {
			return err
		}
		time.Sleep(logPoll)
	}
	return err
}

// serverWentAway reports whether a tmux client failed because the server
// exited under it.
func serverWentAway(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && (bytes.Contains(ee.Stderr, []byte("server exited unexpectedly")) ||
		bytes.Contains(ee.Stderr, []byte("lost server")))
}

// exitNotice returns a channel closed when pid may have ended, and a stop
// function. It waits on a pidfd in the runtime's poller: no thread, timer
// or process start per session. A pidfd is readable once the process has
// exited, a zombie included, as processEnded counts it; a pid already
// reaped has it closed at once. Nil (never ready) where pids or pidfds are
// missing; then only the liveness poll notices.
func exitNotice(pid int) (<-chan struct{}, func()) {
	if pid <= 0 {
		return nil, func() {}
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		// Gone (reaped) already: that is the notice.
		ch := make(chan struct{})
		close(ch)
		return ch, func() {}
	}
	if err != nil {
		return nil, func() {}
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, func() {}
	}
	ch := make(chan struct{})
	go func() {
		// Closed also when the wait fails (the fd not pollable, or stop):
		// a wake-up only, ended() decides.
		defer close(ch)
		_ = rc.Read(func(fd uintptr) bool {
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}} //nolint:gosec // an fd fits in int32
			n, err := unix.Poll(p, 0)
			return err != unix.EINTR && (err != nil || n > 0)
		})
	}()
	return ch, func() { f.Close() }
}

func pollAfter(lastOutput time.Time) time.Duration {
	if time.Since(lastOutput) > idleAfter {
		return idleLogPoll
	}
	return logPoll
}

// ended reports whether the session is over without starting a process
// where it can: the pane's process (the wrapper, which a kill-session takes
// along) is gone; tmux is asked only when that pid is unknown.
func (t *tmuxLogProc) ended() bool {
	if t.pid > 0 {
		return processEnded(t.pid)
	}
	_, err := tmuxCmd(context.Background(), "has-session", "-t", "="+t.name)
	return err != nil
}

func (t *tmuxLogProc) finish(r ports.CommandResult) {
	t.mu.Lock()
	t.result = r
	t.mu.Unlock()
	close(t.done)
}

func (t *tmuxLogProc) Pid() int              { return t.pid }
func (t *tmuxLogProc) Done() <-chan struct{} { return t.done }
func (t *tmuxLogProc) Wait() ports.CommandResult {
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.result
}

// WriteStdin types into the pane, as a terminal would.
func (t *tmuxLogProc) WriteStdin(b []byte) error {
	_, err := tmuxCmd(context.Background(), "send-keys", "-t", "="+t.name+":", "-l", "--", string(b))
	return err
}

// CloseStdin is Ctrl-D, end of input on a terminal.
func (t *tmuxLogProc) CloseStdin() error { return t.WriteStdin([]byte{4}) }

func (t *tmuxLogProc) Resize(cols, rows uint16) error {
	_, err := tmuxCmd(context.Background(), "resize-window", "-t", "="+t.name+":", "-x", strconv.Itoa(int(cols)), "-y", strconv.Itoa(int(rows)))
	return err
}

func (t *tmuxLogProc) Signal(sig int) error { return signalPane(t.name, sig) }

func (t *tmuxLogProc) Kill() {
	t.mu.Lock()
	t.killed = true
	t.mu.Unlock()
	_, _ = tmuxCmd(context.Background(), "kill-session", "-t", "="+t.name)
}

// Detach stops following: the session stays for the next agent process.
func (t *tmuxLogProc) Detach() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.detached {
		t.detached = true
		close(t.stop)
	}
}

func (t *tmuxLogProc) isDetached() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.detached
}

// processEnded reports whether pid has ended. A zombie has: when the tmux
// server exits with its last session before reaping the pane's process,
// that process goes to the nearest subreaper, and under one that never
// waits it stays a zombie for good, which kill(pid, 0) still finds.
func processEnded(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return true
		}
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) // no /proc to read
	}
	state, ok := procState(string(stat))
	return ok && (state == 'Z' || state == 'X')
}

// procState is the state letter of a /proc/<pid>/stat line: the field after
// the command name, which is in parentheses and may itself hold spaces and
// parentheses, so the last ')' ends it.
func procState(stat string) (byte, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) || stat[i+1] != ' ' {
		return 0, false
	}
	return stat[i+2], true
}
