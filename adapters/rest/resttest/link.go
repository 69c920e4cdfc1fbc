// Package resttest holds an in-memory ports.AgentLink and AgentDirectory for
// tests of the REST adapter and of the clients built on it (agenticctl). It
// lives in its own package so both test suites share one fake instead of two
// that drift apart.
package resttest

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Script plays a command: it emits output and ends it. It runs in its own
// goroutine after Start returns; Kill and a cancelled caller end the command
// on their own, so a script may simply wait on c.Ended().
type Script func(c *Command)

// Link is a fake ports.AgentLink and ports.AgentDirectory.
type Link struct {
	mu     sync.Mutex
	agents map[string]ports.AgentInfo
	// gone agents fail Start with ErrAgentGone.
	gone    map[string]bool
	cmds    map[string]*Command
	started []*Command
	next    int
	script  Script
	onStart func(*Command)
	startCh chan *Command
}

// NewLink returns a link whose commands run DefaultScript.
func NewLink() *Link {
	return &Link{
		agents:  map[string]ports.AgentInfo{},
		gone:    map[string]bool{},
		cmds:    map[string]*Command{},
		script:  DefaultScript,
		startCh: make(chan *Command, 1024),
	}
}

// AddAgent registers an agent; Status "disconnected" makes Start fail with
// ErrAgentNotConnected.
func (l *Link) AddAgent(a ports.AgentInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.agents[a.ID] = a
}

// SetGone makes Start on agentID fail with ErrAgentGone.
func (l *Link) SetGone(agentID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gone[agentID] = true
}

// SetScript replaces the script of commands started from now on.
func (l *Link) SetScript(s Script) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.script = s
}

// SetOnStart sets a hook that runs inside Start, before Start returns.
func (l *Link) SetOnStart(f func(*Command)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onStart = f
}

// Started returns a channel that receives every started command.
func (l *Link) Started() <-chan *Command { return l.startCh }

// Commands returns every command started so far, in order.
func (l *Link) Commands() []*Command {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Command(nil), l.started...)
}

// Adopt registers a command that was not started through Start (as if
// another component of the server had started it), so that Lookup finds it.
func (l *Link) Adopt(agentID string, spec ports.CommandSpec) *Command {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.newCommandLocked(agentID, spec, ports.StartOptions{Detached: true})
	return c
}

func (l *Link) newCommandLocked(agentID string, spec ports.CommandSpec, opts ports.StartOptions) *Command {
	l.next++
	id := opts.CommandID
	if id == "" {
		id = fmt.Sprintf("cmd-%04d", l.next)
	}
	c := &Command{
		id:      id,
		agentID: agentID,
		Spec:    spec,
		Opts:    opts,
		done:    make(chan struct{}),
		stdinCh: make(chan struct{}),
		started: time.Now(),
	}
	l.cmds[c.id] = c
	l.started = append(l.started, c)
	return c
}

// Start implements ports.AgentLink.
func (l *Link) Start(ctx context.Context, agentID string, spec ports.CommandSpec, opts ports.StartOptions) (ports.Command, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	a, ok := l.agents[agentID]
	switch {
	case !ok:
		l.mu.Unlock()
		return nil, ports.ErrAgentNotFound
	case l.gone[agentID]:
		l.mu.Unlock()
		return nil, ports.ErrAgentGone
	case a.Status == ports.AgentDisconnected:
		l.mu.Unlock()
		return nil, ports.ErrAgentNotConnected
	}
	c := l.newCommandLocked(agentID, spec, opts)
	script, onStart := l.script, l.onStart
	l.mu.Unlock()
	if onStart != nil {
		onStart(c)
	}

	if !opts.Detached {
		// Like the real link: a non-detached command dies with its caller.
		go func() {
			select {
			case <-ctx.Done():
				c.mu.Lock()
				c.ctxCancelled = true
				c.mu.Unlock()
				c.finishKilled()
			case <-c.done:
			}
		}()
	}
	select {
	case l.startCh <- c:
	default:
	}
	go script(c)
	return c, nil
}

// Lookup implements ports.AgentLink.
func (l *Link) Lookup(commandID string) (ports.Command, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.cmds[commandID]
	if !ok {
		return nil, false
	}
	return c, true
}

// Attach implements ports.AgentLink: a command it knows is returned with
// the new options; an unknown one is registered as running detached on
// agentID, for the test to end (Finish, Kill) like any other.
func (l *Link) Attach(agentID, commandID string, opts ports.StartOptions) ports.Command {
	l.mu.Lock()
	defer l.mu.Unlock()
	opts.Detached = true
	if c, ok := l.cmds[commandID]; ok {
		c.mu.Lock()
		c.Opts = opts
		c.mu.Unlock()
		return c
	}
	opts.CommandID = commandID
	return l.newCommandLocked(agentID, ports.CommandSpec{}, opts)
}

// Forget drops a command from Lookup, as the real link does some time
// after a command ends.
func (l *Link) Forget(commandID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.cmds, commandID)
}

// Agents implements ports.AgentDirectory.
func (l *Link) Agents() []ports.AgentInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]ports.AgentInfo, 0, len(l.agents))
	for _, a := range l.agents {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Agent implements ports.AgentDirectory.
func (l *Link) Agent(id string) (ports.AgentInfo, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.agents[id]
	return a, ok
}

// Command is a fake running command.
type Command struct {
	id      string
	agentID string
	Spec    ports.CommandSpec
	Opts    ports.StartOptions
	started time.Time

	done    chan struct{}
	stdinCh chan struct{} // closed when stdin gets EOF

	mu           sync.Mutex
	result       ports.CommandResult
	ended        bool
	offsets      [4]uint64
	stdin        bytes.Buffer
	stdinEOF     bool
	resizes      [][2]uint16
	signals      []int
	kills        int
	ctxCancelled bool
	stdinErr     error
}

// ID implements ports.Command.
func (c *Command) ID() string { return c.id }

// AgentID implements ports.Command.
func (c *Command) AgentID() string { return c.agentID }

// Done implements ports.Command.
func (c *Command) Done() <-chan struct{} { return c.done }

// Result implements ports.Command.
func (c *Command) Result() ports.CommandResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.result
}

// WriteStdin implements ports.Command.
func (c *Command) WriteStdin(_ context.Context, data []byte, eof bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stdinErr != nil {
		return c.stdinErr
	}
	if c.ended {
		return ports.ErrCommandEnded
	}
	if c.stdinEOF {
		return fmt.Errorf("stdin of %s is closed", c.id)
	}
	c.stdin.Write(data)
	if eof {
		c.stdinEOF = true
		close(c.stdinCh)
	}
	return nil
}

// Resize implements ports.Command.
func (c *Command) Resize(_ context.Context, cols, rows uint16) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return ports.ErrCommandEnded
	}
	c.resizes = append(c.resizes, [2]uint16{cols, rows})
	return nil
}

// Signal implements ports.Command.
func (c *Command) Signal(_ context.Context, sig int) error {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return ports.ErrCommandEnded
	}
	c.signals = append(c.signals, sig)
	c.mu.Unlock()
	return nil
}

// Kill implements ports.Command.
func (c *Command) Kill(context.Context) error {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return ports.ErrCommandEnded
	}
	c.kills++
	c.mu.Unlock()
	c.finishKilled()
	return nil
}

// SetStdinError makes every later WriteStdin fail with err.
func (c *Command) SetStdinError(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stdinErr = err
}

func (c *Command) finishKilled() {
	c.Finish(ports.CommandResult{ExitCode: 128 + 9, Signal: 9})
}

// Emit sends output on a stream, with the offsets the real link would give.
func (c *Command) Emit(stream ports.OutputStream, data []byte) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	off := c.offsets[stream]
	c.offsets[stream] += uint64(len(data))
	onOutput := c.Opts.OnOutput
	c.mu.Unlock()
	if onOutput != nil {
		onOutput(ports.OutputChunk{Stream: stream, Data: append([]byte(nil), data...), Offset: off})
	}
}

// Stdout emits s on stdout (on the PTY stream for a PTY command).
func (c *Command) Stdout(s string) {
	if c.Spec.PTY {
		c.Emit(ports.StreamPTY, []byte(s))
		return
	}
	c.Emit(ports.StreamStdout, []byte(s))
}

// Stderr emits s on stderr (on the PTY stream for a PTY command).
func (c *Command) Stderr(s string) {
	if c.Spec.PTY {
		c.Emit(ports.StreamPTY, []byte(s))
		return
	}
	c.Emit(ports.StreamStderr, []byte(s))
}

// Exit ends the command with code.
func (c *Command) Exit(code int) {
	c.Finish(ports.CommandResult{ExitCode: code})
}

// Finish ends the command with r (once; later calls do nothing).
func (c *Command) Finish(r ports.CommandResult) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended = true
	if r.Duration == 0 {
		r.Duration = time.Since(c.started)
	}
	c.result = r
	c.mu.Unlock()
	close(c.done)
}

// Ended is closed when the command has ended, however.
func (c *Command) Ended() <-chan struct{} { return c.done }

// StdinClosed is closed when stdin got EOF.
func (c *Command) StdinClosed() <-chan struct{} { return c.stdinCh }

// Stdin returns what was written to stdin so far and whether it was closed.
func (c *Command) Stdin() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stdin.String(), c.stdinEOF
}

// Resizes returns every resize, in order.
func (c *Command) Resizes() [][2]uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][2]uint16(nil), c.resizes...)
}

// Signals returns every signal sent, in order.
func (c *Command) Signals() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.signals...)
}

// Killed reports whether Kill was called, and whether the caller's context
// ended while the command ran.
func (c *Command) Killed() (kills int, ctxCancelled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kills, c.ctxCancelled
}

// DefaultScript plays a few pretend programs:
//
//	echo ARGS…     prints the args on stdout, exits 0
//	fail CODE MSG  prints MSG on stderr, exits CODE
//	both           prints "out" on stdout and "err" on stderr, exits 0
//	cat            copies stdin to stdout once stdin is closed, exits 0
//	binary         prints the bytes ff fe 00 on stdout, exits 0
//	spam N         prints N bytes of "x" on stdout, exits 0
//	sleep          runs until killed
//	anything else  cannot start: exit 127 with an error
func DefaultScript(c *Command) {
	args := c.Spec.Args
	switch c.Spec.Command {
	case "echo":
		c.Stdout(strings.Join(args, " ") + "\n")
		c.Exit(0)
	case "fail":
		code := 1
		if len(args) > 0 {
			code, _ = strconv.Atoi(args[0])
		}
		if len(args) > 1 {
			c.Stderr(strings.Join(args[1:], " ") + "\n")
		}
		c.Exit(code)
	case "both":
		c.Stdout("out\n")
		c.Stderr("err\n")
		c.Exit(0)
	case "cat":
		select {
		case <-c.stdinCh:
		case <-c.done:
			return
		}
		s, _ := c.Stdin()
		c.Stdout(s)
		c.Exit(0)
	case "binary":
		c.Emit(ports.StreamStdout, []byte{0xff, 0xfe, 0x00})
		c.Exit(0)
	case "spam":
		n := 0
		if len(args) > 0 {
			n, _ = strconv.Atoi(args[0])
		}
		c.Stdout(strings.Repeat("x", n))
		c.Exit(0)
	case "sleep":
		<-c.done
	default:
		c.Finish(ports.CommandResult{ExitCode: 127, Error: fmt.Sprintf("exec: %q: executable file not found in $PATH", c.Spec.Command)})
	}
}
