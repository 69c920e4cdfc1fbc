// Package spanwire is what both ends of the agent link share of tracing:
// the W3C traceparent the server sends with traced work, the small span
// record an agent makes (it has no tracer provider and never exports), and
// the bounds the server holds those spans to. It imports only
// OpenTelemetry's API, so the agent carries no SDK and no exporter.
package spanwire

import (
	"context"
	"crypto/rand"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Traceparent is the W3C traceparent of sc for the agent link: empty
// unless sc is valid and sampled (an agent makes spans only for those).
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// ParseTraceparent reads a W3C traceparent; ok is false for an empty,
// malformed or unsampled one.
func ParseTraceparent(v string) (trace.SpanContext, bool) {
	if v == "" || len(v) > 256 {
		return trace.SpanContext{}, false
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": v})
	sc := trace.SpanContextFromContext(ctx)
	return sc, sc.IsValid() && sc.IsSampled()
}

// RemoteSpan is a finished span an agent made, as it travels on the link
// (a SpanReport) and as the server's relay takes it.
type RemoteSpan struct {
	TraceID      trace.TraceID
	SpanID       trace.SpanID
	ParentSpanID trace.SpanID
	Name         string
	Start, End   time.Time
	Error        bool
	// StatusMessage says why, when Error is set.
	StatusMessage string
	Attributes    map[string]string
}

// AgentSpan is a span the agent records for work the server traced. The
// agent has no tracer provider and no exporter: a finished span is a
// RemoteSpan the agent sends back on the link. A nil *AgentSpan (untraced
// work) does nothing.
type AgentSpan struct {
	mu    sync.Mutex
	s     RemoteSpan
	ended bool
}

// StartRemote starts a span under the server's span a traceparent names;
// nil when the traceparent is empty, malformed or not sampled.
func StartRemote(traceparent, name string, start time.Time) *AgentSpan {
	sc, ok := ParseTraceparent(traceparent)
	if !ok {
		return nil
	}
	return &AgentSpan{s: RemoteSpan{TraceID: sc.TraceID(), SpanID: newSpanID(), ParentSpanID: sc.SpanID(), Name: name, Start: start}}
}

// Child starts a span under s (nil under nil).
func (s *AgentSpan) Child(name string, start time.Time) *AgentSpan {
	if s == nil {
		return nil
	}
	return &AgentSpan{s: RemoteSpan{TraceID: s.s.TraceID, SpanID: newSpanID(), ParentSpanID: s.s.SpanID, Name: name, Start: start}}
}

// SetAttr sets an attribute (within the bounds the server keeps).
func (s *AgentSpan) SetAttr(key, value string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s.Attributes == nil {
		s.s.Attributes = map[string]string{}
	}
	if _, ok := s.s.Attributes[key]; ok || len(s.s.Attributes) < MaxAttributes {
		s.s.Attributes[key] = value
	}
}

// End ends s at end; a non-empty errMsg marks it failed. Later calls do
// nothing.
func (s *AgentSpan) End(end time.Time, errMsg string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	s.s.End = end
	if errMsg != "" {
		s.s.Error, s.s.StatusMessage = true, errMsg
	}
}

// Finished returns the span once ended (ok false before, or for nil).
func (s *AgentSpan) Finished() (RemoteSpan, bool) {
	if s == nil {
		return RemoteSpan{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.s, s.ended
}

// Context is s's own span context (invalid for nil).
func (s *AgentSpan) Context() trace.SpanContext {
	if s == nil {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: s.s.TraceID, SpanID: s.s.SpanID, TraceFlags: trace.FlagsSampled})
}

// Bounds of the spans an agent sends back (the server cuts or drops what
// is over them).
const (
	// MaxReportSpans is the most spans of one report; a longer report is
	// dropped whole.
	MaxReportSpans = 64
	// MaxNameBytes, MaxAttributes, MaxAttrKeyBytes, MaxAttrValueBytes and
	// MaxStatusBytes cut what a span carries.
	MaxNameBytes      = 128
	MaxAttributes     = 16
	MaxAttrKeyBytes   = 64
	MaxAttrValueBytes = 256
	MaxStatusBytes    = 256
)

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	}
	return id
}
