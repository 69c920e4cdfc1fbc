package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

func openOutbox(t *testing.T, dir string) *Outbox {
	t.Helper()
	o, err := NewOutbox(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

// outboxWith opens the outbox in dir with n sample events appended.
func outboxWith(t *testing.T, dir string, n int) *Outbox {
	t.Helper()
	o := openOutbox(t, dir)
	for i := range n {
		mustAppend(t, o, portstest.SampleEvent(i))
	}
	return o
}

func mustAppend(t *testing.T, o *Outbox, evs ...ports.Event) []ports.Event {
	t.Helper()
	got, err := o.Append(context.Background(), evs...)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return got
}

func pendingSeqs(t *testing.T, o *Outbox) []uint64 {
	t.Helper()
	evs, err := o.Pending(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	s := make([]uint64, len(evs))
	for i, e := range evs {
		s[i] = e.Seq
	}
	return s
}

func wantPendingRange(t *testing.T, o *Outbox, from, to uint64) {
	t.Helper()
	got := pendingSeqs(t, o)
	ok := len(got) == int(to-from+1)
	for i := 0; ok && i < len(got); i++ {
		ok = got[i] == from+uint64(i)
	}
	if !ok {
		t.Fatalf("pending %v, want %d..%d", got, from, to)
	}
}

// fileSeqs parses events.jsonl and returns its seqs.
func fileSeqs(t *testing.T, dir string) []uint64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for line := range strings.SplitSeq(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		if _, ok := parseAckLine([]byte(line)); ok {
			continue
		}
		var ev ports.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		seqs = append(seqs, ev.Seq)
	}
	return seqs
}

func TestOutboxSuite(t *testing.T) {
	portstest.RunEventOutboxSuite(t, func(t *testing.T, dir string) ports.EventOutbox {
		return openOutbox(t, dir)
	})
}

func TestOutboxFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	o := openOutbox(t, dir)
	evs := mustAppend(t, o, portstest.SampleEvent(1), portstest.SampleEvent(2))
	mustAppend(t, o, portstest.SampleEvent(3))
	if got := fileSeqs(t, dir); len(got) != 3 || got[0] != 1 || got[2] != 3 {
		t.Fatalf("file seqs %v", got)
	}
	data, _ := os.ReadFile(filepath.Join(dir, EventsFile))
	if !strings.HasPrefix(string(data), `{"seq":1,"event":"mission.progress","mission_id":"mission-1","ts":`) {
		t.Fatalf("line layout %q", data)
	}
	if err := o.Ack(evs[1].Seq); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(filepath.Join(dir, EventsFile))
	if !strings.HasSuffix(string(data), "\n"+`{"acked":2}`+"\n") {
		t.Fatalf("no ack line at the end:\n%s", data)
	}
	if m := testkit.Mode(t, filepath.Join(dir, EventsFile)); m != 0o600 {
		t.Fatalf("%s mode %v", EventsFile, m)
	}
	testkit.OnlyFiles(t, dir, EventsFile)

	// An Ack beyond the last seq would mark future events delivered.
	if err := o.Ack(4); err == nil {
		t.Fatal("Ack beyond the last seq succeeded")
	}
	if o.Acked() != 2 {
		t.Fatalf("Acked = %d", o.Acked())
	}
	// An event that cannot be encoded is refused and uses no seq.
	bad := portstest.SampleEvent(4)
	bad.Data = map[string]any{"ch": make(chan int)}
	if _, err := o.Append(context.Background(), bad); err == nil {
		t.Fatal("Append of an unencodable event succeeded")
	}
	if got := mustAppend(t, o, portstest.SampleEvent(5)); got[0].Seq != 4 {
		t.Fatalf("seq %d after a refused Append, want 4", got[0].Seq)
	}

	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := o.Ack(3); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("Ack after Close = %v", err)
	}
	if _, err := o.Append(context.Background(), portstest.SampleEvent(6)); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("Append after Close = %v", err)
	}
}

// A crash mid-append leaves a torn last line: it was never reported as
// stored, so it is dropped, and the next Append does not glue onto it.
func TestOutboxTornTail(t *testing.T) {
	dir := t.TempDir()
	o := outboxWith(t, dir, 3)
	o.Close()
	p := filepath.Join(dir, EventsFile)
	line, _ := json.Marshal(ports.Event{Seq: 4, Type: "mission.completed", TS: portstest.SampleEvent(0).TS})
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(line[:len(line)-5])
	f.Close()

	o = openOutbox(t, dir)
	wantPendingRange(t, o, 1, 3)
	if got := mustAppend(t, o, portstest.SampleEvent(9)); got[0].Seq != 4 {
		t.Fatalf("seq %d after the torn line, want 4", got[0].Seq)
	}
	if got := fileSeqs(t, dir); len(got) != 4 || got[3] != 4 {
		t.Fatalf("file seqs %v", got)
	}

	// Blocks left unwritten by a crash read as a garbage line: skipped.
	o.Close()
	f, _ = os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte("\x00\x00\x00\x00\n"))
	line, _ = json.Marshal(ports.Event{Seq: 5, Type: "mission.failed", TS: portstest.SampleEvent(0).TS})
	f.Write(append(line, '\n'))
	f.Close()
	o = openOutbox(t, dir)
	wantPendingRange(t, o, 1, 5)
	if n := o.CorruptLines(); n != 1 {
		t.Fatalf("counted %d corrupt lines, want the one", n)
	}
	if got := mustAppend(t, o, portstest.SampleEvent(10)); got[0].Seq != 6 {
		t.Fatalf("seq %d, want 6", got[0].Seq)
	}
}

func TestOutboxCorruptFiles(t *testing.T) {
	dir := t.TempDir()
	ap := filepath.Join(dir, EventsAckedFile)
	if err := os.WriteFile(ap, []byte("twelve\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewOutbox(dir); err == nil || !strings.Contains(err.Error(), ap) {
		t.Fatalf("NewOutbox = %v, want an error naming %s", err, ap)
	}
	if got, _ := os.ReadFile(ap); string(got) != "twelve\n" {
		t.Fatalf("acked file changed to %q", got)
	}

	// Seqs going backwards is not something a crash can do.
	dir = t.TempDir()
	p := filepath.Join(dir, EventsFile)
	a, _ := json.Marshal(ports.Event{Seq: 5, Type: "a"})
	b, _ := json.Marshal(ports.Event{Seq: 3, Type: "b"})
	if err := os.WriteFile(p, []byte(string(a)+"\n"+string(b)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewOutbox(dir); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("NewOutbox = %v, want an error naming %s", err, p)
	}
	if _, err := NewOutbox(""); err == nil {
		t.Fatal("opened an outbox without a dir")
	}
}

// An ack line that a crash tore only means redelivery.
func TestOutboxTornAck(t *testing.T) {
	dir := t.TempDir()
	o := outboxWith(t, dir, 5)
	if err := o.Ack(2); err != nil {
		t.Fatal(err)
	}
	if err := o.Ack(4); err != nil {
		t.Fatal(err)
	}
	o.Close()
	p := filepath.Join(dir, EventsFile)
	data, _ := os.ReadFile(p)
	if err := os.WriteFile(p, data[:len(data)-3], 0o600); err != nil {
		t.Fatal(err)
	}
	o = openOutbox(t, dir)
	wantPendingRange(t, o, 3, 5)
	if o.Acked() != 2 {
		t.Fatalf("Acked = %d, want the last whole ack line's 2", o.Acked())
	}
}

// events.acked of an older server is folded into events.jsonl as an ack
// line and removed; a crash in between only repeats the fold.
func TestOutboxFoldsLegacyAckedFile(t *testing.T) {
	dir := t.TempDir()
	o := outboxWith(t, dir, 5)
	o.Close()
	if err := os.WriteFile(filepath.Join(dir, EventsAckedFile), []byte("3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o = openOutbox(t, dir)
	wantPendingRange(t, o, 4, 5)
	testkit.OnlyFiles(t, dir, EventsFile)
	o.Close()
	o = openOutbox(t, dir)
	wantPendingRange(t, o, 4, 5)
	if got := mustAppend(t, o, portstest.SampleEvent(9)); got[0].Seq != 6 {
		t.Fatalf("seq %d, want 6", got[0].Seq)
	}
}

// Appends that arrive while a write is in progress share the next fsync.
func TestOutboxGroupCommit(t *testing.T) {
	o := openOutbox(t, t.TempDir())
	// The writer stalls after its first fsync until released.
	release := make(chan struct{})
	var once sync.Once
	unlock := func() { once.Do(func() { close(release) }) }
	o.afterWrite = func() { <-release }
	t.Cleanup(unlock) // before Close, which would wait for the writer
	first := make(chan error, 1)
	go func() {
		_, err := o.Append(context.Background(), portstest.SampleEvent(0))
		first <- err
	}()
	waitFor(t, func() bool { return o.syncs.Load() == 1 })
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := o.Append(context.Background(), portstest.SampleEvent(i)); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, func() bool {
		o.writer.mu.Lock()
		defer o.writer.mu.Unlock()
		return len(o.writer.queue) == n
	})
	unlock()
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if s := o.syncs.Load(); s != 2 {
		t.Fatalf("%d fsyncs for %d Appends, want 2", s, n+1)
	}
	wantPendingRange(t, o, 1, n+1)
}

// An ack of a seq that the batch before acknowledged (two callers acking
// the same event) costs no flush of nothing.
func TestOutboxRepeatedAckFlushesOnce(t *testing.T) {
	o := openOutbox(t, t.TempDir())
	if _, err := o.Append(context.Background(), portstest.SampleEvent(0)); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var once sync.Once
	unlock := func() { once.Do(func() { close(release) }) }
	o.afterWrite = func() { <-release }
	t.Cleanup(unlock)
	acks := make(chan error, 2)
	go func() { acks <- o.Ack(1) }()
	waitFor(t, func() bool { return o.syncs.Load() == 2 })
	// Still unacknowledged for the second caller: its ack is queued.
	go func() { acks <- o.Ack(1) }()
	waitFor(t, func() bool {
		o.writer.mu.Lock()
		defer o.writer.mu.Unlock()
		return len(o.writer.queue) == 1
	})
	unlock()
	for range 2 {
		if err := <-acks; err != nil {
			t.Fatal(err)
		}
	}
	if s := o.syncs.Load(); s != 2 {
		t.Fatalf("%d fsyncs for an Append and two Acks of it, want 2", s)
	}
	if o.Acked() != 1 {
		t.Fatalf("acked %d", o.Acked())
	}
}

func TestOutboxCompaction(t *testing.T) {
	dir := t.TempDir()
	o := openOutbox(t, dir)
	o.mu.Lock()
	o.compactMin = 4096
	o.mu.Unlock()
	for i := range 20 {
		evs := make([]ports.Event, 10)
		for j := range evs {
			evs[j] = portstest.SampleEvent(i*10 + j)
		}
		mustAppend(t, o, evs...)
	}
	sizeBefore := fileSize(t, dir)
	if err := o.Ack(150); err != nil {
		t.Fatal(err)
	}
	// The Ack wakes the writer, which compacts while idle.
	waitFor(t, func() bool { return o.compactions.Load() == 1 })
	if got := fileSeqs(t, dir); len(got) != 50 || got[0] != 151 || got[49] != 200 {
		t.Fatalf("after compaction the file has %d seqs from %v", len(got), got[:min(3, len(got))])
	}
	if after := fileSize(t, dir); after*3 > sizeBefore {
		t.Fatalf("file %d bytes after compaction, %d before", after, sizeBefore)
	}
	wantPendingRange(t, o, 151, 200)
	testkit.OnlyFiles(t, dir, EventsFile)

	// Appends go to the new file; a later compaction counts from it.
	mustAppend(t, o, portstest.SampleEvent(1000))
	if err := o.Ack(152); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, o, portstest.SampleEvent(1001)) // checks for compaction after the commit
	if c := o.compactions.Load(); c != 1 {
		t.Fatalf("%d compactions, want 1: 2 acked events are under the threshold", c)
	}
	for i := range 40 {
		mustAppend(t, o, portstest.SampleEvent(2000+i))
	}
	if err := o.Ack(242); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return o.compactions.Load() == 2 })
	if got := fileSeqs(t, dir); len(got) != 0 {
		t.Fatalf("file seqs %v, want none", got)
	}
	o.Close()
	o = openOutbox(t, dir)
	if o.Acked() != 242 || len(pendingSeqs(t, o)) != 0 {
		t.Fatalf("after reopen acked %d pending %v", o.Acked(), pendingSeqs(t, o))
	}
	if got := mustAppend(t, o, portstest.SampleEvent(1)); got[0].Seq != 243 {
		t.Fatalf("seq %d, want 243", got[0].Seq)
	}
}

func fileSize(t *testing.T, dir string) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Events are offered to readers while their line is being flushed; a write
// that fails takes them back, and their seqs stay used, since a reader may
// have taken them already.
func TestOutboxFailedWriteTakesEventsBack(t *testing.T) {
	dir := t.TempDir()
	o := openOutbox(t, dir)
	mustAppend(t, o, portstest.SampleEvent(1))
	var offered []uint64
	o.afterWrite = func() {
		evs, _ := o.Pending(0, 10)
		offered = offered[:0]
		for _, ev := range evs {
			offered = append(offered, ev.Seq)
		}
	}
	// A handle that cannot write makes the next append fail.
	ro, err := os.Open(filepath.Join(dir, EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	rw := o.f
	o.f = ro
	if _, err := o.Append(context.Background(), portstest.SampleEvent(2)); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("Append on a failing file = %v", err)
	}
	if len(offered) != 2 || offered[1] != 2 {
		t.Fatalf("offered during the write: %v, want 1 and 2", offered)
	}
	wantPendingRange(t, o, 1, 1)
	ro.Close()
	o.f = rw
	if got := mustAppend(t, o, portstest.SampleEvent(3)); got[0].Seq != 3 {
		t.Fatalf("seq %d after a failed write, want 3", got[0].Seq)
	}
	o.Close()
	o = openOutbox(t, dir)
	if got := pendingSeqs(t, o); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Fatalf("after reopen pending %v, want 1 and 3", got)
	}
}

// FuzzOutboxOpen opens an outbox on arbitrary events.jsonl content: it is
// refused with an error or opened, and then its pending events are in
// order after the ack, a new event gets a later seq, and a reopen finds
// the same.
func FuzzOutboxOpen(f *testing.F) {
	ev := func(seq uint64) string {
		e := portstest.SampleEvent(int(seq))
		e.Seq = seq
		b, _ := json.Marshal(e)
		return string(b) + "\n"
	}
	f.Add(ev(1) + ev(2) + `{"acked":1}` + "\n")
	f.Add(`{"acked":7}` + "\n" + ev(8))
	f.Add(ev(1) + `{"acked":9}` + "\n")
	f.Add(ev(3) + ev(2))
	f.Add(ev(1) + `{"acked":1` + "\n" + ev(2) + `{"seq":3,"eve`)
	f.Add("\x00\x00\n" + `{"acked":-1}` + "\n" + `{"acked":1}x` + "\n")
	f.Fuzz(func(t *testing.T, content string) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, EventsFile), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		o, err := NewOutbox(dir)
		if err != nil {
			return
		}
		acked := o.Acked()
		seqs := pendingSeqs(t, o)
		for i, s := range seqs {
			if s <= acked || (i > 0 && s <= seqs[i-1]) {
				t.Fatalf("pending %v after ack %d", seqs, acked)
			}
		}
		got, err := o.Append(context.Background(), portstest.SampleEvent(1))
		if err != nil {
			t.Fatal(err)
		}
		last := acked
		if len(seqs) > 0 {
			last = seqs[len(seqs)-1]
		}
		if got[0].Seq <= last {
			t.Fatalf("new seq %d not after %d", got[0].Seq, last)
		}
		o.Close()
		r, err := NewOutbox(dir)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer r.Close()
		if again := pendingSeqs(t, r); len(again) != len(seqs)+1 || again[len(again)-1] != got[0].Seq {
			t.Fatalf("after reopen pending %v, want %v and %d", again, seqs, got[0].Seq)
		}
	})
}
