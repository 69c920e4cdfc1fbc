package agentrpc

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	"github.com/agentic-sandbox/agentic-sandbox/core/agent"
	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// maxExecQueueBytes bounds output waiting for a slow Exec caller; beyond it
// the command is killed rather than buffered without end.
const maxExecQueueBytes = 64 << 20

// SetExecLink makes the operator Exec RPC start its commands through link
// (a decorator of this service, as the other callers of the link get),
// instead of straight on this service.
func (s *Service) SetExecLink(link ports.AgentLink) {
	s.execLink.Store(&link)
}

// Exec runs one command for an operator and streams its output and result.
func (s *Service) Exec(ctx context.Context, req *connect.Request[sandboxv1.ExecRequest], stream *connect.ServerStream[sandboxv1.ExecResponse]) error {
	if !s.auth.operatorAuthorized(req.Header().Get("Authorization")) {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("missing or wrong operator bearer token"))
	}
	msg := req.Msg
	if msg.GetCommand().GetCommand() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("command.command is required"))
	}
	spec := agentwire.CommandSpec(msg.GetCommand())
	spec.StdinOpen = len(msg.GetStdin()) > 0

	q := &chunkQueue{notify: make(chan struct{}, 1)}
	link := ports.AgentLink(s)
	if l := s.execLink.Load(); l != nil {
		link = *l
	}
	cmd, err := link.Start(ctx, msg.GetAgentId(), spec, ports.StartOptions{OnOutput: q.push})
	switch {
	case errors.Is(err, ports.ErrAgentNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ports.ErrAgentNotConnected):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case err != nil:
		return connect.NewError(connect.CodeUnavailable, err)
	}
	if spec.StdinOpen {
		if err := cmd.WriteStdin(ctx, msg.GetStdin(), true); err != nil {
			return connect.NewError(connect.CodeUnavailable, err)
		}
	}
	sendQueued := func() error {
		for _, ch := range q.drain() {
			out := &sandboxv1.OutputChunk{StreamId: cmd.ID(), Stream: agentwire.StreamToProto(ch.Stream), Data: ch.Data, Offset: ch.Offset}
			if err := stream.Send(&sandboxv1.ExecResponse{Payload: &sandboxv1.ExecResponse_Output{Output: out}}); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		select {
		case <-q.notify:
			if q.overflowed() {
				_ = cmd.Kill(context.Background())
				return connect.NewError(connect.CodeResourceExhausted, errors.New("caller too slow: output queue full, command killed"))
			}
			if err := sendQueued(); err != nil {
				return err
			}
		case <-cmd.Done():
			if err := sendQueued(); err != nil {
				return err
			}
			r := cmd.Result()
			if agent.Lost(r) {
				return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%w: %s", ports.ErrAgentGone, r.Error))
			}
			return stream.Send(&sandboxv1.ExecResponse{Payload: &sandboxv1.ExecResponse_Result{Result: agentwire.CommandResult(cmd.ID(), r)}})
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// chunkQueue decouples the agent receive loop from a slow RPC caller.
type chunkQueue struct {
	mu     sync.Mutex
	chunks []ports.OutputChunk
	bytes  int
	over   bool
	notify chan struct{}
}

func (q *chunkQueue) push(c ports.OutputChunk) {
	q.mu.Lock()
	if q.bytes+len(c.Data) > maxExecQueueBytes {
		q.over = true
	} else {
		q.chunks = append(q.chunks, c)
		q.bytes += len(c.Data)
	}
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *chunkQueue) drain() []ports.OutputChunk {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.chunks
	q.chunks, q.bytes = nil, 0
	return out
}

func (q *chunkQueue) overflowed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.over
}
