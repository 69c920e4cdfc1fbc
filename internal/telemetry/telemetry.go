// Package telemetry is the OpenTelemetry tracing of agentic-mgmt: set up
// from the standard OTEL_EXPORTER_OTLP_* variables (OTLP over HTTP), off
// and free otherwise; the slog handler that puts a request's trace id on
// its log lines; the W3C traceparent carried on the agent link; the small
// span record an agent makes (it never exports: its spans go back over the
// link); and the server's relay that checks those spans and exports them
// with its own exporter.
//
// When tracing is off there is no *Tracing (nil): no tracer provider, no
// exporter, no goroutine; the adapters check for nil and do nothing.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of this project's spans.
const ScopeName = "github.com/agentic-sandbox/agentic-sandbox"

// Tracing is tracing switched on: a tracer provider whose spans go to an
// OTLP/HTTP exporter through a batch processor. A nil *Tracing is tracing
// off; every method is safe on nil.
type Tracing struct {
	tp     *sdktrace.TracerProvider
	bsp    sdktrace.SpanProcessor
	tracer trace.Tracer
	relay  *Relay
}

// Enabled reports whether an OTLP endpoint is configured in env (the
// process environment as os.Environ gives it) and tracing is not
// disabled: OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// set, OTEL_SDK_DISABLED not "true", OTEL_TRACES_EXPORTER not "none".
func Enabled(env []string) bool {
	get := lookup(env)
	if strings.EqualFold(strings.TrimSpace(get("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if strings.EqualFold(strings.TrimSpace(get("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return strings.TrimSpace(get("OTEL_EXPORTER_OTLP_ENDPOINT")) != "" || strings.TrimSpace(get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) != ""
}

// FromEnv sets tracing up from env (see Enabled); it returns nil, nil when
// tracing is off. The exporter reads the other standard variables itself
// (_HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE, _INSECURE and their
// _TRACES_ forms); OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name the
// resource, OTEL_TRACES_SAMPLER(_ARG) the sampler (default: parent-based,
// always on). Only the http/protobuf and http/json protocols are spoken:
// "grpc" is refused, rather than sending to the wrong port.
func FromEnv(ctx context.Context, env []string, service, version string) (*Tracing, error) {
	if !Enabled(env) {
		return nil, nil
	}
	get := lookup(env)
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch p := strings.TrimSpace(get(k)); p {
		case "", "http/protobuf", "http/json":
		default:
			return nil, fmt.Errorf("%s=%q: this server exports OTLP over HTTP only (http/protobuf or http/json)", k, p)
		}
		if get(k) != "" {
			break // the signal's own variable wins
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service), attribute.String("service.version", version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	bsp := sdktrace.NewBatchSpanProcessor(exp)
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(bsp))
	t := &Tracing{tp: tp, bsp: bsp, tracer: tp.Tracer(ScopeName)}
	t.relay = NewRelay(bsp.OnEnd, nil)
	return t, nil
}

// NewForTest is tracing with the given span processor (a test's recorder)
// instead of an exporter.
func NewForTest(sp sdktrace.SpanProcessor) *Tracing {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	return &Tracing{tp: tp, bsp: sp, tracer: tp.Tracer(ScopeName), relay: NewRelay(sp.OnEnd, nil)}
}

// Tracer is the tracer of this project's spans (nil when off).
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.tracer
}

// Relay checks and exports the spans agents send back (nil when off).
func (t *Tracing) Relay() *Relay {
	if t == nil {
		return nil
	}
	return t.relay
}

// Shutdown exports what is still queued and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Handler wraps h in a server span per request (OpenTelemetry's net/http
// instrumentation; an incoming W3C traceparent is continued), named by
// method until the handler names its route (SetRoute). Probes and the
// metrics page are not traced. Off: h itself.
func (t *Tracing) Handler(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return otelhttp.NewHandler(h, "http",
		otelhttp.WithTracerProvider(t.tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }),
		otelhttp.WithFilter(func(r *http.Request) bool {
			switch r.URL.Path {
			case "/healthz", "/readyz", "/metrics":
				return false
			}
			return true
		}),
	)
}

// SetRoute names the request's server span by its route pattern (e.g.
// "POST /api/v1/agents/{agent_id}/exec") and notes the request id; nothing
// when the request is not traced.
func SetRoute(ctx context.Context, pattern, requestID string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if pattern != "" {
		span.SetName(pattern)
		if _, route, ok := strings.Cut(pattern, " "); ok {
			span.SetAttributes(attribute.String("http.route", route))
		}
	}
	if requestID != "" {
		span.SetAttributes(attribute.String("request.id", requestID))
	}
}

func lookup(env []string) func(string) string {
	m := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "OTEL_") {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}

// CarryTrace is the carrier of a request's trace into work that outlives
// it (a task's run): the work's spans become the request's children. Nil
// when tracing is off.
func (t *Tracing) CarryTrace() func(request, work context.Context) context.Context {
	if t == nil {
		return nil
	}
	return func(request, work context.Context) context.Context {
		if sc := trace.SpanContextFromContext(request); sc.IsValid() {
			return trace.ContextWithSpanContext(work, sc)
		}
		return work
	}
}
