package filestore

import (
	"context"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// BenchmarkOutboxAppend appends one event per call, from one goroutine and
// from many: concurrent Appends share an fsync (fsyncs/op < 1).
func BenchmarkOutboxAppend(b *testing.B) {
	ev := portstest.SampleEvent(1)
	b.Run("serial", func(b *testing.B) {
		o, err := NewOutbox(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer o.Close()
		for b.Loop() {
			if _, err := o.Append(context.Background(), ev); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(o.syncs.Load())/float64(b.N), "fsyncs/op")
	})
	b.Run("parallel", func(b *testing.B) {
		o, err := NewOutbox(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer o.Close()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := o.Append(context.Background(), ev); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(o.syncs.Load())/float64(b.N), "fsyncs/op")
	})
}
