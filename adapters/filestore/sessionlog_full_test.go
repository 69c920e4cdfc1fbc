package filestore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// fill writes a file in dir until the filesystem is full.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			return p
		}
	}
}

func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// On a full disk (a real, small tmpfs) output that cannot be stored is a
// hole: its offsets are taken, Append says ErrOutputNotStored, Lost counts
// it, readers get a gap, no empty segment files pile up; once there is
// room again storing resumes by itself, and the hole survives a restart.
func TestSessionLogFullDisk(t *testing.T) {
	dir := testkit.Tmpfs(t, "256k")
	opts := SessionLogOptions{MaxBytes: 1 << 20, SegmentBytes: 16 << 10}
	l, err := NewSessionLog(filepath.Join(dir, "sessions"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { l.Close() }()
	pat := func(off, n uint64) []byte { return portstest.PatternAt(off, make([]byte, n)) }

	if _, err := l.Append("s", pat(0, 10_000)); err != nil {
		t.Fatal(err)
	}
	filler := fill(t, dir)

	// 40 chunks of 1000 bytes: what fits in the segment's last page is
	// stored (the chunk that crosses its end in part), none of the rest.
	failed := 0
	for i := range uint64(40) {
		off, err := l.Append("s", pat(10_000+i*1000, 1000))
		if off != 10_000+i*1000 {
			t.Fatalf("chunk %d on a full disk: offset %d", i, off)
		}
		if err != nil {
			if !errors.Is(err, ports.ErrOutputNotStored) || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("chunk %d on a full disk: %v", i, err)
			}
			failed++
		} else if failed > 0 {
			t.Fatalf("chunk %d was stored after chunks that were not", i)
		}
	}
	if failed < 36 {
		t.Fatalf("%d of 40 chunks failed on a full disk, want all but what fits in a page", failed)
	}
	if first, end := l.Bounds("s"); first != 0 || end != 50_000 {
		t.Fatalf("Bounds %d, %d; want 0, 50000", first, end)
	}
	lostWhileFull := l.Lost("s")
	if lostWhileFull < 40_000-4096 || lostWhileFull > 40_000 {
		t.Fatalf("Lost %d, want 40000 less what fit in a page", lostWhileFull)
	}
	if l.LostBytes() != lostWhileFull {
		t.Fatalf("LostBytes %d, Lost %d", l.LostBytes(), lostWhileFull)
	}
	stored := 50_000 - lostWhileFull
	data, start, gap, err := l.ReadFrom("s", 0, 1<<20)
	if err != nil || start != 0 || gap || string(data) != string(pat(0, stored)) {
		t.Fatalf("ReadFrom(0): %d bytes at %d gap %v, %v; want the %d stored", len(data), start, gap, err, stored)
	}
	data, start, gap, err = l.ReadFrom("s", stored, 1<<20)
	if err != nil || start != 50_000 || !gap || len(data) != 0 {
		t.Fatalf("ReadFrom(%d) in the hole: %d bytes at %d gap %v, %v", stored, len(data), start, gap, err)
	}
	t.Logf("stored %d bytes of 50000, lost %d", stored, lostWhileFull)
	for _, name := range segFiles(t, filepath.Join(dir, "sessions", "s-s")) {
		if fi, err := os.Stat(filepath.Join(dir, "sessions", "s-s", name)); err != nil || fi.Size() == 0 {
			t.Fatalf("an empty segment %s was left on the full disk (%v)", name, err)
		}
	}

	// Room again: the next Append is stored, after the hole.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if off, err := l.Append("s", pat(50_000, 5000)); off != 50_000 || err != nil {
		t.Fatalf("Append with room again: %d, %v", off, err)
	}
	check := func(l *SessionLog) {
		t.Helper()
		data, start, gap, err := l.ReadFrom("s", stored, 1<<20)
		if err != nil || start != 50_000 || !gap || string(data) != string(pat(50_000, 5000)) {
			t.Fatalf("ReadFrom(%d) across the hole: %d bytes at %d gap %v, %v", stored, len(data), start, gap, err)
		}
		if first, end := l.Bounds("s"); first != 0 || end != 55_000 {
			t.Fatalf("Bounds %d, %d; want 0, 55000", first, end)
		}
		if n := l.Lost("s"); n != lostWhileFull {
			t.Fatalf("Lost %d, want %d", n, lostWhileFull)
		}
	}
	check(l)

	// The hole is in the file names: a restarted server finds it again.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = NewSessionLog(filepath.Join(dir, "sessions"), opts)
	if err != nil {
		t.Fatal(err)
	}
	check(l)
	if names := strings.Join(segFiles(t, filepath.Join(dir, "sessions", "s-s")), " "); !strings.Contains(names, "00000000000000050000.seg") {
		t.Fatalf("segments %s: want one starting after the hole at 50000", names)
	}
}
