package telemetry

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentic-sandbox/agentic-sandbox/internal/telemetry/spanwire"
)

// RemoteSpan is a finished span an agent sent back.
type RemoteSpan = spanwire.RemoteSpan

// Bounds of the spans an agent sends back. Spans from an agent are
// untrusted input: the server takes them only for traces it started on
// that agent, and never more than these.
const (
	// MaxReportSpans is the most spans of one report; a longer report is
	// dropped whole.
	MaxReportSpans = spanwire.MaxReportSpans
	// MaxSpansPerTrace is the most spans taken from an agent for one
	// traced command or transfer; past it they are dropped.
	MaxSpansPerTrace = 256
	// MaxTracesPerAgent is the most traces an agent may report spans for
	// at once; past it the oldest finished (else oldest) is forgotten.
	MaxTracesPerAgent = 1024
	// MaxNameBytes, MaxAttributes, MaxAttrKeyBytes, MaxAttrValueBytes and
	// MaxStatusBytes cut what a span carries.
	MaxNameBytes      = spanwire.MaxNameBytes
	MaxAttributes     = spanwire.MaxAttributes
	MaxAttrKeyBytes   = spanwire.MaxAttrKeyBytes
	MaxAttrValueBytes = spanwire.MaxAttrValueBytes
	MaxStatusBytes    = spanwire.MaxStatusBytes
	// ReportGrace is how long after the traced work ended the server still
	// takes its spans (a report on Connect may trail a transfer's end).
	ReportGrace = time.Minute
	// maxSpanDuration bounds a span's length (a clock gone wrong).
	maxSpanDuration = 7 * 24 * time.Hour
)

// AgentService is the service.name of the spans relayed from agents.
const AgentService = "agentic-agent"

// ErrUnexpectedTrace is a span of a trace the server did not start on that
// agent (or whose work ended more than ReportGrace ago).
var ErrUnexpectedTrace = errors.New("span of a trace not started on this agent")

// Relay takes the spans agents send back, checks them against the traces
// the server started on each agent (Expect), bounds them, and hands them
// to the exporter as read-only spans. Safe for concurrent use.
type Relay struct {
	export func(sdktrace.ReadOnlySpan)
	now    func() time.Time

	mu     sync.Mutex
	agents map[string]map[trace.TraceID]*expectation
	seq    uint64
}

type expectation struct {
	open  int       // traced work still running
	until time.Time // when its spans stop being taken (once open is 0)
	spans int       // spans taken so far
	seq   uint64    // order of Expect, for forgetting the oldest
}

// NewRelay returns a relay exporting through export (a span processor's
// OnEnd); now is the clock (nil: time.Now).
func NewRelay(export func(sdktrace.ReadOnlySpan), now func() time.Time) *Relay {
	if now == nil {
		now = time.Now
	}
	return &Relay{export: export, now: now, agents: map[string]map[trace.TraceID]*expectation{}}
}

// Expect notes that the server sent agentID work traced in tid; done (call
// it once, when the work ended) lets its spans be taken ReportGrace longer.
// Nil-safe: a nil relay expects nothing and done does nothing.
func (r *Relay) Expect(agentID string, tid trace.TraceID) (done func()) {
	if r == nil || !tid.IsValid() {
		return func() {}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.agents[agentID]
	if m == nil {
		m = map[trace.TraceID]*expectation{}
		r.agents[agentID] = m
	}
	e := m[tid]
	if e == nil {
		r.forgetLocked(m)
		r.seq++
		e = &expectation{seq: r.seq}
		m[tid] = e
	}
	e.open++
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			e.open--
			e.until = r.now().Add(ReportGrace)
		})
	}
}

// forgetLocked makes room for one more trace in m: the expired go, then,
// while m is full, the oldest finished, else the oldest.
func (r *Relay) forgetLocked(m map[trace.TraceID]*expectation) {
	now := r.now()
	for tid, e := range m {
		if e.open <= 0 && !e.until.IsZero() && now.After(e.until) {
			delete(m, tid)
		}
	}
	for len(m) >= MaxTracesPerAgent {
		type old struct {
			tid trace.TraceID
			e   *expectation
		}
		all := make([]old, 0, len(m))
		for tid, e := range m {
			all = append(all, old{tid, e})
		}
		sort.Slice(all, func(i, j int) bool {
			if fi, fj := all[i].e.open <= 0, all[j].e.open <= 0; fi != fj {
				return fi
			}
			return all[i].e.seq < all[j].e.seq
		})
		delete(m, all[0].tid)
	}
}

// Forget drops what is expected of an agent that is gone (retired).
func (r *Relay) Forget(agentID string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	delete(r.agents, agentID)
	r.mu.Unlock()
}

// Accept checks agentID's report and exports the spans it takes: of a
// trace expected of that agent, within the trace's budget, with ids, times
// and sizes in bounds (strings cut, not refused). It returns how many it
// took and, when it dropped any, why (the first reason), for the log.
func (r *Relay) Accept(agentID string, spans []RemoteSpan) (int, error) {
	if r == nil {
		return 0, nil
	}
	if len(spans) > MaxReportSpans {
		return 0, fmt.Errorf("a report of %d spans (at most %d)", len(spans), MaxReportSpans)
	}
	var firstErr error
	drop := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	var take []RemoteSpan
	r.mu.Lock()
	now := r.now()
	m := r.agents[agentID]
	for _, s := range spans {
		e := m[s.TraceID]
		if e == nil || (e.open <= 0 && now.After(e.until)) {
			drop(ErrUnexpectedTrace)
			continue
		}
		if err := valid(s); err != nil {
			drop(err)
			continue
		}
		if e.spans >= MaxSpansPerTrace {
			drop(fmt.Errorf("more than %d spans for one trace", MaxSpansPerTrace))
			continue
		}
		e.spans++
		take = append(take, s)
	}
	r.mu.Unlock()
	if len(take) == 0 {
		return 0, firstErr
	}
	res := resource.NewSchemaless(attribute.String("service.name", AgentService), attribute.String("agentic.agent_id", agentID))
	for _, s := range take {
		r.export(readOnly(s, res))
	}
	return len(take), firstErr
}

func valid(s RemoteSpan) error {
	switch {
	case !s.SpanID.IsValid():
		return errors.New("a span without a span id")
	case !s.ParentSpanID.IsValid():
		return errors.New("a span without a parent")
	case s.Start.IsZero() || s.End.IsZero() || s.End.Before(s.Start):
		return errors.New("a span without a start and an end after it")
	case s.End.Sub(s.Start) > maxSpanDuration:
		return errors.New("a span longer than a week")
	}
	return nil
}

// readOnly turns a checked span into what the exporter takes, its strings
// cut to their bounds.
func readOnly(s RemoteSpan, res *resource.Resource) sdktrace.ReadOnlySpan {
	stub := tracetest.SpanStub{
		Name:        cut(s.Name, MaxNameBytes),
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: s.TraceID, SpanID: s.SpanID, TraceFlags: trace.FlagsSampled}),
		Parent: trace.NewSpanContext(trace.SpanContextConfig{TraceID: s.TraceID, SpanID: s.ParentSpanID,
			TraceFlags: trace.FlagsSampled, Remote: true}),
		SpanKind:             trace.SpanKindInternal,
		StartTime:            s.Start,
		EndTime:              s.End,
		Resource:             res,
		InstrumentationScope: instrumentation.Scope{Name: ScopeName + "/agent"},
	}
	if stub.Name == "" {
		stub.Name = "agent"
	}
	if s.Error {
		stub.Status = sdktrace.Status{Code: codes.Error, Description: cut(s.StatusMessage, MaxStatusBytes)}
	}
	keys := make([]string, 0, len(s.Attributes))
	for k := range s.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if len(stub.Attributes) == MaxAttributes {
			stub.DroppedAttributes = len(keys) - MaxAttributes
			break
		}
		if ck := cut(k, MaxAttrKeyBytes); ck != "" {
			stub.Attributes = append(stub.Attributes, attribute.String(ck, cut(s.Attributes[k], MaxAttrValueBytes)))
		}
	}
	return stub.Snapshot()
}

// cut keeps at most n bytes of s, whole UTF-8 characters, and makes any
// invalid byte valid (an exporter must not choke on it).
func cut(s string, n int) string {
	if !utf8.ValidString(s) {
		s = string([]rune(s)) // invalid bytes become U+FFFD
	}
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
