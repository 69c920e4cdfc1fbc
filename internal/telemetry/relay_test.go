package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

type exported struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (e *exported) add(s sdktrace.ReadOnlySpan) {
	e.mu.Lock()
	e.spans = append(e.spans, s)
	e.mu.Unlock()
}

func (e *exported) len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.spans)
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func tid(b byte) trace.TraceID { return trace.TraceID{1, 2, 3, b} }

func span(t trace.TraceID, id byte) RemoteSpan {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return RemoteSpan{TraceID: t, SpanID: trace.SpanID{9, id}, ParentSpanID: trace.SpanID{8, 1}, Name: "agentd command",
		Start: start, End: start.Add(time.Second)}
}

func TestRelayTakesOnlyTracesStartedOnThatAgent(t *testing.T) {
	var out exported
	clk := &fakeClock{t: time.Now()}
	r := NewRelay(out.add, clk.now)
	done := r.Expect("agent-a", tid(1))

	if n, err := r.Accept("agent-b", []RemoteSpan{span(tid(1), 1)}); n != 0 || err == nil {
		t.Fatalf("another agent's report of the trace: took %d, err %v", n, err)
	}
	if n, err := r.Accept("agent-a", []RemoteSpan{span(tid(2), 1)}); n != 0 || err == nil {
		t.Fatalf("a trace never started: took %d, err %v", n, err)
	}
	if n, err := r.Accept("agent-a", []RemoteSpan{span(tid(1), 1), span(tid(2), 2)}); n != 1 || err == nil {
		t.Fatalf("a report with one good span: took %d, err %v", n, err)
	}
	done()
	clk.t = clk.t.Add(ReportGrace - time.Second)
	if n, _ := r.Accept("agent-a", []RemoteSpan{span(tid(1), 3)}); n != 1 {
		t.Fatalf("within the grace after the end: took %d", n)
	}
	clk.t = clk.t.Add(2 * time.Second)
	if n, err := r.Accept("agent-a", []RemoteSpan{span(tid(1), 4)}); n != 0 || err == nil {
		t.Fatalf("after the grace: took %d, err %v", n, err)
	}
	if out.len() != 2 {
		t.Fatalf("exported %d spans, want 2", out.len())
	}
	got := out.spans[0]
	if got.SpanContext().TraceID() != tid(1) || got.Parent().SpanID() != (trace.SpanID{8, 1}) || got.Name() != "agentd command" {
		t.Fatalf("exported span %v parent %v name %q", got.SpanContext(), got.Parent(), got.Name())
	}
	if svc, _ := got.Resource().Set().Value("service.name"); svc.AsString() != AgentService {
		t.Fatalf("service.name %q", svc.AsString())
	}
	if id, _ := got.Resource().Set().Value("agentic.agent_id"); id.AsString() != "agent-a" {
		t.Fatalf("agent id %q", id.AsString())
	}
}

func TestRelayBounds(t *testing.T) {
	var out exported
	r := NewRelay(out.add, nil)
	r.Expect("a", tid(1))

	long := make([]RemoteSpan, MaxReportSpans+1)
	for i := range long {
		long[i] = span(tid(1), byte(i))
	}
	if n, err := r.Accept("a", long); n != 0 || err == nil {
		t.Fatalf("a report over %d spans: took %d, err %v", MaxReportSpans, n, err)
	}

	// Strings are cut to their bounds, attributes to their count; invalid
	// UTF-8 becomes valid.
	s := span(tid(1), 1)
	s.Name = strings.Repeat("n", 1000)
	s.Error, s.StatusMessage = true, strings.Repeat("é", 1000)+"\xff"
	s.Attributes = map[string]string{}
	for i := range 40 {
		s.Attributes[strings.Repeat("k", 100)+string(rune('A'+i))] = strings.Repeat("v", 1000)
	}
	if n, err := r.Accept("a", []RemoteSpan{s}); n != 1 || err != nil {
		t.Fatalf("an oversized span: took %d, err %v", n, err)
	}
	got := out.spans[0]
	if len(got.Name()) != MaxNameBytes {
		t.Fatalf("name of %d bytes", len(got.Name()))
	}
	if st := got.Status(); st.Code != codes.Error || len(st.Description) > MaxStatusBytes || !strings.HasPrefix(st.Description, "éé") {
		t.Fatalf("status %v (%d bytes)", st.Code, len(st.Description))
	}
	if a := got.Attributes(); len(a) != MaxAttributes || got.DroppedAttributes() != 40-MaxAttributes {
		t.Fatalf("%d attributes, %d dropped", len(a), got.DroppedAttributes())
	}
	for _, a := range got.Attributes() {
		if len(a.Key) > MaxAttrKeyBytes || len(a.Value.AsString()) > MaxAttrValueBytes {
			t.Fatalf("attribute %d/%d bytes", len(a.Key), len(a.Value.AsString()))
		}
	}

	// Malformed spans are dropped, one by one.
	bad := []RemoteSpan{span(tid(1), 2), span(tid(1), 3), span(tid(1), 4), span(tid(1), 5)}
	bad[0].SpanID = trace.SpanID{}
	bad[1].ParentSpanID = trace.SpanID{}
	bad[2].End = bad[2].Start.Add(-time.Second)
	bad[3].End = bad[3].Start.Add(30 * 24 * time.Hour)
	if n, err := r.Accept("a", bad); n != 0 || err == nil {
		t.Fatalf("malformed spans: took %d, err %v", n, err)
	}

	// A trace takes at most MaxSpansPerTrace spans, over any number of reports.
	taken := 1
	for range MaxSpansPerTrace/MaxReportSpans + 2 {
		batch := make([]RemoteSpan, MaxReportSpans)
		for i := range batch {
			batch[i] = span(tid(1), byte(i))
		}
		n, _ := r.Accept("a", batch)
		taken += n
	}
	if taken != MaxSpansPerTrace {
		t.Fatalf("took %d spans of one trace, want %d", taken, MaxSpansPerTrace)
	}
}

func TestRelayForgetsTheOldestTracesPastItsBound(t *testing.T) {
	r := NewRelay(func(sdktrace.ReadOnlySpan) {}, nil)
	first := trace.TraceID{0xff}
	doneFirst := r.Expect("a", first)
	doneFirst()
	running := trace.TraceID{0xfe}
	r.Expect("a", running) // never done
	for i := range MaxTracesPerAgent {
		r.Expect("a", trace.TraceID{0, byte(i >> 8), byte(i), 1})
	}
	r.mu.Lock()
	n := len(r.agents["a"])
	_, keptFirst := r.agents["a"][first]
	r.mu.Unlock()
	if n > MaxTracesPerAgent {
		t.Fatalf("%d traces kept for one agent", n)
	}
	if keptFirst {
		t.Fatal("the oldest finished trace was kept past the bound")
	}
	r.Forget("a")
	if n, err := r.Accept("a", []RemoteSpan{span(running, 1)}); n != 0 || err == nil {
		t.Fatalf("after Forget: took %d, err %v", n, err)
	}
}

func TestNilRelayDoesNothing(t *testing.T) {
	var r *Relay
	r.Expect("a", tid(1))()
	r.Forget("a")
	if n, err := r.Accept("a", []RemoteSpan{span(tid(1), 1)}); n != 0 || err != nil {
		t.Fatal(n, err)
	}
}

func TestLogLinesCarryTheTraceID(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewTextHandler(&buf, nil))).With("k", "v")
	rec := tracetest.NewSpanRecorder()
	tr := NewForTest(rec)
	ctx, sp := tr.Tracer().Start(context.Background(), "request")
	log.InfoContext(ctx, "in a request")
	sp.End()
	log.InfoContext(context.Background(), "outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%q", buf.String())
	}
	want := "trace_id=" + sp.SpanContext().TraceID().String()
	if !strings.Contains(lines[0], want) || !strings.Contains(lines[0], "span_id="+sp.SpanContext().SpanID().String()) || !strings.Contains(lines[0], "k=v") {
		t.Fatalf("line in a request %q lacks %q", lines[0], want)
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Fatalf("line outside a request %q", lines[1])
	}
}

func TestFromEnv(t *testing.T) {
	for _, env := range [][]string{
		nil,
		{"OTEL_EXPORTER_OTLP_ENDPOINT="},
		{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1", "OTEL_SDK_DISABLED=true"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:1", "OTEL_TRACES_EXPORTER=none"},
	} {
		tr, err := FromEnv(context.Background(), env, "svc", "1")
		if tr != nil || err != nil {
			t.Fatalf("%q: tracing %v, err %v", env, tr, err)
		}
		// Off is nil, and nil does nothing.
		if tr.Handler(nil) != nil || tr.Tracer() != nil || tr.Relay() != nil || tr.Shutdown(context.Background()) != nil {
			t.Fatal("nil tracing did something")
		}
	}
	if _, err := FromEnv(context.Background(), []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, "svc", "1"); err == nil {
		t.Fatal("grpc accepted")
	}
	tr, err := FromEnv(context.Background(), []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"}, "svc", "1")
	if err != nil || tr == nil {
		t.Fatalf("http/protobuf: %v %v", tr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = tr.Shutdown(ctx)
}
