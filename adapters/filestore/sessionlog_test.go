package filestore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

func openSessionLog(t *testing.T, dir string, maxBytes int64) ports.SessionLog {
	t.Helper()
	l, err := NewSessionLog(dir, SessionLogOptions{MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestSessionLogConformance(t *testing.T) {
	portstest.RunSessionLogSuite(t, openSessionLog)
}

// TestSessionLogDisk checks the layout: segment files named by offset,
// disk use within MaxBytes plus one segment, odd ids kept in a safe directory.
func TestSessionLogDisk(t *testing.T) {
	dir := t.TempDir()
	l, err := NewSessionLog(dir, SessionLogOptions{MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 100 {
		if _, err := l.Append("abc", portstest.PatternAt(uint64(i)*3000, make([]byte, 3000))); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := filepath.Glob(filepath.Join(dir, "s-abc", "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, p := range segs {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		size += fi.Size()
	}
	if size > 64<<10+8<<10 || size < 64<<10 || len(segs) > 9 {
		t.Fatalf("%d segments, %d bytes on disk", len(segs), size)
	}
	if _, err := l.Append("../../etc/passwd", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x-2e2e2f2e2e2f6574632f706173737764")); err != nil {
		t.Fatalf("odd id not hex-encoded: %v", err)
	}
	if err := l.Delete("abc"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "s-abc")); !os.IsNotExist(err) {
		t.Fatalf("deleted log still on disk: %v", err)
	}
	if n := len(l.sessions); n != 1 {
		t.Fatalf("%d sessions in memory after Delete", n)
	}
	// Reads of unknown ids do not grow the map.
	l.ReadFrom("nobody", 0, 10)
	l.Bounds("nobody")
	if n := len(l.sessions); n != 1 {
		t.Fatalf("%d sessions in memory after reads of unknown ids", n)
	}
}

// TestSessionLogHole: a segment ending short of the next (bytes that could
// not be stored, or damaged files) stays a hole after a restart: the bytes
// around it are kept, a read stops at it, one from inside it begins after
// it with a gap, and Lost counts it. No offset maps to nothing.
func TestSessionLogHole(t *testing.T) {
	dir := t.TempDir()
	l, err := NewSessionLog(dir, SessionLogOptions{MaxBytes: 1 << 20, SegmentBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	l.Append("s", portstest.PatternAt(0, make([]byte, 3500)))
	l.Close()
	if err := os.Truncate(filepath.Join(dir, "s-s", "00000000000000001000.seg"), 10); err != nil {
		t.Fatal(err)
	}
	l, err = NewSessionLog(dir, SessionLogOptions{MaxBytes: 1 << 20, SegmentBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if first, end := l.Bounds("s"); first != 0 || end != 3500 {
		t.Fatalf("Bounds = %d, %d", first, end)
	}
	if n := l.Lost("s"); n != 990 {
		t.Fatalf("Lost = %d, want 990", n)
	}
	data, start, gap, err := l.ReadFrom("s", 0, 1<<20)
	if err != nil || start != 0 || gap || string(data) != string(portstest.PatternAt(0, make([]byte, 1010))) {
		t.Fatalf("ReadFrom(0) = %d bytes at %d gap %v, %v", len(data), start, gap, err)
	}
	for _, from := range []uint64{1010, 1500} {
		data, start, gap, err = l.ReadFrom("s", from, 1<<20)
		if err != nil || start != 2000 || !gap || string(data) != string(portstest.PatternAt(2000, make([]byte, 1500))) {
			t.Fatalf("ReadFrom(%d) = %d bytes at %d gap %v, %v", from, len(data), start, gap, err)
		}
	}
}

// TestSessionLogReadCache: readers at three positions in older segments take
// turns; bytes stay right and the cache never holds more than maxReadFiles.
func TestSessionLogReadCache(t *testing.T) {
	l, err := NewSessionLog(t.TempDir(), SessionLogOptions{MaxBytes: 1 << 20, SegmentBytes: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Append("s", portstest.PatternAt(0, make([]byte, 100_000)))
	pos := []uint64{0, 30_000, 60_000}
	for range 50 {
		for i, p := range pos {
			data, start, gap, err := l.ReadFrom("s", p, 777)
			if err != nil || start != p || gap || string(data) != string(portstest.PatternAt(p, make([]byte, 777))) {
				t.Fatalf("ReadFrom(%d): %d bytes at %d gap %v, %v", p, len(data), start, gap, err)
			}
			pos[i] += 777
		}
	}
	s := l.sessions["s"]
	if n := len(s.readers); n > maxReadFiles {
		t.Fatalf("%d cached read handles", n)
	}
	l.Delete("s")
	if len(s.readers) != 0 {
		t.Fatal("read handles survive Delete")
	}
}
