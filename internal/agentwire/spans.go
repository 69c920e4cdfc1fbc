package agentwire

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/telemetry/spanwire"
)

// SpanReport is the message carrying an agent's finished spans.
func SpanReport(spans []spanwire.RemoteSpan) *sandboxv1.ConnectRequest {
	rep := &sandboxv1.SpanReport{}
	for _, s := range spans {
		rep.Spans = append(rep.Spans, &sandboxv1.AgentSpan{
			TraceId: s.TraceID[:], SpanId: s.SpanID[:], ParentSpanId: s.ParentSpanID[:],
			Name: s.Name, StartTime: timestamppb.New(s.Start), EndTime: timestamppb.New(s.End),
			Error: s.Error, StatusMessage: s.StatusMessage, Attributes: s.Attributes,
		})
	}
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_SpanReport{SpanReport: rep}}
}

// Spans reads a report's spans; a span whose ids are not of their length
// gets zero ids (the relay drops it).
func Spans(rep *sandboxv1.SpanReport) []spanwire.RemoteSpan {
	out := make([]spanwire.RemoteSpan, 0, len(rep.GetSpans()))
	for _, s := range rep.GetSpans() {
		var r spanwire.RemoteSpan
		if b := s.GetTraceId(); len(b) == len(r.TraceID) {
			copy(r.TraceID[:], b)
		}
		if b := s.GetSpanId(); len(b) == len(r.SpanID) {
			copy(r.SpanID[:], b)
		}
		if b := s.GetParentSpanId(); len(b) == len(r.ParentSpanID) {
			copy(r.ParentSpanID[:], b)
		}
		r.Name, r.Error, r.StatusMessage, r.Attributes = s.GetName(), s.GetError(), s.GetStatusMessage(), s.GetAttributes()
		r.Start, r.End = timeOf(s.GetStartTime()), timeOf(s.GetEndTime())
		out = append(out, r)
	}
	return out
}

func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil || ts.CheckValid() != nil {
		return time.Time{}
	}
	return ts.AsTime()
}
