package agentrpc

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/telemetry"
	"github.com/agentic-sandbox/agentic-sandbox/internal/telemetry/spanwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A traced command carries the link span's traceparent to the agent; the
// spans the agent sends back under it are exported as the link span's
// children; spans of other traces, or from another agent, are not.
func TestTracedCommandTakesTheAgentsSpansBack(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := telemetry.NewForTest(rec)
	h := newHarness(t, func(c *Config) { c.Tracing = tr })
	a := h.connectAgent("agent-a")
	b := h.connectAgent("agent-b")

	ctx, request := tr.Tracer().Start(context.Background(), "request")
	cmd, err := h.svc.Start(ctx, "agent-a", ports.CommandSpec{Command: "true"}, ports.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req := a.recv().GetCommand()
	parent, ok := spanwire.ParseTraceparent(req.GetTraceparent())
	if !ok || parent.TraceID() != request.SpanContext().TraceID() {
		t.Fatalf("traceparent %q of the request's trace %s", req.GetTraceparent(), request.SpanContext().TraceID())
	}
	now := time.Now()
	mine := spanwire.RemoteSpan{TraceID: parent.TraceID(), SpanID: trace.SpanID{1}, ParentSpanID: parent.SpanID(),
		Name: "agentd.Command", Start: now, End: now.Add(time.Millisecond)}
	foreign := mine
	foreign.TraceID, foreign.SpanID = trace.TraceID{0xee}, trace.SpanID{2}
	other := mine
	other.SpanID = trace.SpanID{3}
	a.send(agentwire.SpanReport([]spanwire.RemoteSpan{mine, foreign}))
	b.send(agentwire.SpanReport([]spanwire.RemoteSpan{other})) // not agent-b's trace
	a.send(result(cmd.ID(), ports.CommandResult{}))
	waitDone(t, cmd)
	a.barrier()
	b.barrier()
	request.End()

	byName := map[string][]trace.SpanContext{}
	parents := map[trace.SpanID]trace.SpanID{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s.SpanContext())
		parents[s.SpanContext().SpanID()] = s.Parent().SpanID()
	}
	if len(byName["agentrpc.Command"]) != 1 || len(byName["agentd.Command"]) != 1 || len(rec.Ended()) != 3 {
		t.Fatalf("spans %v", byName)
	}
	link := byName["agentrpc.Command"][0]
	if link.SpanID() != parent.SpanID() || parents[link.SpanID()] != request.SpanContext().SpanID() {
		t.Fatal("the link span is not the request's child, or not the traceparent sent")
	}
	if got := byName["agentd.Command"][0]; got.SpanID() != mine.SpanID || parents[got.SpanID()] != link.SpanID() {
		t.Fatal("the agent's span is not the link span's child")
	}
}

// With tracing off the agent gets no traceparent, and a span report
// nobody asked for is dropped without ending the stream.
func TestUntracedCommandHasNoTraceparent(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	cmd, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "true"}, ports.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tp := a.recv().GetCommand().GetTraceparent(); tp != "" {
		t.Fatalf("traceparent %q with tracing off", tp)
	}
	// A report nobody asked for is dropped, and the stream lives on.
	now := time.Now()
	a.send(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_SpanReport{SpanReport: &sandboxv1.SpanReport{
		Spans: []*sandboxv1.AgentSpan{{TraceId: []byte{1}, Name: "x"}}}}})
	a.send(agentwire.SpanReport([]spanwire.RemoteSpan{{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, ParentSpanID: trace.SpanID{2}, Start: now, End: now}}))
	a.send(result(cmd.ID(), ports.CommandResult{}))
	waitDone(t, cmd)
	a.barrier()
}
