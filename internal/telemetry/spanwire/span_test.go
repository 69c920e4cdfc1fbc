package spanwire

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

func tid(b byte) trace.TraceID { return trace.TraceID{1, 2, 3, b} }

func TestNilSpansDoNothing(t *testing.T) {
	var s *AgentSpan
	s.SetAttr("k", "v")
	s.End(time.Now(), "x")
	if _, ok := s.Child("c", time.Now()).Finished(); ok {
		t.Fatal("a nil span finished")
	}
	if StartRemote("", "x", time.Now()) != nil {
		t.Fatal("a span without a traceparent")
	}
	unsampled := "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-00"
	if StartRemote(unsampled, "x", time.Now()) != nil {
		t.Fatal("a span of an unsampled trace")
	}
	if StartRemote("00-zz-yy-01", "x", time.Now()) != nil {
		t.Fatal("a span of a malformed traceparent")
	}
}

func TestAgentSpansUnderTheTraceparent(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid(7), SpanID: trace.SpanID{1, 2}, TraceFlags: trace.FlagsSampled})
	tp := Traceparent(sc)
	if tp != "00-01020307000000000000000000000000-0102000000000000-01" {
		t.Fatalf("traceparent %q", tp)
	}
	root := StartRemote(tp, "root", time.Now())
	child := root.Child("child", time.Now())
	child.End(time.Now(), "")
	root.End(time.Now(), "boom")
	rs, ok := root.Finished()
	cs, ok2 := child.Finished()
	if !ok || !ok2 {
		t.Fatal("not finished")
	}
	if rs.TraceID != tid(7) || rs.ParentSpanID != sc.SpanID() || !rs.Error || rs.StatusMessage != "boom" {
		t.Fatalf("root %+v", rs)
	}
	if cs.TraceID != tid(7) || cs.ParentSpanID != rs.SpanID || cs.Error {
		t.Fatalf("child %+v", cs)
	}
	if Traceparent(trace.SpanContext{}) != "" {
		t.Fatal("a traceparent of no span")
	}
}

func TestAttributesAreBoundedOnTheAgent(t *testing.T) {
	s := StartRemote("00-01020307000000000000000000000000-0102000000000000-01", "x", time.Now())
	for i := range 3 * MaxAttributes {
		s.SetAttr(string(rune('a'+i)), "v")
	}
	s.End(time.Now(), "")
	f, _ := s.Finished()
	if len(f.Attributes) != MaxAttributes {
		t.Fatalf("%d attributes", len(f.Attributes))
	}
}
