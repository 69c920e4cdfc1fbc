// Package wakeful decorates the ports through which work reaches an agent
// (its link, its files, the connections into its environment, the session
// use case) so that the work first tells the agent's environment it is in
// use (ports.EnvironmentUse): a hibernated environment is woken before the
// work goes on, and one in use is not put to sleep by its idle policy. The
// server wires them once (cmd/agentic-mgmt), so no adapter and no other use
// case knows about hibernation.
//
// What holds and what only touches:
//   - a command (an exec, a background command, a task step, a mission's
//     run, a headless session) holds its environment until it ends;
//   - a file call holds it until the call, or the reader it returned, ends;
//   - a connection into the environment (a preview, a port-forward) holds it
//     until it is closed, and its traffic touches it;
//   - a viewer of a session holds it until it leaves (or the session ends);
//   - a kept session (interactive or background: a shell, a dev server)
//     holds it only while it is being started: it may live for days, and an
//     environment whose session nobody watches and which writes nothing
//     should be let sleep. Its output touches the environment instead.
//
// A wake that fails comes back to the caller as ports.ErrWakeFailed.
package wakeful

import (
	"context"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Link is a ports.AgentLink whose commands use their environment.
type Link struct {
	ports.AgentLink
	Use ports.EnvironmentUse
	// AttachedOutput is the kind of use the output of a command bound by
	// Attach touches ("" none). The session use case's link sets
	// ports.UseSession: it binds a kept session's command again each time
	// the agent comes back (after a wake too), and that output is the
	// session's activity. The others need none: a command bound again is
	// one the agent runs, which the idle policy counts already.
	AttachedOutput string
}

var _ ports.AgentLink = Link{}

// Start wakes agentID's environment when it sleeps, then starts the
// command. A kept session touches the environment with each chunk of its
// output instead of holding it; any other command holds it until it ends.
// Nothing is held after a start that fails.
func (l Link) Start(ctx context.Context, agentID string, spec ports.CommandSpec, opts ports.StartOptions) (ports.Command, error) {
	if opts.Housekeeping {
		// The server's own command on a pool's idle member (its warm-up):
		// no environment's use, and never a reason to wake one.
		return l.AgentLink.Start(ctx, agentID, spec, opts)
	}
	kind := ports.UseExec
	if spec.SessionType != "" {
		kind = ports.UseSession
	}
	release, err := l.Use.Use(ctx, agentID, kind)
	if err != nil {
		return nil, err
	}
	if kept(spec.SessionType) {
		// The session's shell or process is not work that ends: the hold
		// covers its start only (see the package comment).
		defer release()
		opts.OnOutput = touching(l.Use, agentID, ports.UseSession, opts.OnOutput)
		return l.AgentLink.Start(ctx, agentID, spec, opts)
	}
	cmd, err := l.AgentLink.Start(ctx, agentID, spec, opts)
	if err != nil {
		release()
		return nil, err
	}
	go func() {
		<-cmd.Done()
		release()
	}()
	return cmd, nil
}

// Attach binds the command as the link does; its output touches the
// environment when AttachedOutput says so.
func (l Link) Attach(agentID, commandID string, opts ports.StartOptions) ports.Command {
	if l.AttachedOutput != "" {
		opts.OnOutput = touching(l.Use, agentID, l.AttachedOutput, opts.OnOutput)
	}
	return l.AgentLink.Attach(agentID, commandID, opts)
}

// kept is a session type whose command lives on whether or not anyone
// works with it: a terminal or a background process.
func kept(t ports.SessionType) bool {
	return t == ports.SessionInteractive || t == ports.SessionBackground
}

// touching is out, touching agentID's environment first with each chunk:
// once per chunk, never per byte (Touch is a few atomic stores).
func touching(use ports.EnvironmentUse, agentID, kind string, out func(ports.OutputChunk)) func(ports.OutputChunk) {
	if out == nil {
		return nil
	}
	return func(c ports.OutputChunk) {
		use.Touch(agentID, kind)
		out(c)
	}
}
