package rest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// StartCommand starts a detached command whose output this server keeps.
// MaxRunningCommandsPerAgent bounds what one agent runs at once, started
// through REST (missions and sessions have their own bounds).
const MaxRunningCommandsPerAgent = 256

func (s *Server) StartCommand(ctx context.Context, req restapi.StartCommandRequestObject) (restapi.StartCommandResponseObject, error) {
	if len(req.AgentId) > maxIDLen {
		return nil, portError(ports.ErrAgentNotFound, fmt.Sprintf("agent %q", clip(req.AgentId)))
	}
	o, apiErr := buildSpec(req.Body, false)
	if apiErr != nil {
		return nil, apiErr
	}
	// Background commands are counted: an agent runs at most so many.
	if a, ok := s.d.Agents.Agent(req.AgentId); ok && a.RunningCommands >= MaxRunningCommandsPerAgent {
		return nil, newError(http.StatusTooManyRequests, "too_many_commands", "agent %q runs %d commands, the limit is %d; wait for one to end or kill one",
			clip(req.AgentId), a.RunningCommands, MaxRunningCommandsPerAgent)
	}
	// Stdin stays open for later writes through the stdin endpoint.
	o.spec.StdinOpen = true
	e := newEntry(req.AgentId, o.maxOut, o.spec.PTY)
	// Its id says it is this API's, for a restarted server to adopt it.
	cmd, err := s.d.Link.Start(ctx, req.AgentId, o.spec, ports.StartOptions{OnOutput: e.onOutput, Detached: true, CommandID: newCommandID()})
	if err != nil {
		return nil, portError(err, fmt.Sprintf("agent %q", req.AgentId))
	}
	e.mu.Lock()
	e.id, e.cmd = cmd.ID(), cmd
	e.mu.Unlock()
	s.store.add(cmd.ID(), e)
	go func() {
		<-cmd.Done()
		e.finish(cmd.Result(), s.clock.Now())
	}()
	s.log.InfoContext(ctx, "rest: command started", "agent", req.AgentId, "command_id", cmd.ID(), "program", o.spec.Command, "pty", o.spec.PTY)
	if o.hasStdin {
		// The command runs already; a failed first write is not worth hiding
		// its id from the caller, who can write again.
		if err := cmd.WriteStdin(ctx, o.stdin, false); err != nil {
			s.log.WarnContext(ctx, "rest: writing initial stdin failed", "command_id", cmd.ID(), "err", err)
		}
	}
	return restapi.StartCommand202JSONResponse(e.status(0, 0)), nil
}

// lookup finds a command: ours (with output) or one the link knows from
// elsewhere (controllable, but without output).
func (s *Server) lookup(id string) (*entry, ports.Command, *apiError) {
	subject := fmt.Sprintf("command %q", clip(id))
	if len(id) > maxIDLen {
		return nil, nil, commandNotFound(subject)
	}
	e, ok, expired := s.store.get(id)
	if ok {
		return e, e.cmd, nil
	}
	if expired {
		return nil, nil, commandExpired(subject)
	}
	if cmd, ok := s.d.Link.Lookup(id); ok {
		return nil, cmd, nil
	}
	return nil, nil, commandNotFound(subject)
}

// GetCommand returns state and output, long-polling with wait_ms.
func (s *Server) GetCommand(ctx context.Context, req restapi.GetCommandRequestObject) (restapi.GetCommandResponseObject, error) {
	var stdoutFrom, stderrFrom int64
	var wait time.Duration
	p := req.Params
	if p.StdoutFrom != nil {
		if stdoutFrom = *p.StdoutFrom; stdoutFrom < 0 {
			return nil, badRequest("parameter stdout_from: must be 0 or more")
		}
	}
	if p.StderrFrom != nil {
		if stderrFrom = *p.StderrFrom; stderrFrom < 0 {
			return nil, badRequest("parameter stderr_from: must be 0 or more")
		}
	}
	if p.WaitMs != nil {
		if *p.WaitMs < 0 || *p.WaitMs > maxWaitMS {
			return nil, badRequest("parameter wait_ms: must be between 0 and %d", maxWaitMS)
		}
		wait = time.Duration(*p.WaitMs) * time.Millisecond
	}
	e, cmd, apiErr := s.lookup(req.CommandId)
	if apiErr != nil {
		return nil, apiErr
	}
	if e == nil {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-cmd.Done():
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		if r, gone := lost(nil, cmd); gone {
			return nil, lostError(fmt.Sprintf("command %q", req.CommandId), r)
		}
		return restapi.GetCommand200JSONResponse(foreignStatus(cmd)), nil
	}
	stdoutFrom, stderrFrom = e.wait(ctx, stdoutFrom, stderrFrom, wait)
	if r, gone := lost(e, nil); gone {
		return nil, lostError(fmt.Sprintf("command %q", req.CommandId), r)
	}
	return restapi.GetCommand200JSONResponse(e.status(stdoutFrom, stderrFrom)), nil
}

// foreignStatus describes a command this API did not start: no output.
func foreignStatus(cmd ports.Command) restapi.CommandStatus {
	st := restapi.CommandStatus{
		CommandId: cmd.ID(),
		AgentId:   cmd.AgentID(),
		State:     restapi.CommandStateRunning,
		Encoding:  restapi.Utf8,
	}
	select {
	case <-cmd.Done():
		st.State = restapi.CommandStateExited
		r := execResult(cmd.ID(), cmd.AgentID(), cmd.Result(), nil, nil, false)
		st.Result = &r
	default:
	}
	return st
}

// KillCommand kills the command's process group; the result follows.
func (s *Server) KillCommand(ctx context.Context, req restapi.KillCommandRequestObject) (restapi.KillCommandResponseObject, error) {
	e, cmd, subject, err := s.running(req.CommandId)
	if err != nil {
		return nil, err
	}
	if err := cmd.Kill(ctx); err != nil {
		return nil, portError(err, subject)
	}
	s.log.InfoContext(ctx, "rest: command killed by operator", "command_id", req.CommandId)
	if e == nil {
		return restapi.KillCommand202JSONResponse(foreignStatus(cmd)), nil
	}
	// Offsets past the end: the answer carries the state, not output again.
	return restapi.KillCommand202JSONResponse(e.status(math.MaxInt64, math.MaxInt64)), nil
}

// running is the command id names while it has not ended, with the subject
// its errors name.
func (s *Server) running(id string) (*entry, ports.Command, string, error) {
	e, cmd, apiErr := s.lookup(id)
	if apiErr != nil {
		return nil, nil, "", apiErr
	}
	subject := fmt.Sprintf("command %q", id)
	if r, gone := lost(e, cmd); gone {
		return nil, nil, "", lostError(subject, r)
	}
	if ended(e, cmd) {
		return nil, nil, "", portError(ports.ErrCommandEnded, subject)
	}
	return e, cmd, subject, nil
}

func ended(e *entry, cmd ports.Command) bool {
	if e != nil {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.ended
	}
	select {
	case <-cmd.Done():
		return true
	default:
		return false
	}
}

// WriteCommandStdin writes to the command's stdin, optionally closing it.
// 204 only once the bytes are queued for delivery in order (the agent link
// paces and keeps them); a write that cannot be queued is refused whole:
// 429 stdin_busy, 503 agent_not_connected.
func (s *Server) WriteCommandStdin(ctx context.Context, req restapi.WriteCommandStdinRequestObject) (restapi.WriteCommandStdinResponseObject, error) {
	b := req.Body
	var data []byte
	eof := b.Eof != nil && *b.Eof
	switch {
	case b.Data != nil && b.DataBase64 != nil:
		return nil, badRequest("fields data and data_base64: give one of them, not both")
	case b.Data != nil:
		data = []byte(*b.Data)
	case b.DataBase64 != nil:
		data = *b.DataBase64
	case !eof:
		return nil, badRequest("give data, data_base64 or eof")
	}
	e, cmd, subject, err := s.running(req.CommandId)
	if err != nil {
		return nil, err
	}
	if e != nil {
		e.mu.Lock()
		closed := e.stdinClosed
		e.mu.Unlock()
		if closed {
			return nil, newError(http.StatusConflict, "stdin_closed", "%s: stdin was already closed (eof)", subject)
		}
	}
	if err := cmd.WriteStdin(ctx, data, eof); err != nil {
		if errors.Is(err, ports.ErrAgentNotConnected) {
			// Nothing was queued: a refusal to retry, not a conflict.
			e := newError(http.StatusServiceUnavailable, "agent_not_connected", "%s: the agent is not connected; nothing was written, retry once it has reconnected", subject)
			e.retryAfter = 1
			return nil, e
		}
		return nil, portError(err, subject)
	}
	if e != nil && eof {
		e.mu.Lock()
		e.stdinClosed = true
		e.mu.Unlock()
	}
	return restapi.WriteCommandStdin204Response{}, nil
}

// ResizeCommand changes a PTY's size.
func (s *Server) ResizeCommand(ctx context.Context, req restapi.ResizeCommandRequestObject) (restapi.ResizeCommandResponseObject, error) {
	b := req.Body
	if b.Cols < 1 || b.Cols > 1000 {
		return nil, badRequest("field cols: must be between 1 and 1000, got %d", b.Cols)
	}
	if b.Rows < 1 || b.Rows > 1000 {
		return nil, badRequest("field rows: must be between 1 and 1000, got %d", b.Rows)
	}
	e, cmd, apiErr := s.lookup(req.CommandId)
	if apiErr != nil {
		return nil, apiErr
	}
	subject := fmt.Sprintf("command %q", req.CommandId)
	if e != nil && !e.pty {
		return nil, newError(http.StatusConflict, "not_a_pty", "%s: does not run in a PTY, so it has no size", subject)
	}
	if r, gone := lost(e, cmd); gone {
		return nil, lostError(subject, r)
	}
	if ended(e, cmd) {
		return nil, portError(ports.ErrCommandEnded, subject)
	}
	if err := cmd.Resize(ctx, uint16(b.Cols), uint16(b.Rows)); err != nil {
		return nil, portError(err, subject)
	}
	return restapi.ResizeCommand204Response{}, nil
}

// SignalCommand sends a signal to the command's process group.
func (s *Server) SignalCommand(ctx context.Context, req restapi.SignalCommandRequestObject) (restapi.SignalCommandResponseObject, error) {
	sig, ok := parseSignal(req.Body.Signal)
	if !ok {
		return nil, badRequest("field signal: unknown signal %q; use a name (INT, TERM, KILL, HUP, USR1, WINCH, …) or a number 1..64", clip(req.Body.Signal))
	}
	_, cmd, subject, err := s.running(req.CommandId)
	if err != nil {
		return nil, err
	}
	if err := cmd.Signal(ctx, sig); err != nil {
		return nil, portError(err, subject)
	}
	s.log.InfoContext(ctx, "rest: signal sent", "command_id", req.CommandId, "signal", sig)
	return restapi.SignalCommand204Response{}, nil
}
