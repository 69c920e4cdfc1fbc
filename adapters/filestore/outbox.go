package filestore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Names of the outbox files in the data dir.
const (
	EventsFile = "events.jsonl"
	// EventsAckedFile held the highest acknowledged seq before acks became
	// lines of events.jsonl: read once at open, then folded in and removed.
	EventsAckedFile = "events.acked"
)

// compactMinBytes is how many bytes of acknowledged events events.jsonl may
// carry before it is rewritten without them (once they are also more than
// half of it), bounding both the file and the cost of reading it at start.
const compactMinBytes = 1 << 20

// Outbox is a ports.EventOutbox in events.jsonl in the data dir: every
// event appended, one JSON object per line with its seq, and every Ack as
// an `{"acked":N}` line, each written and fsynced before Append or Ack
// returns. Concurrent Appends and Acks are group-committed and share one
// write and one fsync.
//
// Unacknowledged events are also kept in memory for Pending. When
// acknowledged lines make up most of events.jsonl it is rewritten
// atomically with only the unacknowledged ones.
type Outbox struct {
	path, ackPath string

	// Only the writer goroutine touches f, end and dirty.
	f     *os.File
	end   int64 // where the last complete line ends
	dirty bool  // a failed write may have left bytes past end

	mu         sync.Mutex
	pending    []outboxEntry // unacknowledged, by seq
	lastSeq    uint64
	acked      uint64
	deadBytes  int64 // bytes of events.jsonl that no open needs (acked or unreadable lines)
	corrupt    int   // lines that did not parse when the file was read
	closed     bool
	compactMin int64  // compactMinBytes; tests lower it
	afterWrite func() // nil; tests stall the writer with it

	notify      chan struct{}
	writer      *groupCommit[*appendReq]
	syncs       atomic.Int64 // fsyncs of events.jsonl, for tests and benchmarks
	compactions atomic.Int64 // rewrites of events.jsonl, for tests
}

var _ ports.EventOutbox = (*Outbox)(nil)

type outboxEntry struct {
	ev ports.Event
	n  int64 // length of its line in events.jsonl
}

type appendReq struct {
	bodies [][]byte      // encodings without the leading `{"seq":0,`
	evs    []ports.Event // decoded from bodies: what a reopen will read
	seqs   []uint64      // filled in by the writer
	ack    uint64        // an Ack's seq; an Ack carries no events
	done   chan error
}

// seqPrefix starts every encoded event, since Seq is its first field.
var seqPrefix = []byte(`{"seq":0,`)

// ackPrefix starts an ack line.
var ackPrefix = []byte(`{"acked":`)

func appendAckLine(buf []byte, seq uint64) []byte {
	buf = append(buf, ackPrefix...)
	buf = strconv.AppendUint(buf, seq, 10)
	return append(buf, "}\n"...)
}

// parseAckLine returns the seq of an ack line.
func parseAckLine(line []byte) (uint64, bool) {
	rest, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\n")), ackPrefix)
	if !ok {
		return 0, false
	}
	digits, ok := bytes.CutSuffix(rest, []byte("}"))
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(string(digits), 10, 64)
	return n, err == nil
}

// CorruptLines counts the lines of events.jsonl that did not parse when it
// was opened (a crash mid-write leaves such): skipped, and to be reported.
func (o *Outbox) CorruptLines() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.corrupt
}

// NewOutbox opens the outbox in dir (created 0700 if missing), reading
// back the unacknowledged events.
func NewOutbox(dir string) (*Outbox, error) {
	if dir == "" {
		return nil, errors.New("filestore: empty data dir")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("filestore: create data dir: %w", err)
	}
	o := &Outbox{
		path:       filepath.Join(dir, EventsFile),
		ackPath:    filepath.Join(dir, EventsAckedFile),
		notify:     make(chan struct{}, 1),
		compactMin: compactMinBytes,
	}
	legacyAcked, err := readAcked(o.ackPath)
	if err != nil {
		return nil, err
	}
	o.acked, o.lastSeq = legacyAcked, legacyAcked
	if err := o.readEvents(); err != nil {
		return nil, err
	}
	if err := o.foldLegacyAcked(legacyAcked); err != nil {
		o.f.Close()
		return nil, err
	}
	o.writer = newGroupCommit(o.commit, o.maybeCompact)
	return o, nil
}

// foldLegacyAcked moves the seq an older server kept in events.acked into
// events.jsonl as an ack line, durably, before removing the file.
func (o *Outbox) foldLegacyAcked(acked uint64) error {
	if _, err := os.Stat(o.ackPath); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if acked > 0 {
		line := appendAckLine(nil, acked)
		if err := o.write(line); err != nil {
			return err
		}
		o.deadBytes += int64(len(line))
	}
	if err := os.Remove(o.ackPath); err != nil {
		return fmt.Errorf("filestore: remove %s: %w", o.ackPath, err)
	}
	return fsatomic.SyncDir(filepath.Dir(o.ackPath))
}

func readAcked(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("filestore: read %s: %w", path, err)
	}
	n, err := strconv.ParseUint(string(bytes.TrimSpace(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("filestore: %s is corrupt: %w", path, err)
	}
	return n, nil
}

// readEvents loads events.jsonl. A last line without its newline is the
// torn tail of an Append whose fsync never returned, so no caller was told
// it was stored and nothing was delivered from it: it is cut off. Other
// lines that do not parse can only come from such a write too (a crash may
// leave unwritten blocks inside the file's new size); they are skipped.
func (o *Outbox) readEvents() error {
	f, err := os.OpenFile(o.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("filestore: open %s: %w", o.path, err)
	}
	fail := func(err error) error {
		f.Close()
		return err
	}
	if err := fsatomic.SyncDir(filepath.Dir(o.path)); err != nil {
		return fail(err)
	}
	br := bufio.NewReaderSize(f, 1<<16)
	var off int64
	var maxSeq uint64
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(fmt.Errorf("filestore: read %s: %w", o.path, err))
		}
		off += int64(len(line))
		if seq, ok := parseAckLine(line); ok {
			o.acked = max(o.acked, seq)
			o.deadBytes += int64(len(line))
			continue
		}
		var ev ports.Event
		if json.Unmarshal(line, &ev) != nil || ev.Seq == 0 {
			o.deadBytes += int64(len(line))
			o.corrupt++
			continue
		}
		if ev.Seq <= maxSeq {
			return fail(fmt.Errorf("filestore: %s is corrupt: line %d has seq %d after %d", o.path, lineNo, ev.Seq, maxSeq))
		}
		maxSeq = ev.Seq
		o.pending = append(o.pending, outboxEntry{ev: ev, n: int64(len(line))})
	}
	if err := f.Truncate(off); err != nil {
		return fail(fmt.Errorf("filestore: truncate the torn tail of %s: %w", o.path, err))
	}
	o.f, o.end = f, off
	o.lastSeq = max(o.lastSeq, maxSeq, o.acked)
	o.dropAcked() // an ack line follows the events it confirms
	return nil
}

// dropAcked forgets the pending events up to o.acked; o.mu must be held
// (or the outbox not yet shared).
func (o *Outbox) dropAcked() {
	k := sort.Search(len(o.pending), func(i int) bool { return o.pending[i].ev.Seq > o.acked })
	for _, e := range o.pending[:k] {
		o.deadBytes += e.n
	}
	clear(o.pending[:k]) // let the collector have the delivered events
	o.pending = o.pending[k:]
}

// Append records events durably, in order, and returns them with their
// Seq. If ctx ends first it returns ctx.Err(); the events may still be
// recorded (and then delivered: at-least-once).
func (o *Outbox) Append(ctx context.Context, events ...ports.Event) ([]ports.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return []ports.Event{}, nil
	}
	// Encode in the callers' goroutines; the writer only adds the seq.
	req := &appendReq{
		bodies: make([][]byte, len(events)),
		evs:    make([]ports.Event, len(events)),
		done:   make(chan error, 1),
	}
	for i, ev := range events {
		ev.Seq = 0
		raw, err := json.Marshal(ev)
		if err != nil {
			return nil, fmt.Errorf("filestore: encode event %s: %w", ev.Type, err)
		}
		if !bytes.HasPrefix(raw, seqPrefix) {
			return nil, fmt.Errorf("filestore: event encodes as %.20q, not with its seq first", raw)
		}
		if err := json.Unmarshal(raw, &req.evs[i]); err != nil {
			return nil, err
		}
		req.bodies[i] = raw[len(seqPrefix):]
	}
	if !o.writer.submit(req) {
		return nil, fmt.Errorf("%w: outbox closed", ports.ErrStoreUnavailable)
	}
	select {
	case err := <-req.done:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := make([]ports.Event, len(events))
	for i, ev := range events {
		ev.Seq = req.seqs[i]
		out[i] = ev
	}
	return out, nil
}

// appendLine encodes an event line from its body.
func appendLine(buf []byte, seq uint64, body []byte) []byte {
	buf = append(buf, `{"seq":`...)
	buf = strconv.AppendUint(buf, seq, 10)
	buf = append(buf, ',')
	buf = append(buf, body...)
	return append(buf, '\n')
}

// commit writes a batch with one write and one fsync: its events, then
// one ack line for its highest Ack. On failure nothing is kept: the file
// is cut back.
func (o *Outbox) commit(batch []*appendReq) {
	var buf []byte
	var entries []outboxEntry
	seq, ack := o.lastSeq, o.acked // only this goroutine changes them
	ackTo := ack
	for _, req := range batch {
		ackTo = max(ackTo, req.ack)
		req.seqs = make([]uint64, len(req.bodies))
		for i, body := range req.bodies {
			seq++
			start := len(buf)
			buf = appendLine(buf, seq, body)
			ev := req.evs[i]
			ev.Seq = seq
			req.seqs[i] = seq
			entries = append(entries, outboxEntry{ev: ev, n: int64(len(buf) - start)})
		}
	}
	ackLine := 0
	if ackTo > ack {
		n := len(buf)
		buf = appendAckLine(buf, ackTo)
		ackLine = len(buf) - n
	}
	// The events are offered for delivery while their line is flushed:
	// each is already durable as the last event of its mission's stored
	// record, from which a restart queues it again if a crash took the
	// line (core/mission requeueLastEvents).
	o.mu.Lock()
	o.pending = append(o.pending, entries...)
	o.lastSeq = seq
	o.mu.Unlock()
	if len(entries) > 0 {
		select {
		case o.notify <- struct{}{}:
		default:
		}
	}
	var err error
	if len(buf) > 0 { // an ack already made durable by the batch before: nothing to flush
		err = o.write(buf)
	}
	if o.afterWrite != nil {
		o.afterWrite()
	}
	o.mu.Lock()
	switch {
	case err != nil:
		// Not stored: no longer offered. Their seqs stay used, since a
		// reader may have taken them; the caller's retry gets new ones.
		clear(o.pending[len(o.pending)-len(entries):])
		o.pending = o.pending[:len(o.pending)-len(entries)]
	case ackTo > ack:
		o.acked = ackTo
		o.deadBytes += int64(ackLine)
		o.dropAcked()
	}
	o.mu.Unlock()
	for _, req := range batch {
		req.done <- err
	}
	o.maybeCompact()
}

func (o *Outbox) write(buf []byte) error {
	var err error
	if o.f == nil {
		o.f, err = os.OpenFile(o.path, os.O_RDWR, 0)
		if err != nil {
			o.f = nil
			return fmt.Errorf("%w: open %s: %v", ports.ErrStoreUnavailable, o.path, err)
		}
	}
	if o.dirty {
		// Leftovers of a failed write could hold whole lines with seqs
		// that are about to be reused: cut them off before writing.
		if err := o.f.Truncate(o.end); err != nil {
			return fmt.Errorf("%w: truncate %s: %v", ports.ErrStoreUnavailable, o.path, err)
		}
		o.dirty = false
	}
	_, err = o.f.WriteAt(buf, o.end)
	if err == nil {
		o.syncs.Add(1)
		err = o.f.Sync()
	}
	if err != nil {
		o.dirty = o.f.Truncate(o.end) != nil
		return fmt.Errorf("%w: append %s: %v", ports.ErrStoreUnavailable, o.path, err)
	}
	o.end += int64(len(buf))
	return nil
}

// maybeCompact rewrites events.jsonl without acknowledged events once they
// are over compactMinBytes and more than half of the file. Only events
// whose ack is already durable are dropped, so a crash at any point still
// delivers every unacknowledged event.
func (o *Outbox) maybeCompact() {
	o.mu.Lock()
	if o.closed || o.deadBytes < o.compactMin || o.deadBytes*2 < o.end {
		o.mu.Unlock()
		return
	}
	keep := make([]ports.Event, len(o.pending))
	for i, e := range o.pending {
		keep[i] = e.ev
	}
	acked := o.acked
	o.mu.Unlock()

	// The ack line goes first: with every event acked and dropped, it is
	// what keeps the next seq from starting over.
	buf := appendAckLine(nil, acked)
	ackLine := int64(len(buf))
	lens := make(map[uint64]int64, len(keep))
	for _, ev := range keep {
		seq := ev.Seq
		ev.Seq = 0
		raw, err := json.Marshal(ev)
		if err != nil || !bytes.HasPrefix(raw, seqPrefix) {
			return // cannot happen: it was decoded from JSON
		}
		start := len(buf)
		buf = appendLine(buf, seq, raw[len(seqPrefix):])
		lens[seq] = int64(len(buf) - start)
	}
	if err := fsatomic.WriteFile(o.path, buf, 0o600); err != nil {
		return // the old file is intact; try again later
	}
	// The old handle now points at the replaced file: appends must go to
	// the new one, opened by write if it cannot be here.
	o.f.Close()
	o.f, o.end = nil, int64(len(buf))
	if f, err := os.OpenFile(o.path, os.O_RDWR, 0); err == nil {
		o.f = f
	}
	o.compactions.Add(1)

	o.mu.Lock()
	defer o.mu.Unlock()
	// Acks that came in meanwhile dropped events that are in the new file.
	o.deadBytes = ackLine
	for seq, n := range lens {
		if seq <= o.acked {
			o.deadBytes += n
		}
	}
	for i := range o.pending {
		o.pending[i].n = lens[o.pending[i].ev.Seq]
	}
}

// Pending returns up to max unacknowledged events with Seq > after, in
// order. Callers must not modify the events' Data.
func (o *Outbox) Pending(after uint64, limit int) ([]ports.Event, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := sort.Search(len(o.pending), func(i int) bool { return o.pending[i].ev.Seq > after })
	n := min(limit, len(o.pending)-i)
	if n <= 0 {
		return nil, nil
	}
	out := make([]ports.Event, n)
	for j := range out {
		out[j] = o.pending[i+j].ev
	}
	return out, nil
}

// Ack records that every event up to seq was delivered; it is durable
// before Ack returns. Acking a seq not yet assigned is an error: it would
// silently mark future events as delivered.
func (o *Outbox) Ack(seq uint64) error {
	o.mu.Lock()
	closed, acked, last := o.closed, o.acked, o.lastSeq
	o.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("%w: outbox closed", ports.ErrStoreUnavailable)
	case seq <= acked:
		return nil
	case seq > last:
		return fmt.Errorf("filestore: ack of seq %d beyond the last event %d", seq, last)
	}
	req := &appendReq{ack: seq, done: make(chan error, 1)}
	if !o.writer.submit(req) {
		return fmt.Errorf("%w: outbox closed", ports.ErrStoreUnavailable)
	}
	return <-req.done
}

// Acked is the highest acknowledged seq.
func (o *Outbox) Acked() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.acked
}

// Notify is signalled after each Append.
func (o *Outbox) Notify() <-chan struct{} { return o.notify }

// Close writes what is queued, then stops; later Appends and Acks fail
// with ports.ErrStoreUnavailable. Pending keeps answering from memory.
func (o *Outbox) Close() error {
	o.writer.stop()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closed = true
	if o.f == nil {
		return nil
	}
	return o.f.Close()
}
