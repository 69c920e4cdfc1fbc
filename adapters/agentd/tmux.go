package agentd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace/hopenv"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Sessions asked to persist live in tmux: the agent's PTY runs a tmux client
// attached to them, so a dropped agent loses only that client. The session
// remembers what the next agent process needs in tmux user options, and a
// small wrapper writes the command's exit status to a file, because tmux
// itself forgets it when the session ends.
const (
	tmuxPrefix     = "as-" // core/session.AgentNamePrefix: only these are ours
	optSessionID   = "@agentic_session_id"
	optSessionType = "@agentic_session_type"
	optExitFile    = "@agentic_exit_file"
	optLogFile     = "@agentic_log_file"
	optLogEOF      = "@agentic_log_eof" // the marker pipe-pane's command leaves once the log is complete
	// exitWrapper runs "$@" and writes its status to $0 (the exit file).
	exitWrapper = `"$@"; s=$?; echo $s >"$0.tmp" && mv "$0.tmp" "$0"; exit $s`
	// reattachLimit bounds client restarts of a session that is still there
	// but refuses clients, within reattachWindow.
	reattachLimit  = 5
	reattachWindow = 10 * time.Second
)

// tmuxUser, when set, is who the tmux server and the sessions' files
// belong to: the commands' user of an agent that runs them as another
// (Config.TmuxUser), so that its sessions run as that user too.
var tmuxUser atomic.Pointer[syscall.Credential]

// asTmuxUser makes cmd run as the tmux user, if there is one.
func asTmuxUser(cmd *exec.Cmd) *exec.Cmd {
	if c := tmuxUser.Load(); c != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c}
	}
	return cmd
}

// tmuxCmd runs a tmux control command (not a client) and returns its output.
func tmuxCmd(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := asTmuxUser(exec.CommandContext(ctx, "tmux", args...)).Output()
	return string(out), err
}

// exitDir holds the exit files; it must be the same for the next agent
// process, so it depends only on the user.
func sessionsDir() string {
	uid := os.Getuid()
	if c := tmuxUser.Load(); c != nil {
		uid = int(c.Uid)
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("agentic-sessions-%d", uid))
}

// makeSessionsDir creates the sessions dir, the tmux user's to write in.
func makeSessionsDir() {
	d := sessionsDir()
	_ = os.MkdirAll(d, 0o700)
	giveTmuxUser(d)
}

// giveTmuxUser hands path to the tmux user, whose processes write it.
func giveTmuxUser(path string) {
	if c := tmuxUser.Load(); c != nil {
		_ = os.Lchown(path, int(c.Uid), int(c.Gid))
	}
}

// tmuxProc is a ports.Process for a session kept in tmux. Its life is the
// tmux session's, across as many clients as it takes.
type tmuxProc struct {
	runner   ports.ProcessRunner
	name     string
	exitFile string
	base     ports.CommandSpec // the client's PTY, env and size
	onOutput func(ports.OutputStream, []byte)
	start    time.Time

	mu       sync.Mutex
	cur      ports.Process
	killed   bool
	detached bool
	done     chan struct{}
	result   ports.CommandResult
}

var _ ports.Process = (*tmuxProc)(nil)

// newSessionArgs are the tmux arguments creating spec's session around
// wrapped (the command under its wrapper), and recording what the next
// agent process needs in the session's options.
func newSessionArgs(spec ports.CommandSpec, detached bool, wrapped []string, opts ...string) []string {
	cols, rows := spec.Cols, spec.Rows
	if cols == 0 || rows == 0 {
		cols, rows = 80, 24
	}
	args := []string{"new-session", "-s", spec.SessionName, "-x", strconv.Itoa(int(cols)), "-y", strconv.Itoa(int(rows))}
	if detached {
		args = append(args, "-d")
	} else {
		args = append(args, "-A") // the contract's "tmux new-session -A -s <name>"
	}
	if spec.WorkingDir != "" {
		args = append(args, "-c", spec.WorkingDir)
	}
	// The pane's environment comes from the tmux server, not this client.
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-e", k+"="+spec.Env[k])
	}
	args = append(args, "--")
	args = append(args, wrapped...)
	opts = append([]string{optSessionID, spec.SessionID, optSessionType, string(spec.SessionType)}, opts...)
	for i := 0; i+1 < len(opts); i += 2 {
		args = append(args, ";", "set-option", "-q", "-t", "="+spec.SessionName+":", opts[i], opts[i+1])
	}
	return args
}

// sessionFileBase names a session's files: by name and id, because agents
// on one machine with separate tmux servers share the directory.
func sessionFileBase(spec ports.CommandSpec) string {
	id := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, spec.SessionID)
	if len(id) > 64 {
		id = id[:64]
	}
	return filepath.Join(sessionsDir(), spec.SessionName+"."+id)
}

// sessionCommand is spec's command, or the agent's shell for none.
func sessionCommand(spec ports.CommandSpec) []string {
	command := spec.Command
	if command == "" {
		if command = os.Getenv("SHELL"); command == "" {
			command = "/bin/sh"
		}
	}
	return append([]string{command}, spec.Args...)
}

// startTmuxSession creates (or, with -A, joins) the tmux session for spec
// and runs the first client in a PTY.
func startTmuxSession(runner ports.ProcessRunner, spec ports.CommandSpec, onOutput func(ports.OutputStream, []byte)) *tmuxProc {
	makeSessionsDir()
	exitFile := sessionFileBase(spec) + ".exit"
	_ = os.Remove(exitFile)
	wrapped := append([]string{"sh", "-c", exitWrapper, exitFile}, sessionCommand(spec)...)
	args := newSessionArgs(spec, false, wrapped, optExitFile, exitFile)
	cols, rows := spec.Cols, spec.Rows
	if cols == 0 || rows == 0 {
		cols, rows = 80, 24
	}
	t := &tmuxProc{runner: runner, name: spec.SessionName, exitFile: exitFile, onOutput: marked(onOutput), start: time.Now(), done: make(chan struct{})}
	t.base = ports.CommandSpec{PTY: true, Cols: cols, Rows: rows, Term: spec.Term, StdinOpen: true}
	t.run(ports.CommandSpec{Command: "tmux", Args: args})
	return t
}

// attachTmuxSession takes over a session an earlier agent process ran.
func attachTmuxSession(runner ports.ProcessRunner, found foundSession, onOutput func(ports.OutputStream, []byte)) *tmuxProc {
	t := &tmuxProc{runner: runner, name: found.name, exitFile: found.exitFile, onOutput: marked(onOutput), start: found.created, done: make(chan struct{})}
	t.base = ports.CommandSpec{PTY: true, Cols: 80, Rows: 24, StdinOpen: true}
	t.run(t.attachSpec())
	return t
}

func (t *tmuxProc) attachSpec() ports.CommandSpec {
	return ports.CommandSpec{Command: "tmux", Args: []string{"attach-session", "-t", "=" + t.name}}
}

// run starts the first client and supervises the session's clients.
func (t *tmuxProc) run(first ports.CommandSpec) {
	t.mu.Lock()
	t.cur = t.client(first)
	t.mu.Unlock()
	go t.supervise()
}

// hopTraceOnce starts the benchmarks' per-hop timeline of the keystroke
// path (AGENTIC_HOP_TRACE, internal/hoptrace) with the first session kept
// in tmux, where the path begins; unset, nothing is started.
var hopTraceOnce sync.Once

// marked is onOutput marking the hops of the per-hop timeline
// (hoptrace) when they are recorded; onOutput itself when not.
func marked(onOutput func(ports.OutputStream, []byte)) func(ports.OutputStream, []byte) {
	hopTraceOnce.Do(func() { hopenv.Start(os.Environ(), "agentic-agent") })
	if !hoptrace.On() {
		return onOutput
	}
	return func(s ports.OutputStream, b []byte) {
		hoptrace.Mark("agent.pty_read")
		onOutput(s, b)
		hoptrace.Mark("agent.queued")
	}
}

func (t *tmuxProc) client(cmd ports.CommandSpec) ports.Process {
	spec := t.base
	spec.Command, spec.Args = cmd.Command, cmd.Args
	return t.runner.Start(spec, t.onOutput)
}

// supervise waits for each client to end. While the session exists (a user
// detached the client, say) a new client is attached; once it is gone the
// result is the command's status from the exit file.
func (t *tmuxProc) supervise() {
	var restarts []time.Time
	for {
		t.mu.Lock()
		cur := t.cur
		t.mu.Unlock()
		res := cur.Wait()
		t.mu.Lock()
		detached, killed := t.detached, t.killed
		t.mu.Unlock()
		if detached {
			t.finish(ports.CommandResult{ExitCode: -1, Error: "detached: the session lives on in tmux", Duration: time.Since(t.start)})
			return
		}
		if !killed && t.exists() {
			now := time.Now()
			restarts = append(restarts, now)
			for len(restarts) > 0 && now.Sub(restarts[0]) > reattachWindow {
				restarts = restarts[1:]
			}
			if len(restarts) <= reattachLimit {
				t.mu.Lock()
				t.cur = t.client(t.attachSpec())
				t.mu.Unlock()
				continue
			}
			t.finish(ports.CommandResult{ExitCode: -1, Error: fmt.Sprintf("tmux session %s refuses clients (last: %s)", t.name, res.Error), Duration: time.Since(t.start)})
			return
		}
		t.finish(endResult(t.exitFile, killed, t.start))
		return
	}
}

// endResult is how an ended session's command exited: the exit file, else
// a signal (tmux kill-session hangs up its panes; our Kill is a kill).
func endResult(exitFile string, killed bool, start time.Time) ports.CommandResult {
	r := ports.CommandResult{Duration: time.Since(start)}
	if exitFile != "" {
		b, err := os.ReadFile(exitFile)
		_ = os.Remove(exitFile)
		if code, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
			r.ExitCode = code
			return r
		}
	}
	sig := int(syscall.SIGHUP)
	if killed {
		sig = int(syscall.SIGKILL)
	}
	r.Signal, r.ExitCode = sig, 128+sig
	return r
}

func (t *tmuxProc) finish(r ports.CommandResult) {
	t.mu.Lock()
	t.result = r
	t.mu.Unlock()
	close(t.done)
}

func (t *tmuxProc) exists() bool {
	_, err := tmuxCmd(context.Background(), "has-session", "-t", "="+t.name)
	return err == nil
}

func (t *tmuxProc) current() ports.Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cur
}

func (t *tmuxProc) Pid() int                    { return t.current().Pid() }
func (t *tmuxProc) WriteStdin(b []byte) error   { return t.current().WriteStdin(b) }
func (t *tmuxProc) CloseStdin() error           { return nil } // a terminal has no end of input
func (t *tmuxProc) Done() <-chan struct{}       { return t.done }
func (t *tmuxProc) Wait() ports.CommandResult   { <-t.done; return t.Result() }
func (t *tmuxProc) Result() ports.CommandResult { t.mu.Lock(); defer t.mu.Unlock(); return t.result }

// Resize sizes the client's PTY; tmux sizes the session to its client.
func (t *tmuxProc) Resize(cols, rows uint16) error {
	t.mu.Lock()
	t.base.Cols, t.base.Rows = cols, rows
	cur := t.cur
	t.mu.Unlock()
	return cur.Resize(cols, rows)
}

// Signal reaches the session's foreground job (what Ctrl-C would reach in
// the pane), not the tmux client.
func (t *tmuxProc) Signal(sig int) error { return signalPane(t.name, sig) }

func signalPane(name string, sig int) error {
	out, err := tmuxCmd(context.Background(), "display-message", "-p", "-t", "="+name+":", "#{pane_tty} #{pane_pid}")
	if err != nil {
		return fmt.Errorf("tmux session %s: %w", name, err)
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return fmt.Errorf("tmux session %s: no pane", name)
	}
	pgrp := 0
	if tty, err := os.OpenFile(f[0], os.O_RDONLY|syscall.O_NOCTTY, 0); err == nil {
		pgrp, _ = unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
		tty.Close()
	}
	if pgrp <= 0 {
		if pgrp, err = strconv.Atoi(f[1]); err != nil {
			return fmt.Errorf("tmux session %s: bad pane pid %q", name, f[1])
		}
	}
	err = syscall.Kill(-pgrp, syscall.Signal(sig))
	if errors.Is(err, syscall.EPERM) && tmuxUser.Load() != nil {
		// A session an earlier agent process started lives in that
		// process's user namespace: its user, not this agent, may signal it.
		kill := exec.Command("/bin/sh", "-c", `kill -"$0" -- "$1"`, strconv.Itoa(sig), "-"+strconv.Itoa(pgrp))
		if out, kerr := asTmuxUser(kill).CombinedOutput(); kerr != nil {
			return fmt.Errorf("signal session %s: %v: %s", name, kerr, out)
		}
		return nil
	}
	return err
}

// Targets: "=name" is exactly that session, "=name:" its current pane.

// Kill ends the tmux session itself, which would otherwise outlive its
// client by design.
func (t *tmuxProc) Kill() {
	t.mu.Lock()
	t.killed = true
	cur := t.cur
	t.mu.Unlock()
	_, _ = tmuxCmd(context.Background(), "kill-session", "-t", "="+t.name)
	cur.Kill()
}

// Detach ends only the client: the session stays for the next agent process.
func (t *tmuxProc) Detach() {
	t.mu.Lock()
	t.detached = true
	cur := t.cur
	t.mu.Unlock()
	cur.Kill()
}

// foundSession is a tmux session of ours that an earlier agent process ran.
type foundSession struct {
	name, sessionID, exitFile, logFile string
	eofFile                            string
	sessionType                        ports.SessionType
	created                            time.Time
}

// findTmuxSessions lists our tmux sessions (tmux missing or no server: none).
func findTmuxSessions(ctx context.Context) []foundSession {
	const sep = "\x1f"
	format := strings.Join([]string{"#{session_name}", "#{session_created}", "#{" + optSessionID + "}", "#{" + optSessionType + "}", "#{" + optExitFile + "}", "#{" + optLogFile + "}", "#{" + optLogEOF + "}"}, sep)
	out, err := tmuxCmd(ctx, "list-sessions", "-F", format)
	if err != nil {
		return nil
	}
	var found []foundSession
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, sep)
		if len(f) != 7 || !strings.HasPrefix(f[0], tmuxPrefix) {
			continue
		}
		s := foundSession{name: f[0], sessionID: f[2], sessionType: ports.SessionType(f[3]), exitFile: f[4], logFile: f[5], eofFile: f[6]}
		if sec, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			s.created = time.Unix(sec, 0)
		}
		// Only files we would have made: the option is a session's to change.
		if s.exitFile != "" && filepath.Dir(s.exitFile) != sessionsDir() {
			s.exitFile = ""
		}
		if s.logFile != "" && filepath.Dir(s.logFile) != sessionsDir() {
			s.logFile = ""
		}
		if s.eofFile != "" && (s.logFile == "" || s.eofFile != s.logFile+".eof") {
			s.eofFile = ""
		}
		found = append(found, s)
	}
	return found
}

// adoptedCommandID names the command that streams an adopted session: a
// new id, because the new client's output offsets start again at zero.
func adoptedCommandID(sessionID string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	if sessionID == "" {
		return "adopted-" + hex.EncodeToString(b)
	}
	return sessionID + "~" + hex.EncodeToString(b)
}

func haveTmux() bool {
	_, err := exec.LookPath("tmux")
	return err == nil
}

func (t *tmuxProc) isDetached() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.detached
}

// adoptTmuxSessions attaches to the sessions an earlier agent process kept
// in tmux, before the first connect, so the first session report has them
// and the server can keep, adopt or kill each.
func (a *Agent) adoptTmuxSessions(ctx context.Context) {
	// A client inside another tmux would refuse to nest.
	_ = os.Unsetenv("TMUX")
	_ = os.Unsetenv("TMUX_PANE")
	for _, f := range findTmuxSessions(ctx) {
		id := adoptedCommandID(f.sessionID)
		if f.logFile != "" && f.sessionID != "" {
			// Streamed from its raw log by file offset: the same command
			// goes on, and the server drops what it already has.
			id = f.sessionID
		}
		if f.sessionType == "" {
			f.sessionType = ports.SessionBackground
		}
		r := &running{id: id, offsets: map[ports.OutputStream]uint64{}, startedAt: f.created,
			sessionID: f.sessionID, sessionName: f.name, sessionType: f.sessionType}
		a.mu.Lock()
		a.running[r.id] = r
		a.mu.Unlock()
		found := f
		a.run(r, ports.CommandSpec{PTY: true, SessionID: f.sessionID, SessionName: f.name, SessionType: f.sessionType}, &found)
		a.log.Info("adopted a tmux session of an earlier agent process", "tmux_session", f.name, "session_id", f.sessionID, "command_id", r.id)
	}
}
