package filestore

import (
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

var sessionLogChunks = []struct {
	name string
	size int
}{{"4KiB", 4 << 10}, {"1MiB", 1 << 20}}

// BenchmarkSessionLogAppend appends chunks to one session under the default
// 64 MiB bound, so long runs include segment rolls (with their fsync) and
// dropping of old segments, as a busy session does.
func BenchmarkSessionLogAppend(b *testing.B) {
	for _, c := range sessionLogChunks {
		b.Run(c.name, func(b *testing.B) {
			l := benchLog(b)
			data := portstest.PatternAt(0, make([]byte, c.size))
			b.SetBytes(int64(c.size))
			for b.Loop() {
				if _, err := l.Append("s", data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSessionLogReadFrom replays a 32 MiB log in reads of one chunk,
// from the start again when it reaches the end (served from the page cache).
func BenchmarkSessionLogReadFrom(b *testing.B) {
	for _, c := range sessionLogChunks {
		b.Run(c.name, func(b *testing.B) {
			l := benchLog(b)
			block := portstest.PatternAt(0, make([]byte, 1<<20))
			for range 32 {
				if _, err := l.Append("s", block); err != nil {
					b.Fatal(err)
				}
			}
			first, end := l.Bounds("s")
			off := first
			b.SetBytes(int64(c.size))
			for b.Loop() {
				data, start, _, err := l.ReadFrom("s", off, c.size)
				if err != nil {
					b.Fatal(err)
				}
				off = start + uint64(len(data))
				if off >= end {
					off = first
				}
			}
		})
	}
}

// benchLog is a session log under the default bounds, closed after b.
func benchLog(b *testing.B) *SessionLog {
	l, err := NewSessionLog(b.TempDir(), SessionLogOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}
