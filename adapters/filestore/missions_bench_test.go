package filestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Run with:
//
//	go test -run '^$' -bench 'MissionStore|Outbox' -benchtime 2s ./adapters/filestore

// benchMission is a mission of a typical size (~700 bytes of JSON).
func benchMission(i int, now time.Time) ports.Mission {
	return ports.Mission{
		ID:             fmt.Sprintf("0197%012d-7000-8000-000000000000", i),
		Objective:      "cd /workspace && make test && ./scripts/report.sh --format json",
		RequestHash:    fmt.Sprintf("%064x", i),
		Metadata:       []byte(`{"session":"s-1","priority":"normal","labels":["ci","nightly"]}`),
		State:          ports.MissionRunning,
		AgentID:        "host-01",
		SessionID:      fmt.Sprintf("cmd-%d", i),
		AgentRuntime:   "host",
		Summary:        strings.Repeat("output line\n", 20),
		Iteration:      1,
		EstimatedStart: now,
		CreatedAt:      now.Add(time.Duration(i) * time.Millisecond),
		UpdatedAt:      now,
		StartedAt:      now,
		LastEvent:      "mission.progress",
	}
}

// BenchmarkMissionStorePut measures one Put of a changed mission with n
// missions on record. With retention, all but 50 are old and terminal, so
// they sit in the archive and the live file stays small: the cost stays
// flat as n grows. All live, every Put rewrites all n.
func BenchmarkMissionStorePut(b *testing.B) {
	const live = 50
	for _, mode := range []string{"retention", "all-live"} {
		for _, n := range []int{100, 10_000, 100_000} {
			b.Run(fmt.Sprintf("%s/n=%d", mode, n), func(b *testing.B) {
				clock := newTestClock()
				dir := b.TempDir()
				s, err := NewMissionStore(MissionStoreConfig{Dir: dir, Clock: clock})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				now := clock.Now()
				all := make([]ports.Mission, n)
				for i := range all {
					all[i] = benchMission(i, now.Add(-72*time.Hour))
					if mode == "retention" && i >= live {
						all[i].State, all[i].EndedAt = ports.MissionCompleted, now.Add(-48*time.Hour)
					}
				}
				if err := s.Put(context.Background(), all...); err != nil {
					b.Fatal(err)
				}
				hot := all[:min(live, n)]
				i := 0
				for b.Loop() {
					m := hot[i%len(hot)]
					i++
					m.Iteration, m.UpdatedAt = i, now.Add(time.Duration(i))
					if err := s.Put(context.Background(), m); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				fi, err := os.Stat(filepath.Join(dir, MissionsFile))
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(fi.Size())/1024, "live-KiB")
			})
		}
	}
}

// BenchmarkMissionStorePutParallel has many goroutines Put at once: group
// commit makes writes/op fall well below 1.
func BenchmarkMissionStorePutParallel(b *testing.B) {
	s, err := NewMissionStore(MissionStoreConfig{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	const missions = 100
	all := make([]ports.Mission, missions)
	for i := range all {
		all[i] = benchMission(i, now)
	}
	if err := s.Put(context.Background(), all...); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism(32) // 32 × GOMAXPROCS goroutines
	s.writes.Store(0)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		m := all[next.Add(1)%missions]
		for pb.Next() {
			m.Iteration++
			if err := s.Put(context.Background(), m); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(s.writes.Load())/float64(b.N), "writes/op")
}
