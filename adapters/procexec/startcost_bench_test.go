package procexec

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// BenchmarkTrueVsFloors runs `true` through Runner and through the floors
// the bench compares it with, interleaved (one of each per round, so load
// from elsewhere hits them alike), and reports each one's median.
func BenchmarkTrueVsFloors(b *testing.B) {
	variants := []struct {
		name string
		run  func() error
	}{
		{"floor-sh-c-true", func() error { return exec.Command("sh", "-c", "true").Run() }},
		{"floor-true", func() error { return exec.Command("true").Run() }},
		{"runner-true", func() error {
			p := Runner{}.Start(ports.CommandSpec{Command: "true"}, func(ports.OutputStream, []byte) {})
			if r := p.Wait(); r.ExitCode != 0 {
				b.Fatal(r)
			}
			return nil
		}},
	}
	if os.Getenv("PROCEXEC_BENCH_ONLY_RUNNER") != "" {
		variants = variants[2:]
	}
	ds := make([][]time.Duration, len(variants))
	for b.Loop() {
		for i, v := range variants {
			t0 := time.Now()
			if err := v.run(); err != nil {
				b.Fatal(err)
			}
			ds[i] = append(ds[i], time.Since(t0))
		}
	}
	for i, v := range variants {
		slices.Sort(ds[i])
		b.ReportMetric(float64(ds[i][len(ds[i])/2].Microseconds()), v.name+"-p50-µs")
	}
}
