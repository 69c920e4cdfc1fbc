// Package portsfake holds one in-memory fake of each port the use cases
// drive (the agent link and its directory, a clock moved by hand, the event
// outbox), for the tests of core, of the adapters that sit on it and of the
// clients built on those. Tests shape a fake through its options and hooks
// rather than writing their own; ports/portstest's conformance suites run
// against these fakes too, so a fake that drifts from the real adapters fails.
package portsfake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Script plays a command: it emits output and ends it. It runs in its own
// goroutine once the command exists; Kill and a cancelled caller end the
// command on their own, so a script may simply wait on c.Ended().
type Script func(c *Command)

// OpKind names what an Op records.
type OpKind string

// The operations a link's recorder sees.
const (
	OpStart OpKind = "start"
	OpStdin OpKind = "stdin"
	OpKill  OpKind = "kill"
)

// Op is one operation on the link or one of its commands, as the recorder
// (WithRecorder) sees it: in the order they happen.
type Op struct {
	Kind      OpKind
	AgentID   string
	CommandID string
	// Spec is the command's spec (empty for a command bound by Attach).
	Spec ports.CommandSpec
}

// StartCall is one call of Start, refused or not.
type StartCall struct {
	AgentID string
	Spec    ports.CommandSpec
	Opts    ports.StartOptions
	Err     error
}

// AttachCall is one call of Attach.
type AttachCall struct {
	AgentID   string
	CommandID string
}

// LinkOption shapes a Link at construction.
type LinkOption func(*Link)

// WithScript sets what every started command does (default: nothing, the
// test drives each command through its methods).
func WithScript(s Script) LinkOption { return func(l *Link) { l.script = s } }

// WithAttachScript sets what a command bound by Attach that the link did
// not know does: the agent's report decides its fate, as when a restarted
// server binds again (default: nothing, the test drives it).
func WithAttachScript(s Script) LinkOption { return func(l *Link) { l.attachScript = s } }

// WithDirectory makes Start refuse, as the real link does, an agent d does
// not list (ErrAgentNotFound) or lists as disconnected
// (ErrAgentNotConnected). Without it every agent is taken as connected.
func WithDirectory(d *Directory) LinkOption { return func(l *Link) { l.dir = d } }

// WithKill sets what Kill does once it has counted the kill (default:
// KilledBySignal(9), the process ending at once). A test of a kill the
// agent has not carried out yet passes a func that does nothing.
func WithKill(f func(*Command)) LinkOption { return func(l *Link) { l.onKill = f } }

// WithRecorder passes every start, stdin write and kill to f, in order,
// so that a test can check their order against other fakes' operations.
func WithRecorder(f func(Op)) LinkOption { return func(l *Link) { l.record = f } }

// BeforeStart sets a hook that runs first in every Start, outside the
// link's lock (it may block); an error it returns is Start's.
func BeforeStart(f func(agentID string, spec ports.CommandSpec) error) LinkOption {
	return func(l *Link) { l.beforeStart = f }
}

// OnStart sets a hook that runs inside Start once the command exists,
// before Start returns (and before the script starts).
func OnStart(f func(*Command)) LinkOption { return func(l *Link) { l.onStart = f } }

// KilledBySignal returns a kill behaviour ending the command as signal sig
// ends a process: exit code 128+sig.
func KilledBySignal(sig int) func(*Command) {
	return func(c *Command) { c.Finish(ports.CommandResult{ExitCode: 128 + sig, Signal: sig}) }
}

// Link is a fake ports.AgentLink: commands run nowhere; the test (or a
// Script) plays the agent through each Command.
type Link struct {
	dir *Directory

	mu           sync.Mutex
	cmds         map[string]*Command // what Lookup finds
	commands     []*Command          // every command started or bound, in order
	starts       []StartCall
	attaches     []AttachCall
	next         int
	script       Script
	attachScript Script
	beforeStart  func(string, ports.CommandSpec) error
	onStart      func(*Command)
	onKill       func(*Command)
	record       func(Op)
	startCh      chan *Command
}

var _ ports.AgentLink = (*Link)(nil)

// NewLink returns a link shaped by opts.
func NewLink(opts ...LinkOption) *Link {
	l := &Link{cmds: map[string]*Command{}, onKill: KilledBySignal(9), startCh: make(chan *Command, 1024)}
	for _, o := range opts {
		o(l)
	}
	return l
}

// SetScript replaces the script of commands started from now on.
func (l *Link) SetScript(s Script) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.script = s
}

// SetOnStart replaces the OnStart hook.
func (l *Link) SetOnStart(f func(*Command)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onStart = f
}

// SetBeforeStart replaces the BeforeStart hook (nil removes it).
func (l *Link) SetBeforeStart(f func(agentID string, spec ports.CommandSpec) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.beforeStart = f
}

// Start implements ports.AgentLink.
func (l *Link) Start(ctx context.Context, agentID string, spec ports.CommandSpec, opts ports.StartOptions) (ports.Command, error) {
	l.mu.Lock()
	before := l.beforeStart
	l.mu.Unlock()
	var err error
	if before != nil {
		err = before(agentID, spec)
	}
	if err == nil {
		err = l.refusal(ctx, agentID, spec)
	}
	l.mu.Lock()
	if err == nil && opts.CommandID != "" && l.cmds[opts.CommandID] != nil {
		err = fmt.Errorf("command id %q already in use", opts.CommandID)
	}
	l.starts = append(l.starts, StartCall{AgentID: agentID, Spec: spec, Opts: opts, Err: err})
	if err != nil {
		l.mu.Unlock()
		return nil, err
	}
	c := l.newCommandLocked(agentID, spec, opts)
	script, onStart, record := l.script, l.onStart, l.record
	l.mu.Unlock()
	if record != nil {
		record(Op{Kind: OpStart, AgentID: agentID, CommandID: c.id, Spec: spec})
	}
	if onStart != nil {
		onStart(c)
	}
	if !opts.Detached {
		// Like the real link: a command that is not detached dies with its caller.
		go func() {
			select {
			case <-ctx.Done():
				c.mu.Lock()
				c.ctxCancelled = true
				c.mu.Unlock()
				KilledBySignal(9)(c)
			case <-c.done:
			}
		}()
	}
	select {
	case l.startCh <- c:
	default:
	}
	if script != nil {
		go script(c)
	}
	return c, nil
}

// refusal is the error the real link gives before it sends anything.
func (l *Link) refusal(ctx context.Context, agentID string, spec ports.CommandSpec) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if spec.Command == "" && spec.SessionType != ports.SessionInteractive {
		return errors.New("empty command")
	}
	if l.dir == nil {
		return nil
	}
	a, ok := l.dir.Agent(agentID)
	switch {
	case !ok:
		return ports.ErrAgentNotFound
	case a.Status == ports.AgentDisconnected:
		return ports.ErrAgentNotConnected
	}
	return nil
}

func (l *Link) newCommandLocked(agentID string, spec ports.CommandSpec, opts ports.StartOptions) *Command {
	l.next++
	id := opts.CommandID
	if id == "" {
		id = fmt.Sprintf("cmd-%04d", l.next)
	}
	c := &Command{
		link:    l,
		id:      id,
		agentID: agentID,
		Spec:    spec,
		Opts:    opts,
		done:    make(chan struct{}),
		stdinCh: make(chan struct{}),
		started: time.Now(),
	}
	l.cmds[id] = c
	l.commands = append(l.commands, c)
	return c
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

// Attach implements ports.AgentLink as the real link does: a command it
// runs for agentID is returned as it is; another agent's command gives a
// command that has already ended, lost; an unknown one is registered as
// running detached on agentID, and the attach script (if any) plays the
// agent's report on it.
func (l *Link) Attach(agentID, commandID string, opts ports.StartOptions) ports.Command {
	l.mu.Lock()
	l.attaches = append(l.attaches, AttachCall{AgentID: agentID, CommandID: commandID})
	if c, ok := l.cmds[commandID]; ok {
		l.mu.Unlock()
		if c.agentID == agentID {
			return c
		}
		foreign := &Command{link: l, id: commandID, agentID: agentID, done: make(chan struct{}), stdinCh: make(chan struct{})}
		foreign.Lose()
		return foreign
	}
	opts.CommandID, opts.Detached = commandID, true
	c := l.newCommandLocked(agentID, ports.CommandSpec{}, opts)
	script := l.attachScript
	l.mu.Unlock()
	if script != nil {
		go script(c)
	}
	return c
}

// Adopt registers a command that was not started through Start (as if
// another part of the server had started it), so that Lookup finds it.
// No script runs it.
func (l *Link) Adopt(agentID string, spec ports.CommandSpec) *Command {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.newCommandLocked(agentID, spec, ports.StartOptions{Detached: true})
}

// Forget drops a command from Lookup, as the real link does some time
// after a command ends.
func (l *Link) Forget(commandID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.cmds, commandID)
}

// Started returns a channel that receives every started command.
func (l *Link) Started() <-chan *Command { return l.startCh }

// Commands returns every command started (or bound by Attach, or adopted)
// so far, in order.
func (l *Link) Commands() []*Command {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.commands)
}

// Command returns the command Lookup would find under id, or nil.
func (l *Link) Command(id string) *Command {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cmds[id]
}

// Starts returns every call of Start, refused ones included, in order.
func (l *Link) Starts() []StartCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.starts)
}

// Attaches returns every call of Attach, in order.
func (l *Link) Attaches() []AttachCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.attaches)
}

func (l *Link) recordOp(op Op) {
	l.mu.Lock()
	record := l.record
	l.mu.Unlock()
	if record != nil {
		record(op)
	}
}

// Command is a fake running command, played by the test or a Script.
type Command struct {
	link    *Link
	id      string
	agentID string
	// Spec and Opts are what the command was started with (Attach's
	// options for a bound one).
	Spec    ports.CommandSpec
	Opts    ports.StartOptions
	started time.Time

	done    chan struct{}
	stdinCh chan struct{} // closed when stdin gets EOF

	outMu sync.Mutex // serialises the callbacks, as the link's receive loop does

	mu           sync.Mutex
	result       ports.CommandResult
	ended        bool
	offsets      [4]uint64
	stdin        bytes.Buffer
	writes       []string
	stdinEOF     bool
	resizes      [][2]uint16
	signals      []int
	kills        int
	ctxCancelled bool
	stdinErr     error
}

var _ ports.Command = (*Command)(nil)

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

// WriteStdin implements ports.Command; it fails with the error
// SetStdinError gave, once the command has ended or after EOF.
func (c *Command) WriteStdin(_ context.Context, data []byte, eof bool) error {
	c.mu.Lock()
	switch {
	case c.ended:
		c.mu.Unlock()
		return ports.ErrCommandEnded
	case c.stdinErr != nil:
		c.mu.Unlock()
		return c.stdinErr
	case c.stdinEOF:
		c.mu.Unlock()
		return fmt.Errorf("stdin of %s is closed", c.id)
	}
	c.stdin.Write(data)
	c.writes = append(c.writes, string(data))
	if eof {
		c.stdinEOF = true
		close(c.stdinCh)
	}
	c.mu.Unlock()
	c.link.recordOp(Op{Kind: OpStdin, AgentID: c.agentID, CommandID: c.id})
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
	defer c.mu.Unlock()
	if c.ended {
		return ports.ErrCommandEnded
	}
	c.signals = append(c.signals, sig)
	return nil
}

// Kill implements ports.Command: it counts the kill, then does what the
// link's WithKill says.
func (c *Command) Kill(context.Context) error {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return ports.ErrCommandEnded
	}
	c.kills++
	c.mu.Unlock()
	c.link.recordOp(Op{Kind: OpKill, AgentID: c.agentID, CommandID: c.id})
	c.link.mu.Lock()
	onKill := c.link.onKill
	c.link.mu.Unlock()
	if onKill != nil {
		onKill(c)
	}
	return nil
}

// SetStdinError makes every later WriteStdin fail with err (nil: succeed).
func (c *Command) SetStdinError(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stdinErr = err
}

// ReportStarted reports the process running (OnStarted), as the agent's
// first report does.
func (c *Command) ReportStarted() {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if c.Opts.OnStarted != nil {
		c.Opts.OnStarted()
	}
}

// Emit sends output on a stream, with the offsets the real link would
// give; nothing after the command has ended.
func (c *Command) Emit(stream ports.OutputStream, data []byte) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
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
		onOutput(ports.OutputChunk{Stream: stream, Data: bytes.Clone(data), Offset: off})
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
func (c *Command) Exit(code int) { c.Finish(ports.CommandResult{ExitCode: code}) }

// Lose ends the command as the real link does one the agent no longer
// runs.
func (c *Command) Lose() {
	c.Finish(ports.CommandResult{ExitCode: -1, Error: ports.ErrCommandLost.Error()})
}

// Finish ends the command with r (once; later calls do nothing). A zero
// Duration becomes the time since the command started.
func (c *Command) Finish(r ports.CommandResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	c.ended = true
	if r.Duration == 0 && !c.started.IsZero() {
		r.Duration = time.Since(c.started)
	}
	c.result = r
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

// StdinWrites returns each write to stdin, in order.
func (c *Command) StdinWrites() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.writes)
}

// Resizes returns every resize, in order.
func (c *Command) Resizes() [][2]uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.resizes)
}

// Signals returns every signal sent, in order.
func (c *Command) Signals() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.signals)
}

// Killed reports how many times Kill was called, and whether the caller's
// context ended while the command ran.
func (c *Command) Killed() (kills int, ctxCancelled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kills, c.ctxCancelled
}
