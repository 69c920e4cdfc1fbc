package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// otlpSpan is one span the receiver got, with its resource's service.
type otlpSpan struct {
	service string
	agentID string
	span    *tracepb.Span
}

func (s otlpSpan) attr(key string) string { return attrOf(s.span.GetAttributes(), key) }

func attrOf(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// otlpReceiver is an OTLP/HTTP trace receiver (POST /v1/traces, protobuf).
type otlpReceiver struct {
	mu      sync.Mutex
	spans   []otlpSpan
	headers []http.Header
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	o.headers = append(o.headers, r.Header.Clone())
	for _, rs := range req.GetResourceSpans() {
		svc := attrOf(rs.GetResource().GetAttributes(), "service.name")
		agent := attrOf(rs.GetResource().GetAttributes(), "agentic.agent_id")
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				o.spans = append(o.spans, otlpSpan{service: svc, agentID: agent, span: sp})
			}
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// trace returns the spans of the trace whose server span carries the
// request id.
func (o *otlpReceiver) trace(requestID string) (traceID []byte, spans []otlpSpan) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.spans {
		if s.span.GetKind() == tracepb.Span_SPAN_KIND_SERVER && s.attr("request.id") == requestID {
			traceID = s.span.GetTraceId()
		}
	}
	if traceID == nil {
		return nil, nil
	}
	for _, s := range o.spans {
		if bytes.Equal(s.span.GetTraceId(), traceID) {
			spans = append(spans, s)
		}
	}
	return traceID, spans
}

func named(spans []otlpSpan, name string) *otlpSpan {
	for i := range spans {
		if spans[i].span.GetName() == name {
			return &spans[i]
		}
	}
	return nil
}

func describe(spans []otlpSpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s %q span %x parent %x\n", s.service, s.span.GetName(), s.span.GetSpanId(), s.span.GetParentSpanId())
	}
	return b.String()
}

const otlpKey = "otlp-key-5f0c1d2e3b4a"

// startTraced starts agentic-mgmt with a host agent, exporting its traces
// to an OTLP receiver of the test's own through the standard variables.
func startTraced(t *testing.T, env ...string) (*otlpReceiver, *harness.Server) {
	t.Helper()
	recv, otel := otlpCollector(t)
	return recv, startServer(t, 1, "", append(otel, env...)...)
}

// otlpCollector is an OTLP receiver of the test's own and the variables
// that send a server's traces to it.
func otlpCollector(t *testing.T) (*otlpReceiver, []string) {
	t.Helper()
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	t.Cleanup(collector.Close)
	return recv, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_HEADERS=x-otlp-key=" + otlpKey,
		"OTEL_BSP_SCHEDULE_DELAY=200", // export within a fifth of a second
	}
}

// One exec through REST is one trace, exported by OTLP/HTTP to the
// endpoint of the standard variables: the REST server span, the agent
// link's span under it, and the agent's spans (made in the agent, sent
// back over the link, exported by the server) under that, with the
// parents right. The server's log lines of the request carry the trace id;
// the agent never sees the exporter's variables (their headers hold a key).
// A file write is traced the same way.
func TestTracesAcrossTheAgentLink(t *testing.T) {
	recv, s := startTraced(t)

	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	resp, err := s.Client().ExecCommandWithResponse(ctx, "host-01", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "env; echo traced"})})
	if err != nil {
		t.Fatal(err)
	}
	if resp.JSON200 == nil {
		t.Fatalf("exec: %d %s", resp.StatusCode(), resp.Body)
	}
	res := *resp.JSON200
	if !strings.Contains(res.Stdout, "traced") {
		t.Fatalf("exec output %q", res.Stdout)
	}
	if strings.Contains(res.Stdout, "OTEL_") || strings.Contains(res.Stdout, otlpKey) {
		t.Fatalf("the agent's command sees the exporter's variables:\n%s", res.Stdout)
	}
	requestID := resp.HTTPResponse.Header.Get("X-Request-Id")
	if requestID == "" {
		t.Fatal("no X-Request-Id")
	}

	var traceID []byte
	var spans []otlpSpan
	testkit.Eventually(t, patience, "the exec's trace with the server's and the agent's spans", func() bool {
		traceID, spans = recv.trace(requestID)
		return named(spans, "POST /api/v1/agents/{agent_id}/exec") != nil && named(spans, "agentrpc.Command") != nil &&
			named(spans, "agentd.Command") != nil && named(spans, "agentd.Process") != nil
	})
	server := named(spans, "POST /api/v1/agents/{agent_id}/exec")
	link := named(spans, "agentrpc.Command")
	agentCmd := named(spans, "agentd.Command")
	proc := named(spans, "agentd.Process")
	tree := describe(spans)
	if server.service != "agentic-mgmt" || server.span.GetKind() != tracepb.Span_SPAN_KIND_SERVER || len(server.span.GetParentSpanId()) != 0 {
		t.Fatalf("the REST span is not the server root of the trace:\n%s", tree)
	}
	if !bytes.Equal(link.span.GetParentSpanId(), server.span.GetSpanId()) || link.service != "agentic-mgmt" ||
		link.attr("agentic.command_id") != res.CommandId || link.attr("agentic.agent_id") != "host-01" {
		t.Fatalf("the link's span is not the REST span's child for command %s:\n%s", res.CommandId, tree)
	}
	if !bytes.Equal(agentCmd.span.GetParentSpanId(), link.span.GetSpanId()) || agentCmd.service != "agentic-agent" ||
		agentCmd.agentID != "host-01" || agentCmd.attr("agentic.command_id") != res.CommandId || agentCmd.attr("agentic.exit_code") != "0" {
		t.Fatalf("the agent's span is not the link span's child:\n%s", tree)
	}
	if !bytes.Equal(proc.span.GetParentSpanId(), agentCmd.span.GetSpanId()) || proc.attr("process.pid") == "" {
		t.Fatalf("the process span is not the agent command's child:\n%s", tree)
	}
	// Everything of the trace nests in the request: the agent's clock is
	// this machine's.
	for _, sp := range []*otlpSpan{link, agentCmd, proc} {
		if sp.span.GetStartTimeUnixNano() < server.span.GetStartTimeUnixNano() || sp.span.GetEndTimeUnixNano() > server.span.GetEndTimeUnixNano() {
			t.Fatalf("%q is outside the request's span:\n%s", sp.span.GetName(), tree)
		}
	}
	recv.mu.Lock()
	key := recv.headers[0].Get("X-Otlp-Key")
	recv.mu.Unlock()
	if key != otlpKey {
		t.Fatalf("the exporter sent x-otlp-key %q, not OTEL_EXPORTER_OTLP_HEADERS'", key)
	}

	t.Logf("the exec's trace:\n%s", tree)

	// The request's log lines carry its trace id.
	tid := "trace_id=" + hex.EncodeToString(traceID)
	var lines []string
	testkit.Eventually(t, patience, "the exec's log lines", func() bool {
		lines = nil
		for l := range strings.SplitSeq(s.Log(), "\n") {
			if strings.Contains(l, res.CommandId) || strings.Contains(l, requestID) {
				lines = append(lines, l)
			}
		}
		return len(lines) >= 2
	})
	t.Logf("its log lines:\n%s", strings.Join(lines, "\n"))
	for _, l := range lines {
		if !strings.Contains(l, tid) {
			t.Fatalf("a log line of the request without its %s:\n%s", tid, strings.Join(lines, "\n"))
		}
	}

	// A file written to the agent: the REST span, the link's, the agent's.
	wctx, wcancel := context.WithTimeout(context.Background(), patience)
	defer wcancel()
	wr, err := s.Client().WriteFileWithBodyWithResponse(wctx, "host-01", &restapi.WriteFileParams{Path: "traced.txt"}, "application/octet-stream", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if wr.StatusCode()/100 != 2 {
		t.Fatalf("write: %d %s", wr.StatusCode(), wr.Body)
	}
	fileRequest := wr.HTTPResponse.Header.Get("X-Request-Id")
	testkit.Eventually(t, patience, "the file write's trace", func() bool {
		_, spans = recv.trace(fileRequest)
		return named(spans, "agentrpc.File") != nil && named(spans, "agentd.File") != nil
	})
	tree = describe(spans)
	var fileServer *otlpSpan
	for i := range spans {
		if spans[i].span.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
			fileServer = &spans[i]
		}
	}
	fileLink, fileAgent := named(spans, "agentrpc.File"), named(spans, "agentd.File")
	if !bytes.Equal(fileLink.span.GetParentSpanId(), fileServer.span.GetSpanId()) || fileLink.attr("agentic.file_op") != "FILE_OP_WRITE" {
		t.Fatalf("the file link span is not the REST span's child:\n%s", tree)
	}
	if !bytes.Equal(fileAgent.span.GetParentSpanId(), fileLink.span.GetSpanId()) || fileAgent.service != "agentic-agent" {
		t.Fatalf("the agent's file span is not the link span's child:\n%s", tree)
	}
}

// A mission dispatched by aiwg serve is traced from the dispatch request
// through the mission's session on the agent: the link's span (which ends
// once the session started) under the dispatch's span, the agent's span
// (which ends with the objective) under it.
func TestTracesOfAMission(t *testing.T) {
	fake, err := fakeaiwg.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	recv, s := startTraced(t, "AIWG_SERVE_ENDPOINT="+fake.URL())
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if _, err := fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.Event == "executor.resync" }); err != nil {
		t.Fatalf("no resync: %v\n%s", err, s.Log())
	}
	body, _ := json.Marshal(map[string]any{"mission_id": "m-traced-1", "objective": "echo traced mission"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.RESTURL+"/api/v1/sessions/sess-traced/dispatch", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+fake.ExecutorToken())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("dispatch: %d", resp.StatusCode)
	}
	requestID := resp.Header.Get("X-Request-Id")
	if _, err := fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.MissionID == "m-traced-1" && f.Event == "mission.completed" }); err != nil {
		t.Fatalf("mission not completed: %v\n%s", err, s.Log())
	}
	var spans []otlpSpan
	testkit.Eventually(t, patience, "the mission's trace", func() bool {
		_, spans = recv.trace(requestID)
		return named(spans, "POST /api/v1/sessions/{session_id}/dispatch") != nil && named(spans, "agentrpc.Command") != nil &&
			named(spans, "agentd.Command") != nil
	})
	tree := describe(spans)
	server := named(spans, "POST /api/v1/sessions/{session_id}/dispatch")
	link, agentCmd := named(spans, "agentrpc.Command"), named(spans, "agentd.Command")
	if !bytes.Equal(link.span.GetParentSpanId(), server.span.GetSpanId()) || link.attr("agentic.agent_id") != "host-01" {
		t.Fatalf("the mission's link span is not the dispatch's child:\n%s", tree)
	}
	if !bytes.Equal(agentCmd.span.GetParentSpanId(), link.span.GetSpanId()) || agentCmd.service != "agentic-agent" {
		t.Fatalf("the agent's span of the mission is not the link span's child:\n%s", tree)
	}
	t.Logf("the mission's trace:\n%s", tree)
}

// A task's run outlives its POST, under a context of its own, but carries
// the request's trace: the file work and the command on the task's agent
// are traced under POST /api/v1/tasks, down to the agent's spans.
func TestTracesOfATask(t *testing.T) {
	recv, otel := otlpCollector(t)
	e := newTaskEnv(t, otel...)
	req, _ := http.NewRequest(http.MethodPost, e.s.RESTURL+"/api/v1/tasks", strings.NewReader("command: {argv: [sh, -c, \"echo traced task\"]}\nenvironment: {runtime: host}\n"))
	req.Header.Set("Authorization", "Bearer "+e.s.Token)
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var acc restapi.TaskAccepted
	_ = json.NewDecoder(resp.Body).Decode(&acc)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: %d", resp.StatusCode)
	}
	if tk := e.waitEnd(acc.TaskId, patience); tk.State != "completed" {
		t.Fatalf("task %s", tk.State)
	}
	requestID := resp.Header.Get("X-Request-Id")
	var spans []otlpSpan
	testkit.Eventually(t, patience, "the task's trace", func() bool {
		_, spans = recv.trace(requestID)
		return named(spans, "POST /api/v1/tasks") != nil && named(spans, "agentd.Command") != nil && named(spans, "agentd.File") != nil
	})
	tree := describe(spans)
	server := named(spans, "POST /api/v1/tasks")
	byID := map[string]otlpSpan{}
	for _, sp := range spans {
		byID[string(sp.span.GetSpanId())] = sp
	}
	// Every agent span hangs, through its link span, from the request.
	for _, sp := range spans {
		if sp.service != "agentic-agent" {
			continue
		}
		link, ok := byID[string(sp.span.GetParentSpanId())]
		for ok && link.service == "agentic-agent" {
			link, ok = byID[string(link.span.GetParentSpanId())]
		}
		if !ok || !strings.HasPrefix(link.span.GetName(), "agentrpc.") || !bytes.Equal(link.span.GetParentSpanId(), server.span.GetSpanId()) {
			t.Fatalf("%q of the agent does not hang from the task's request through a link span:\n%s", sp.span.GetName(), tree)
		}
	}
	t.Logf("the task's trace:\n%s", tree)
}
