// Package procexec is the agent-side process runner: it starts a command in
// its own process group (piped or in a pseudo-terminal), streams its output
// as it comes, and reports how it ended. Linux only.
package procexec

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
	"github.com/agentic-sandbox/agentic-sandbox/internal/runas"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// drainGrace bounds how long output is still read after the main process
// exited, for when a background grandchild keeps the pipe or terminal open.
// The grace counts from the last output activity, so output still being
// read or handed on (a slow consumer) is never cut; drainMax bounds it for
// a grandchild that keeps writing. Variables for tests, which push one past
// their waits so that only the other end of the drain can end it in time;
// each Process takes them when it starts.
var (
	drainGrace = 200 * time.Millisecond
	drainMax   = 5 * time.Second
)

const (
	// DefaultKillGrace is the wait between SIGTERM and SIGKILL when Spec.KillGrace is 0.
	DefaultKillGrace = 2 * time.Second
	// afterKillWait bounds the wait for the group to vanish after SIGKILL
	// (a process in uninterruptible sleep dies only when it wakes).
	afterKillWait = time.Second
	// groupPoll is how often a kill checks whether the group is gone yet.
	groupPoll = 20 * time.Millisecond
	// leftMax bounds what is read after the drain ended (see readLeft).
	leftMax = 1 << 20

	defaultCols = 80
	defaultRows = 24
	defaultTerm = "xterm-256color"
	// eofChar is the terminal's default VEOF (^D).
	eofChar = 0x04
)

var (
	// ErrNoStdin is returned by WriteStdin/CloseStdin for a piped command started without StdinOpen.
	ErrNoStdin = errors.New("procexec: stdin is not open")
	// ErrNotPTY is returned by Resize for a piped command.
	ErrNotPTY = errors.New("procexec: command has no terminal")
)

// Spec says what to run and how.
type Spec struct {
	// Command is looked up in PATH (exec.LookPath semantics; the PATH of Env
	// when Env sets one). A name with a slash is used as is, relative to Dir.
	Command string
	Args    []string
	// Dir is the working directory; "" inherits the agent's.
	Dir string
	// Env is the full environment ("K=V"); nil inherits os.Environ().
	Env []string
	// Timeout kills the group (see KillGrace) when reached; 0 means none.
	Timeout time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL of the group on
	// timeout or Kill; 0 means DefaultKillGrace.
	KillGrace time.Duration
	// RunAs is a user name or uid; "" means the agent's own user. Switching
	// user needs root; as root HOME, USER and LOGNAME are set for the user.
	RunAs string
	// PTY runs the command in a new session on a pseudo-terminal.
	PTY bool
	// Cols and Rows are the terminal size; 0 means 80x24.
	Cols, Rows uint16
	// Term is TERM for a PTY command; "" means xterm-256color.
	Term string
	// StdinOpen (piped only) makes stdin a pipe fed by WriteStdin; otherwise
	// stdin is /dev/null. A PTY command always reads the terminal.
	StdinOpen bool
}

// StartError says why a command could not be started.
type StartError struct {
	Command string
	Err     error
}

func (e *StartError) Error() string {
	if errors.Is(e.Err, exec.ErrNotFound) {
		return fmt.Sprintf("command not found: %q", e.Command)
	}
	return fmt.Sprintf("cannot run %q: %v", e.Command, e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// StartFailure turns an error from Start into a result the way a shell
// would: 126 when the command exists but cannot be executed, otherwise 127.
func StartFailure(err error) ports.CommandResult {
	if err == nil {
		err = errors.New("procexec: command did not start")
	}
	code := 127
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOEXEC) {
		code = 126
	}
	return ports.CommandResult{ExitCode: code, Error: err.Error()}
}

type outputFile struct {
	f      *os.File
	stream ports.OutputStream
	big    bool // enlargePipe counted it
	// atEnd: its reader stopped at the end (EOF, or EIO of a terminal
	// whose other side closed), so nothing is left to read after it.
	// Written by the reader before it counts itself out (readersLeft).
	atEnd bool
}

// Process is a started command.
type Process struct {
	cmd       *exec.Cmd
	pid       int
	isPTY     bool
	master    *os.File // PTY master; nil when piped
	stdin     *os.File // write end of the stdin pipe; nil unless piped with StdinOpen
	outputs   []outputFile
	onOutput  func(ports.OutputStream, []byte)
	killGrace time.Duration
	timeout   time.Duration
	timer     *time.Timer
	started   time.Time
	// drainGrace and drainMax, as they were at Start.
	drainGrace, drainMax time.Duration

	outMu sync.Mutex // serialises onOutput calls
	// lastOutput is when a reader last got data or finished handing it on
	// (UnixNano); handing counts readers inside onOutput.
	lastOutput atomic.Int64
	handing    atomic.Int32
	// readersLeft counts the readers still running; the last one to stop
	// closes readersDone.
	readersLeft atomic.Int32
	readersDone chan struct{}
	done        chan struct{}
	result      ports.CommandResult // written once before done is closed

	mu sync.Mutex
	// exited: the main process has been reaped.
	exited bool
	// closing: the result is being assembled; the group id may soon belong
	// to someone else, so no more signals are sent.
	closing  bool
	timedOut bool
	killDone chan struct{} // non-nil once a kill sequence started; closed when it ends
}

// Start starts the process. onOutput (may be nil) receives output in order
// per stream; calls never overlap, each gets a fresh slice it may keep, and
// none happens after Wait returns. onOutput must not call Wait.
func Start(spec Spec, onOutput func(stream ports.OutputStream, data []byte)) (*Process, error) {
	fail := func(err error) (*Process, error) {
		return nil, &StartError{Command: spec.Command, Err: err}
	}
	var env []string
	if spec.Env == nil {
		env = os.Environ()
		if spec.Dir != "" {
			// exec.Cmd does this only for a nil Env; keep PWD truthful for shells.
			if abs, err := filepath.Abs(spec.Dir); err == nil {
				env = setEnv(env, "PWD", abs)
			}
		}
	} else {
		env = slices.Clone(spec.Env)
	}

	path, err := lookPath(spec.Command, spec.Dir, env)
	if err != nil {
		return fail(err)
	}
	// A command dies with its agent: none finishes its side effects after
	// the caller was told its agent went away. (Sessions kept in tmux are
	// the tmux server's children, not ours, and are adopted instead.)
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if spec.RunAs != "" {
		cred, u, err := runas.Credential(spec.RunAs)
		if err != nil {
			return fail(err)
		}
		if cred != nil {
			attr.Credential = cred
			if spec.Dir == "" {
				// Not the agent's own directory, which its user may not enter.
				spec.Dir = runas.Dir(u)
			}
			env = setEnv(env, "HOME", u.HomeDir)
			env = setEnv(env, "USER", u.Username)
			env = setEnv(env, "LOGNAME", u.Username)
		}
	}
	if spec.PTY {
		term := spec.Term
		if term == "" {
			term = defaultTerm
		}
		env = setEnv(env, "TERM", term)
	}

	cmd := &exec.Cmd{
		Path:        path,
		Args:        append([]string{spec.Command}, spec.Args...),
		Dir:         spec.Dir,
		Env:         env,
		SysProcAttr: attr,
	}
	p := &Process{
		cmd:         cmd,
		isPTY:       spec.PTY,
		onOutput:    onOutput,
		killGrace:   spec.KillGrace,
		timeout:     spec.Timeout,
		drainGrace:  drainGrace,
		drainMax:    drainMax,
		readersDone: make(chan struct{}),
		done:        make(chan struct{}),
	}
	if p.killGrace <= 0 {
		p.killGrace = DefaultKillGrace
	}
	if spec.PTY {
		err = p.startPTY(spec)
	} else {
		err = p.startPiped(spec)
	}
	if err != nil {
		return fail(err)
	}
	p.pid = cmd.Process.Pid

	p.readersLeft.Store(int32(len(p.outputs))) //nolint:gosec // two at most
	if len(p.outputs) == 0 {
		close(p.readersDone)
	}
	for i := range p.outputs {
		go p.read(i)
	}
	if p.timeout > 0 {
		p.timer = time.AfterFunc(p.timeout, func() { p.startKill(true) })
	}
	go p.reap()
	return p, nil
}

func (p *Process) startPiped(spec Spec) (err error) {
	var childEnds, parentEnds []*os.File
	defer func() {
		// The child has its own copies now (or never started); ours would
		// keep the pipes open and hide EOF.
		for _, f := range childEnds {
			f.Close()
		}
		if err != nil {
			for _, f := range parentEnds {
				f.Close()
			}
			for _, o := range p.outputs {
				if o.big {
					bigPipes.Add(-1)
				}
			}
			p.outputs = nil
		}
	}()
	if spec.StdinOpen {
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("pipe: %w", err)
		}
		childEnds, parentEnds = append(childEnds, r), append(parentEnds, w)
		p.cmd.Stdin, p.stdin = r, w
	} else if null := devNull(); null != nil {
		p.cmd.Stdin = null
	} // else exec.Cmd opens /dev/null
	for _, stream := range []ports.OutputStream{ports.StreamStdout, ports.StreamStderr} {
		r, w, err := outputPipe()
		if err != nil {
			return err
		}
		childEnds, parentEnds = append(childEnds, w), append(parentEnds, r)
		if stream == ports.StreamStdout {
			p.cmd.Stdout = w
		} else {
			p.cmd.Stderr = w
		}
		// stdout carries the bulk; stderr keeps the default.
		big := stream == ports.StreamStdout && enlargePipe(r)
		p.outputs = append(p.outputs, outputFile{f: r, stream: stream, big: big})
	}
	// Own group, so signals reach children and the command cannot signal us.
	p.cmd.SysProcAttr.Setpgid = true
	p.started = time.Now()
	hoptrace.Mark("agent.forking")
	return p.cmd.Start()
}

func (p *Process) startPTY(spec Spec) error {
	master, slave, err := openPTY()
	if err != nil {
		return err
	}
	defer slave.Close() // the child has its own; ours would keep EIO from ever coming
	cols, rows := spec.Cols, spec.Rows
	if cols == 0 {
		cols = defaultCols
	}
	if rows == 0 {
		rows = defaultRows
	}
	if err := setSize(master, cols, rows); err != nil {
		master.Close()
		return err
	}
	if cred := p.cmd.SysProcAttr.Credential; cred != nil {
		// Like login: the user owns its terminal (best effort).
		_ = slave.Chown(int(cred.Uid), int(cred.Gid))
	}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = slave, slave, slave
	// New session (hence new group) with the terminal as controlling tty, so
	// ^C, SIGWINCH and hangup work as in a real terminal.
	p.cmd.SysProcAttr.Setsid = true
	p.cmd.SysProcAttr.Setctty = true
	p.cmd.SysProcAttr.Ctty = 0 // child's fd 0
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		master.Close()
		return err
	}
	p.master = master
	p.outputs = []outputFile{{f: master, stream: ports.StreamPTY}}
	return nil
}

// betweenReads, when set (by tests only), runs in a reader between two
// reads: where a loaded machine may leave the reader unscheduled.
var betweenReads atomic.Pointer[func(*Process)]

// read forwards one stream until EOF, EIO (PTY slave side closed) or the
// drain deadline set by reap. Each read is as large as what is buffered
// (readChunk) and its slice is handed on as is.
func (p *Process) read(i int) {
	o := p.outputs[i]
	defer func() {
		if p.readersLeft.Add(-1) == 0 {
			close(p.readersDone)
		}
	}()
	rc, err := o.f.SyscallConn()
	if err != nil {
		return
	}
	probe := probes.Get().(*[probeSize]byte)
	defer probes.Put(probe)
	for fresh := true; ; fresh = false {
		chunk, err := readChunk(rc, probe[:], fresh)
		if len(chunk) > 0 && p.onOutput != nil {
			p.handing.Add(1)
			p.lastOutput.Store(time.Now().UnixNano())
			p.handOn(o.stream, chunk)
			p.lastOutput.Store(time.Now().UnixNano())
			p.handing.Add(-1)
		}
		if err != nil {
			p.outputs[i].atEnd = errors.Is(err, io.EOF) || errors.Is(err, syscall.EIO)
			return
		}
		if hook := betweenReads.Load(); hook != nil {
			(*hook)(p)
		}
	}
}

// reap waits for the main process, drains the output and publishes the result.
func (p *Process) reap() {
	awaitExit(p.cmd.Process.Pid)
	waitErr := p.cmd.Wait()
	exitedAt := time.Now()
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Lock()
	p.exited = true
	p.mu.Unlock()

	// Normally EOF comes at once; a leftover grandchild holding the output
	// open gets drainGrace of silence (drainMax at most).
	p.drainOutput(exitedAt)

	p.mu.Lock()
	p.closing = true
	kd := p.killDone
	p.mu.Unlock()
	if kd != nil {
		// A kill is still taking the group down (at most KillGrace): let it
		// finish so Wait returns with the group gone, reading meanwhile.
		<-kd
		select {
		case <-p.readersDone:
		case <-time.After(p.drainGrace):
		}
	}

	select {
	case <-p.readersDone: // the usual case: every reader saw the end
	default:
		for i := range p.outputs {
			// The files are in the runtime poller, so a past deadline
			// wakes a blocked Read; Close alone would not. (Indexed: a
			// copy of the element would read atEnd, which its reader
			// may be writing.)
			_ = p.outputs[i].f.SetReadDeadline(time.Now())
		}
		<-p.readersDone
	}
	for _, o := range p.outputs {
		if !o.atEnd {
			p.readLeft(o)
		}
		o.f.Close()
		if o.big {
			bigPipes.Add(-1)
		}
	}
	if p.stdin != nil {
		p.stdin.Close() // also wakes a WriteStdin blocked on a full pipe
	}

	p.result = p.buildResult(waitErr, exitedAt.Sub(p.started))
	close(p.done)
}

// handOn gives chunk, which no one else holds, to the caller, one call at
// a time.
func (p *Process) handOn(stream ports.OutputStream, chunk []byte) {
	p.outMu.Lock()
	p.onOutput(stream, chunk)
	p.outMu.Unlock()
}

// readLeft hands on what o still buffers once its reader stopped: a reader
// the machine did not schedule within the drain grace found its deadline
// passed and read nothing, though the process had written its last bytes
// before it exited. It never waits: it stops at an empty buffer (EAGAIN),
// the end (EOF, or EIO of a terminal whose other side closed) or, for a
// grandchild that writes on, after leftMax bytes.
func (p *Process) readLeft(o outputFile) {
	if p.onOutput == nil {
		return
	}
	rc, err := o.f.SyscallConn()
	if err != nil || o.f.SetReadDeadline(time.Time{}) != nil {
		return
	}
	for total := 0; total < leftMax; {
		buf := make([]byte, probeSize)
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = readFD(fd, buf)
			return true // never wait for more
		}); err != nil || rerr != nil || n <= 0 {
			return
		}
		p.handOn(o.stream, buf[:n])
		total += n
	}
}

// drainOutput waits for the readers to reach EOF, or for drainGrace without
// output activity, or for drainMax in all.
func (p *Process) drainOutput(exitedAt time.Time) {
	select {
	case <-p.readersDone:
		return // no timer needed: the usual case, the output ended with the process
	default:
	}
	deadline := exitedAt.Add(p.drainMax)
	timer := time.NewTimer(p.drainGrace)
	defer timer.Stop()
	for {
		select {
		case <-p.readersDone:
			return
		case <-timer.C:
		}
		now := time.Now()
		last := time.Unix(0, p.lastOutput.Load())
		if last.Before(exitedAt) {
			last = exitedAt
		}
		idle := now.Sub(last)
		if now.After(deadline) || (p.handing.Load() == 0 && idle >= p.drainGrace) {
			return
		}
		timer.Reset(max(p.drainGrace-idle, 10*time.Millisecond))
	}
}

func (p *Process) buildResult(waitErr error, d time.Duration) ports.CommandResult {
	res := ports.CommandResult{Duration: d, TimedOut: p.timedOut}
	st := p.cmd.ProcessState
	if st == nil {
		res.ExitCode = -1
		res.Error = fmt.Sprintf("wait: %v", waitErr)
		return res
	}
	ws, _ := st.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		res.Signal = int(ws.Signal())
		res.ExitCode = 128 + res.Signal
	} else {
		res.ExitCode = ws.ExitStatus()
	}
	if res.TimedOut {
		res.Error = fmt.Sprintf("timed out after %v", p.timeout)
	}
	return res
}

// startKill begins SIGTERM, then SIGKILL after killGrace, to the group.
func (p *Process) startKill(timeout bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing || p.killDone != nil {
		return
	}
	if timeout && p.exited {
		return // it ended on its own just before the deadline
	}
	p.timedOut = timeout
	kd := make(chan struct{})
	p.killDone = kd
	go p.killGroup(kd)
}

func (p *Process) killGroup(kd chan struct{}) {
	defer close(kd)
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	if p.waitGroupGone(p.killGrace) {
		return
	}
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	// SIGKILL is delivered asynchronously; wait so that "Wait returned"
	// really means "the group is gone".
	p.waitGroupGone(afterKillWait)
}

// waitGroupGone polls until no live process is left in the group or d passes.
func (p *Process) waitGroupGone(d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	for {
		if !groupAlive(p.pid) {
			return true
		}
		select {
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
}

// Pid is the process id of the main process; it is also its process group id.
func (p *Process) Pid() int { return p.pid }

func (p *Process) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WriteStdin writes to the command's stdin (piped with StdinOpen) or to its
// terminal (PTY). It blocks while the pipe is full.
func (p *Process) WriteStdin(b []byte) error {
	f := p.stdin
	if p.isPTY {
		f = p.master
	}
	if f == nil {
		return ErrNoStdin
	}
	if p.finished() {
		return os.ErrProcessDone
	}
	_, err := f.Write(b)
	return err
}

// CloseStdin signals end of input: it closes the pipe, or for a PTY types
// the terminal's EOF character (^D), which ends input in canonical mode.
func (p *Process) CloseStdin() error {
	if p.isPTY {
		return p.WriteStdin([]byte{eofChar})
	}
	if p.stdin == nil {
		return ErrNoStdin
	}
	if p.finished() {
		return os.ErrProcessDone
	}
	return p.stdin.Close()
}

// Resize sets the terminal size; the kernel sends SIGWINCH to the foreground group.
func (p *Process) Resize(cols, rows uint16) error {
	if !p.isPTY {
		return ErrNotPTY
	}
	if cols == 0 || rows == 0 {
		return fmt.Errorf("procexec: invalid terminal size %dx%d", cols, rows)
	}
	if p.finished() {
		return os.ErrProcessDone
	}
	return setSize(p.master, cols, rows)
}

// Signal sends sig to the whole process group.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return os.ErrProcessDone
	}
	if err := syscall.Kill(-p.pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	return nil
}

// Kill sends SIGTERM to the group, then SIGKILL after KillGrace if anything
// in it is still alive. It returns at once; the result follows as usual.
func (p *Process) Kill() { p.startKill(false) }

// Done is closed when Wait's result is ready.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait blocks until the process exited and its output was drained. It may be
// called many times, concurrently.
func (p *Process) Wait() ports.CommandResult {
	<-p.done
	return p.result
}
