package rest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/core/agent"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// ExecCommand runs a command and waits for its result. The command runs under
// the request's context, so it is killed when the caller goes away.
func (s *Server) ExecCommand(ctx context.Context, req restapi.ExecCommandRequestObject) (restapi.ExecCommandResponseObject, error) {
	hoptrace.Mark("mgmt.exec_request")
	if len(req.AgentId) > maxIDLen {
		return nil, portError(ports.ErrAgentNotFound, fmt.Sprintf("agent %q", clip(req.AgentId)))
	}
	o, apiErr := buildSpec(req.Body, true)
	if apiErr != nil {
		return nil, apiErr
	}
	o.spec.StdinOpen = o.hasStdin
	col := &collector{max: o.maxOut}
	onOutput := col.add
	var streamed *streamer
	form := streamWanted(ctx)
	if form != "" {
		// Accept: multipart/mixed or application/x-ndjson (exec_stream.go).
		streamed = newStreamer(o.maxOut)
		onOutput = streamed.add
	}
	if hoptrace.On() {
		// The first output to reach this handler (benchrun -exec-hops).
		next, first := onOutput, sync.Once{}
		onOutput = func(ch ports.OutputChunk) {
			first.Do(func() { hoptrace.Mark("mgmt.exec_output") })
			next(ch)
		}
	}
	// Its id says it is an exec's: a restarted server kills it (its caller
	// went with the server).
	cmd, err := s.d.Link.Start(ctx, req.AgentId, o.spec, ports.StartOptions{OnOutput: onOutput, CommandID: newExecID()})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, portError(err, fmt.Sprintf("agent %q", req.AgentId))
	}
	log := s.log.With("agent", req.AgentId, "command_id", cmd.ID())
	log.InfoContext(ctx, "rest: exec started", "program", o.spec.Command, "pty", o.spec.PTY, "timeout", o.spec.Timeout)
	if o.hasStdin {
		if err := cmd.WriteStdin(ctx, o.stdin, true); err != nil && !errors.Is(err, ports.ErrCommandEnded) {
			// Without its stdin the command could wait forever for it.
			s.kill(ctx, cmd)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, portError(err, fmt.Sprintf("command %q", cmd.ID()))
		}
	}
	if streamed != nil {
		return execStream{s: s, ctx: ctx, cmd: cmd, agentID: req.AgentId, out: streamed, form: form}, nil
	}
	select {
	case <-cmd.Done():
	case <-ctx.Done():
		// The link kills a non-detached command with its context; the
		// explicit kill makes sure of it.
		s.kill(ctx, cmd)
		stdout, stderr, _ := col.take()
		putOutBuf(stdout)
		putOutBuf(stderr)
		log.InfoContext(ctx, "rest: exec caller went away; command killed")
		return nil, ctx.Err()
	}
	hoptrace.Mark("mgmt.exec_woken")
	res := cmd.Result()
	stdout, stderr, truncated := col.take()
	if agent.Lost(res) {
		// Its agent lost it (came back without it, or never came back):
		// no exit code to tell.
		log.WarnContext(ctx, "rest: exec lost with its agent", "reason", res.Error)
		putOutBuf(stdout)
		putOutBuf(stderr)
		return nil, lostError(fmt.Sprintf("command %q", cmd.ID()), res)
	}
	// The answer is written from the collected bytes (execanswer.go), as
	// encoding/json would write restapi.ExecCommand200JSONResponse; the
	// line saying it ended once the client has it.
	ans := newExecAnswer(execResult(cmd.ID(), req.AgentId, res, nil, nil, truncated), stdout, stderr)
	ans.answered = func() {
		log.InfoContext(ctx, "rest: exec ended", "exit_code", res.ExitCode, "timed_out", res.TimedOut, "duration", res.Duration)
	}
	return ans, nil
}

// kill stops cmd even when ctx has ended, within killTimeout.
func (s *Server) kill(ctx context.Context, cmd ports.Command) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	defer cancel()
	if err := cmd.Kill(kctx); err != nil && !errors.Is(err, ports.ErrCommandEnded) {
		s.log.WarnContext(ctx, "rest: kill failed", "command_id", cmd.ID(), "err", err)
	}
}

func execResult(id, agentID string, r ports.CommandResult, stdout, stderr []byte, truncated bool) restapi.ExecResult {
	so, se, enc := encodeOutput(stdout, stderr)
	out := restapi.ExecResult{
		CommandId:  id,
		AgentId:    agentID,
		ExitCode:   r.ExitCode,
		Stdout:     so,
		Stderr:     se,
		Encoding:   enc,
		DurationMs: r.Duration.Milliseconds(),
		TimedOut:   r.TimedOut,
		Success:    r.Success(),
		Truncated:  truncated,
	}
	if r.Signal != 0 {
		sig := r.Signal
		out.Signal = &sig
	}
	if r.Error != "" {
		msg := r.Error
		out.Error = &msg
	}
	return out
}
