package filestore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func cursorLog(t *testing.T, dir string) *SessionLog {
	t.Helper()
	l, err := NewSessionLog(dir, SessionLogOptions{MaxBytes: 1 << 20, SegmentBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func appendOut(t *testing.T, l *SessionLog, id string, src ports.OutputSource, lost uint64, data string) uint64 {
	t.Helper()
	off, err := l.AppendOutput(id, src, lost, []byte(data))
	if err != nil {
		t.Fatalf("AppendOutput: %v", err)
	}
	return off
}

func readAll(t *testing.T, l *SessionLog, id string) (text string, gaps int) {
	t.Helper()
	for from := uint64(0); ; {
		data, start, gap, err := l.ReadFrom(id, from, 1<<20)
		if err != nil {
			t.Fatalf("ReadFrom(%d): %v", from, err)
		}
		if gap {
			gaps++
			text += "|"
		}
		text += string(data)
		if len(data) == 0 {
			return text, gaps
		}
		from = start + uint64(len(data))
	}
}

func wantCursor(t *testing.T, l *SessionLog, id, cmd string, end uint64, next map[ports.OutputStream]uint64) {
	t.Helper()
	c, ok := l.OutputCursor(id)
	if !ok || c.CommandID != cmd || c.End != end || len(c.Next) != len(next) {
		t.Fatalf("cursor %+v %v; want %s end %d next %v", c, ok, cmd, end, next)
	}
	for s, n := range next {
		if c.Next[s] != n {
			t.Fatalf("cursor %+v; want next %v", c, next)
		}
	}
}

// The output cursor says, per stream of the writing command, how far the
// log holds its output, and outlives a reopen (a restarted server).
func TestSessionLogOutputCursorOutlivesReopen(t *testing.T) {
	dir := t.TempDir()
	l := cursorLog(t, dir)
	if _, ok := l.OutputCursor("s"); ok {
		t.Fatal("a cursor before any output")
	}
	appendOut(t, l, "s", ports.OutputSource{CommandID: "c1", Stream: ports.StreamStdout, Offset: 0}, 0, "out-1 ")
	appendOut(t, l, "s", ports.OutputSource{CommandID: "c1", Stream: ports.StreamStderr, Offset: 0}, 0, "err-1 ")
	appendOut(t, l, "s", ports.OutputSource{CommandID: "c1", Stream: ports.StreamStdout, Offset: 6}, 0, "out-2 which spans segments ")
	end := l.End("s")
	wantCursor(t, l, "s", "c1", end, map[ports.OutputStream]uint64{ports.StreamStdout: 33, ports.StreamStderr: 6})
	l.Close()

	l = cursorLog(t, dir)
	wantCursor(t, l, "s", "c1", end, map[ports.OutputStream]uint64{ports.StreamStdout: 33, ports.StreamStderr: 6})
	// Another command (an agent that adopted the session) starts its own.
	appendOut(t, l, "s", ports.OutputSource{CommandID: "c2", Stream: ports.StreamPTY, Offset: 0}, 0, "pty")
	wantCursor(t, l, "s", "c2", end+3, map[ports.OutputStream]uint64{ports.StreamPTY: 3})
	if got, _ := readAll(t, l, "s"); got != "out-1 err-1 out-2 which spans segments pty" {
		t.Fatalf("log %q", got)
	}
}

// Output that never arrived is a hole where it belongs, a gap to readers
// and counted, before and after a reopen.
func TestSessionLogOutputLostIsAGap(t *testing.T) {
	dir := t.TempDir()
	l := cursorLog(t, dir)
	src := ports.OutputSource{CommandID: "c", Stream: ports.StreamPTY}
	appendOut(t, l, "s", src, 0, "tick-1\n")
	src.Offset = 7 + 7
	if off := appendOut(t, l, "s", src, 7, "tick-3\n"); off != 14 {
		t.Fatalf("data after 7 lost bytes at %d, want 14", off)
	}
	for range 2 {
		if got, gaps := readAll(t, l, "s"); got != "tick-1\n|tick-3\n" || gaps != 1 || l.Lost("s") != 7 {
			t.Fatalf("log %q with %d gaps, %d lost", got, gaps, l.Lost("s"))
		}
		l.Close()
		l = cursorLog(t, dir)
	}
	wantCursor(t, l, "s", "c", 21, map[ports.OutputStream]uint64{ports.StreamPTY: 21})
}

// A log found ending past its cursor (the server was killed between the
// bytes and the cursor) is cut back to the cursor: the agent was never told
// those bytes were stored and sends them again. One ending short of it (a
// machine crash lost the unsynced tail) gets a hole up to it.
func TestSessionLogSettlesOnItsCursor(t *testing.T) {
	dir := t.TempDir()
	l := cursorLog(t, dir)
	src := ports.OutputSource{CommandID: "c", Stream: ports.StreamPTY}
	appendOut(t, l, "s", src, 0, "0123456789abcdef0123") // two segments
	rec, err := os.ReadFile(filepath.Join(dir, sessionDirName("s"), cursorFile))
	if err != nil {
		t.Fatal(err)
	}
	src.Offset = 20
	appendOut(t, l, "s", src, 0, "unrecorded tail spanning segments")
	l.Close()
	// As if killed after the bytes and before their cursor.
	if err := os.WriteFile(filepath.Join(dir, sessionDirName("s"), cursorFile), rec, 0o600); err != nil {
		t.Fatal(err)
	}
	l = cursorLog(t, dir)
	if got, _ := readAll(t, l, "s"); got != "0123456789abcdef0123" || l.End("s") != 20 {
		t.Fatalf("log %q end %d; want it cut back to its cursor at 20", got, l.End("s"))
	}
	wantCursor(t, l, "s", "c", 20, map[ports.OutputStream]uint64{ports.StreamPTY: 20})
	src.Offset = 20
	appendOut(t, l, "s", src, 0, "again")
	if got, gaps := readAll(t, l, "s"); got != "0123456789abcdef0123again" || gaps != 0 {
		t.Fatalf("log %q with %d gaps after the resend", got, gaps)
	}
	l.Close()

	// The tail lost instead: the bytes the cursor counts are a gap.
	segs, _ := filepath.Glob(filepath.Join(dir, sessionDirName("s"), "*"+segmentSuffix))
	last := segs[len(segs)-1]
	if err := os.Truncate(last, 0); err != nil {
		t.Fatal(err)
	}
	l = cursorLog(t, dir)
	if l.End("s") != 25 {
		t.Fatalf("end %d; want the cursor's 25", l.End("s"))
	}
	src.Offset = 25
	appendOut(t, l, "s", src, 0, "!")
	if got, gaps := readAll(t, l, "s"); got != "0123456789abcdef|!" || gaps != 1 {
		t.Fatalf("log %q with %d gaps; want the lost tail marked", got, gaps)
	}
}

// A plain Append writes bytes no cursor accounts for: the cursor goes, on
// disk too.
func TestSessionLogPlainAppendDropsTheCursor(t *testing.T) {
	dir := t.TempDir()
	l := cursorLog(t, dir)
	appendOut(t, l, "s", ports.OutputSource{CommandID: "c", Stream: ports.StreamPTY}, 0, "abc")
	if _, err := l.Append("s", []byte("def")); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.OutputCursor("s"); ok {
		t.Fatal("cursor kept after a plain Append")
	}
	l.Close()
	l = cursorLog(t, dir)
	if _, ok := l.OutputCursor("s"); ok || l.End("s") != 6 {
		t.Fatalf("after a reopen: cursor %v, end %d", ok, l.End("s"))
	}
}
