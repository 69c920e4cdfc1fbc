package agentrpc

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/telemetry"
)

// startTransferSpan starts the link's span of a file operation (nil when
// tracing is off or it is not sampled).
func (s *Service) startTransferSpan(ctx context.Context, agentID string, req *sandboxv1.FileRequest) *linkSpan {
	tr := s.cfg.Tracing.Tracer()
	if tr == nil {
		return nil
	}
	_, span := tr.Start(ctx, "agentrpc.File", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("agentic.agent_id", agentID), attribute.String("agentic.transfer_id", req.GetTransferId()),
			attribute.String("agentic.file_op", req.GetOp().String())))
	return s.linkSpan(agentID, span)
}

// spansReported hands an agent's spans to the relay, which takes only
// those of traces this server started on that agent, within bounds. Spans
// are best effort: what breaks the rules is dropped and noted in the debug
// log, never an error that ends the agent's stream.
func (s *Service) spansReported(c *conn, rep *sandboxv1.SpanReport) {
	relay := s.cfg.Tracing.Relay()
	if relay == nil {
		return
	}
	if n := len(rep.GetSpans()); n > telemetry.MaxReportSpans {
		s.log.Debug("agent spans dropped", "agent_id", c.agentID, "spans", n, "err", "too many spans in one report")
		return
	}
	if n, err := relay.Accept(c.agentID, agentwire.Spans(rep)); err != nil {
		s.log.Debug("agent spans dropped", "agent_id", c.agentID, "taken", n, "sent", len(rep.GetSpans()), "err", err)
	}
}
