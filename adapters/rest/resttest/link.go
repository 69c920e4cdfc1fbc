// Package resttest holds the fakes for tests of the REST adapter and of the
// clients built on it (agenticctl): the agent link and directory (a
// portsfake link playing a few pretend programs), and fakes of the use cases
// the adapter serves. It lives in its own package so both test suites share
// one set of fakes instead of two that drift apart.
package resttest

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// Script plays a command (see portsfake.Script).
type Script = portsfake.Script

// Command is a fake running command.
type Command = portsfake.Command

// Link is a fake ports.AgentLink and ports.AgentDirectory whose commands
// run DefaultScript unless the test sets another.
type Link struct {
	*portsfake.Link
	*portsfake.Directory

	mu sync.Mutex
	// gone agents fail Start with ErrAgentGone.
	gone map[string]bool
}

// NewLink returns a link with no agents.
func NewLink() *Link {
	l := &Link{Directory: portsfake.NewDirectory(), gone: map[string]bool{}}
	l.Link = portsfake.NewLink(portsfake.WithScript(DefaultScript), portsfake.WithDirectory(l.Directory),
		portsfake.BeforeStart(func(agentID string, _ ports.CommandSpec) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.gone[agentID] {
				return ports.ErrAgentGone
			}
			return nil
		}))
	return l
}

// AddAgent registers an agent; Status "disconnected" makes Start fail with
// ErrAgentNotConnected.
func (l *Link) AddAgent(a ports.AgentInfo) { l.Add(a) }

// SetGone makes Start on agentID fail with ErrAgentGone.
func (l *Link) SetGone(agentID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gone[agentID] = true
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
		case <-c.StdinClosed():
		case <-c.Ended():
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
		<-c.Ended()
	default:
		c.Finish(ports.CommandResult{ExitCode: 127, Error: fmt.Sprintf("exec: %q: executable file not found in $PATH", c.Spec.Command)})
	}
}
