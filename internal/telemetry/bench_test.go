package telemetry

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// What tracing off adds to a request: the log handler's look for a span
// (no span in the context), SetRoute on an untraced request, and the HTTP
// handler (nil tracing: the handler itself).
func BenchmarkLogLineOutsideATrace(b *testing.B) {
	for _, bc := range []struct {
		name string
		h    slog.Handler
	}{
		{"bare", slog.NewTextHandler(io.Discard, nil)},
		{"LogHandler", LogHandler(slog.NewTextHandler(io.Discard, nil))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			log := slog.New(bc.h)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				log.InfoContext(ctx, "rest: exec started", "agent", "host-01", "command_id", "ex-abc")
			}
		})
	}
}

func BenchmarkTracingOffRequest(b *testing.B) {
	var off *Tracing
	h := off.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		SetRoute(r.Context(), "POST /api/v1/agents/{agent_id}/exec", "req")
	}))
	r := httptest.NewRequest(http.MethodPost, "/api/v1/agents/host-01/exec", nil)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
}
