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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Names of the mission files in the data dir.
const (
	MissionsFile        = "missions.json"
	MissionsArchiveFile = "missions-archive.jsonl"
)

// missionsVersion is the format version of missions.json.
const missionsVersion = 1

// DefaultRetention is how long terminal missions stay in missions.json.
const DefaultRetention = 24 * time.Hour

// MissionStoreConfig configures NewMissionStore.
type MissionStoreConfig struct {
	// Dir is the data dir; created (0700) if missing.
	Dir string
	// Retention is how long a terminal mission stays in the live file
	// after it ended; then it moves to the archive. Zero means
	// DefaultRetention, negative means never.
	Retention time.Duration
	// MaxFinished caps how many terminal missions stay in the live file
	// whatever their age; the ones that ended first move to the archive
	// once the count is an eighth over it.
	// It keeps one write's cost flat under sustained load. Zero means
	// DefaultMaxFinished, negative means no cap.
	MaxFinished int
	// Clock drives retention; nil means the wall clock.
	Clock ports.Clock
	// MaxArchiveBytes is the size past which the archive is rotated: it
	// becomes missions-archive.1.jsonl (replacing the older one) and a new
	// one starts, so the archive keeps about two generations. Zero means
	// DefaultMaxArchiveBytes, negative means never.
	MaxArchiveBytes int64
}

// DefaultMaxArchiveBytes is MaxArchiveBytes's default.
const DefaultMaxArchiveBytes = 256 << 20

// DefaultMaxFinished is MaxFinished's default.
const DefaultMaxFinished = 256

// MissionStore keeps missions in <Dir>/missions.json, rewritten atomically
// on every change, and moves old terminal missions to the append-only
// <Dir>/missions-archive.jsonl so the live file stays small.
//
// Puts are group-committed: one writer goroutine takes everything queued,
// writes one file and wakes every waiter, so N concurrent Puts cost about
// one write. The in-memory state is always the last durable file.
type MissionStore struct {
	path, archivePath string
	retention         time.Duration
	maxFinished       int
	clock             ports.Clock

	// mu guards the state below. Only the writer goroutine (and Close,
	// once the writer stopped) changes it, under Lock; the writer reads it
	// without a lock.
	mu      sync.RWMutex
	byID    map[string]*missionRec
	order   []*missionRec // sorted by CreatedAt, then ID
	archive *archiveFile
	arcIdx  map[string]arcLoc
	closed  bool

	writer *groupCommit[*putReq]
	writes atomic.Int64 // files written, for tests and benchmarks
}

var _ ports.MissionStore = (*MissionStore)(nil)

// missionRec is a stored mission and its encoding, kept so that a write
// only marshals what changed.
type missionRec struct {
	m   ports.Mission
	raw []byte
}

// arcLoc is where the latest archived record of a mission is: an index
// entry per mission instead of the record, as the archive may be large.
type arcLoc struct {
	off int64
	n   int32
	old bool // in the rotated archive, missions-archive.1.jsonl
}

type putReq struct {
	recs []*missionRec
	done chan error // buffered: the writer never blocks on a gone waiter
}

// NewMissionStore reads missions.json and indexes the archive. A corrupt
// missions.json is an error naming the file, left untouched: starting
// empty would forget missions and then overwrite the evidence.
func NewMissionStore(cfg MissionStoreConfig) (*MissionStore, error) {
	if cfg.Dir == "" {
		return nil, errors.New("filestore: empty data dir")
	}
	if cfg.MaxFinished == 0 {
		cfg.MaxFinished = DefaultMaxFinished
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Wall{}
	}
	if cfg.MaxArchiveBytes == 0 {
		cfg.MaxArchiveBytes = DefaultMaxArchiveBytes
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("filestore: create data dir: %w", err)
	}
	s := &MissionStore{
		path:        filepath.Join(cfg.Dir, MissionsFile),
		archivePath: filepath.Join(cfg.Dir, MissionsArchiveFile),
		retention:   cfg.Retention,
		maxFinished: cfg.MaxFinished,
		clock:       cfg.Clock,
		byID:        make(map[string]*missionRec),
		arcIdx:      make(map[string]arcLoc),
	}
	if err := s.loadLive(); err != nil {
		return nil, err
	}
	arc, err := openArchive(s.archivePath, s.arcIdx, cfg.MaxArchiveBytes)
	if err != nil {
		return nil, err
	}
	s.archive = arc
	s.writer = newGroupCommit(func(batch []*putReq) {
		err := s.commit(batch)
		for _, req := range batch {
			req.done <- err
		}
	}, nil)
	return s, nil
}

// missionsDoc is the layout of missions.json.
type missionsDoc struct {
	Version  int               `json:"version"`
	Missions []json.RawMessage `json:"missions"`
}

func (s *MissionStore) loadLive() error {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("filestore: read %s: %w", s.path, err)
	}
	corrupt := func(err error) error {
		return fmt.Errorf("filestore: %s is corrupt (fix or move it away; it was not changed): %w", s.path, err)
	}
	var doc missionsDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return corrupt(err)
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) != 0 {
		return corrupt(errors.New("trailing data after the JSON object"))
	}
	if doc.Version != missionsVersion {
		return corrupt(fmt.Errorf("version %d, want %d", doc.Version, missionsVersion))
	}
	for i, raw := range doc.Missions {
		r, err := decodeRec(raw)
		if err != nil {
			return corrupt(fmt.Errorf("mission %d: %w", i, err))
		}
		if old, ok := s.byID[r.m.ID]; ok {
			// Never written by this package; the later record wins.
			*old = *r
			continue
		}
		s.byID[r.m.ID] = r
		s.order = append(s.order, r)
	}
	slices.SortFunc(s.order, compareRecs)
	return nil
}

// decodeRec decodes one mission and re-encodes it, so raw is exactly what
// the next write will produce.
func decodeRec(raw []byte) (*missionRec, error) {
	var m ports.Mission
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m.ID == "" {
		return nil, errors.New("empty mission_id")
	}
	return newRec(m)
}

// newRec encodes m and keeps the decoded copy of that encoding, so what is
// in memory is exactly what a reopen will read (no monotonic clock
// readings, no memory shared with the caller).
func newRec(m ports.Mission) (*missionRec, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	r := &missionRec{raw: raw}
	if err := json.Unmarshal(raw, &r.m); err != nil {
		return nil, err
	}
	return r, nil
}

func compareRecs(a, b *missionRec) int {
	if c := a.m.CreatedAt.Compare(b.m.CreatedAt); c != 0 {
		return c
	}
	switch {
	case a.m.ID < b.m.ID:
		return -1
	case a.m.ID > b.m.ID:
		return 1
	}
	return 0
}

// Load returns the live missions, sorted by CreatedAt then ID.
func (s *MissionStore) Load() ([]ports.Mission, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]ports.Mission, len(s.order))
	for i, r := range s.order {
		out[i] = r.m.Clone()
	}
	return out, nil
}

// Archived returns the latest archived record of id, read from the archive
// file on demand.
func (s *MissionStore) Archived(id string) (ports.Mission, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	loc, ok := s.arcIdx[id]
	if !ok {
		return ports.Mission{}, false, nil
	}
	if s.closed {
		return ports.Mission{}, false, fmt.Errorf("%w: store closed", ports.ErrStoreUnavailable)
	}
	m, err := s.archive.read(loc)
	if err != nil {
		return ports.Mission{}, false, fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	return m, true, nil
}

// Put stores missions and returns once they are durable. If ctx ends first
// it returns ctx.Err(); the write may still happen.
func (s *MissionStore) Put(ctx context.Context, missions ...ports.Mission) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Encode here, in the callers' goroutines, so the writer only
	// concatenates.
	req := &putReq{recs: make([]*missionRec, len(missions)), done: make(chan error, 1)}
	for i, m := range missions {
		if m.ID == "" {
			return errors.New("filestore: mission without an id")
		}
		r, err := newRec(m)
		if err != nil {
			return fmt.Errorf("filestore: encode mission %s: %w", m.ID, err)
		}
		req.recs[i] = r
	}
	if !s.writer.submit(req) {
		return fmt.Errorf("%w: store closed", ports.ErrStoreUnavailable)
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close writes what is queued and stops the writer. Later Puts return
// ports.ErrStoreUnavailable.
func (s *MissionStore) Close() error {
	s.writer.stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.archive.close()
}

// commit applies a batch of Puts in order and writes it out: old terminal
// missions to the archive first, then the live file without them. Nothing
// in memory changes unless the live file was written.
func (s *MissionStore) commit(batch []*putReq) error {
	changed := make(map[string]*missionRec)
	var added []*missionRec
	for _, req := range batch {
		for _, r := range req.recs {
			if _, seen := changed[r.m.ID]; !seen {
				if _, live := s.byID[r.m.ID]; !live {
					added = append(added, r)
				}
			}
			changed[r.m.ID] = r
		}
	}
	// Build the next sorted order without touching the current one.
	next := make([]*missionRec, 0, len(s.order)+len(added))
	resort := false
	for _, r := range s.order {
		if c, ok := changed[r.m.ID]; ok {
			resort = resort || !c.m.CreatedAt.Equal(r.m.CreatedAt)
			r = c
		}
		next = append(next, r)
	}
	for _, a := range added {
		a = changed[a.m.ID] // the last record for a new id in this batch
		resort = resort || (len(next) > 0 && compareRecs(next[len(next)-1], a) > 0)
		next = append(next, a)
	}
	if resort {
		slices.SortFunc(next, compareRecs)
	}

	var expired []*missionRec
	if s.retention > 0 {
		// next is this commit's own slice: filter it in place.
		cutoff := s.clock.Now().Add(-s.retention)
		kept := next[:0]
		for _, r := range next {
			if s.expired(r, cutoff) {
				expired = append(expired, r)
			} else {
				kept = append(kept, r)
			}
		}
		clear(next[len(kept):])
		next = kept
	}
	if s.maxFinished >= 0 {
		next, expired = s.capFinished(next, expired)
	}

	var locs []arcLoc
	if len(expired) > 0 && s.archive.full() {
		// Rotated under the lock: a reader never follows an index entry
		// into the wrong generation.
		s.mu.Lock()
		err := s.archive.rotate()
		if err == nil {
			for id, loc := range s.arcIdx {
				if loc.old {
					delete(s.arcIdx, id) // the oldest generation is gone
				} else {
					loc.old = true
					s.arcIdx[id] = loc
				}
			}
		}
		s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("%w: rotate %s: %v", ports.ErrStoreUnavailable, s.archivePath, err)
		}
	}
	if len(expired) > 0 {
		// Archive first: a crash before the live file is replaced leaves a
		// mission in both files (Load prefers live), never in neither.
		var err error
		if locs, err = s.archive.append(expired); err != nil {
			return fmt.Errorf("%w: append %s: %v", ports.ErrStoreUnavailable, s.archivePath, err)
		}
	}
	err := fsatomic.WriteFile(s.path, encodeMissionsFile(next), 0o600)
	s.writes.Add(1)

	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range expired {
		// Durable in the archive even if the live write failed.
		s.arcIdx[r.m.ID] = locs[i]
	}
	if err != nil {
		return fmt.Errorf("%w: write %s: %v", ports.ErrStoreUnavailable, s.path, err)
	}
	for id, r := range changed {
		s.byID[id] = r
	}
	for _, r := range expired {
		delete(s.byID, r.m.ID)
	}
	s.order = next
	return nil
}

// capFinished moves the terminal missions beyond maxFinished that ended
// first from next to expired.
func (s *MissionStore) capFinished(next, expired []*missionRec) ([]*missionRec, []*missionRec) {
	var finished []*missionRec
	for _, r := range next {
		if r.m.State.Terminal() {
			finished = append(finished, r)
		}
	}
	extra := len(finished) - s.maxFinished
	if extra <= s.maxFinished/8 {
		// Some slack over the cap, then down to it in one go: one
		// archive append (and its flush) per many ended missions, not
		// per mission.
		return next, expired
	}
	slices.SortStableFunc(finished, func(a, b *missionRec) int { return endOf(a).Compare(endOf(b)) })
	drop := make(map[*missionRec]bool, extra)
	for _, r := range finished[:extra] {
		drop[r] = true
		expired = append(expired, r)
	}
	kept := next[:0]
	for _, r := range next {
		if !drop[r] {
			kept = append(kept, r)
		}
	}
	clear(next[len(kept):])
	return kept, expired
}

func endOf(r *missionRec) time.Time {
	if r.m.EndedAt.IsZero() {
		return r.m.UpdatedAt
	}
	return r.m.EndedAt
}

// expired reports whether r is terminal and ended before cutoff. A
// terminal mission without an end time counts from its last update.
func (s *MissionStore) expired(r *missionRec, cutoff time.Time) bool {
	if !r.m.State.Terminal() {
		return false
	}
	end := r.m.EndedAt
	if end.IsZero() {
		end = r.m.UpdatedAt
	}
	return end.Before(cutoff)
}

// encodeMissionsFile lays out missions.json with one mission per line, so
// it stays readable and diffable.
func encodeMissionsFile(recs []*missionRec) []byte {
	n := 64
	for _, r := range recs {
		n += len(r.raw) + 4
	}
	buf := make([]byte, 0, n)
	buf = fmt.Appendf(buf, "{\"version\": %d, \"missions\": [", missionsVersion)
	for i, r := range recs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, "\n  "...)
		buf = append(buf, r.raw...)
	}
	if len(recs) > 0 {
		buf = append(buf, '\n')
	}
	return append(buf, "]}\n"...)
}

// archiveFile is missions-archive.jsonl: one mission per line, appended.
type archiveFile struct {
	path string
	max  int64    // rotate past this many bytes; negative: never
	old  *os.File // the rotated generation, nil if none
	f    *os.File // nil until the file exists
	// end is where the last complete line ends. A crash mid-append can
	// leave a torn tail past it; the next append overwrites it.
	end int64
	// clean: nothing lies past end (the last write succeeded).
	clean bool
}

// openArchive indexes the archive into idx (id → latest line). Lines that
// do not parse are skipped: the archive is fsynced before missions.json
// drops a mission, so a line torn by a crash belongs to missions that are
// still in missions.json.
func openArchive(path string, idx map[string]arcLoc, max int64) (*archiveFile, error) {
	a := &archiveFile{path: path, max: max}
	// The rotated generation first: the current one's lines are newer.
	if old, err := os.Open(rotatedPath(path)); err == nil {
		if _, err := indexArchive(old, rotatedPath(path), idx, true); err != nil {
			old.Close()
			return nil, err
		}
		a.old = old
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("filestore: open %s: %w", rotatedPath(path), err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return a, nil
	}
	if err != nil {
		_ = a.close() // the open error is the one to report
		return nil, fmt.Errorf("filestore: open %s: %w", path, err)
	}
	off, err := indexArchive(f, path, idx, false)
	if err != nil {
		f.Close()
		_ = a.close()
		return nil, err
	}
	a.f, a.end = f, off
	return a, nil
}

// rotatedPath is the archive's older generation.
func rotatedPath(path string) string {
	return strings.TrimSuffix(path, ".jsonl") + ".1.jsonl"
}

// indexArchive adds f's complete lines to idx and returns where they end.
func indexArchive(f *os.File, path string, idx map[string]arcLoc, old bool) (int64, error) {
	br := bufio.NewReaderSize(f, 1<<16)
	var off int64
	var id struct {
		ID string `json:"mission_id"`
	}
	for {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			break // a tail without a newline is torn
		}
		if err != nil {
			return 0, fmt.Errorf("filestore: read %s: %w", path, err)
		}
		id.ID = ""
		if idx != nil && json.Unmarshal(line, &id) == nil && id.ID != "" {
			idx[id.ID] = arcLoc{off: off, n: int32(len(line) - 1), old: old} //nolint:gosec // a record line is far below 2 GiB (records are bounded)
		}
		off += int64(len(line))
	}
	return off, nil
}

// full reports whether the archive is due for rotation.
func (a *archiveFile) full() bool { return a.max > 0 && a.f != nil && a.end >= a.max }

// rotate makes the current generation the old one (dropping the older) and
// starts an empty one at the next append.
func (a *archiveFile) rotate() error {
	if err := os.Rename(a.path, rotatedPath(a.path)); err != nil {
		return err
	}
	if err := fsatomic.SyncDir(filepath.Dir(a.path)); err != nil {
		return err
	}
	if a.old != nil {
		a.old.Close()
	}
	a.old, a.f, a.end = a.f, nil, 0 // the open file follows the rename
	return nil
}

// append writes recs as lines at the end of the complete lines and fsyncs.
func (a *archiveFile) append(recs []*missionRec) ([]arcLoc, error) {
	var buf []byte
	locs := make([]arcLoc, len(recs))
	for i, r := range recs {
		locs[i] = arcLoc{off: a.end + int64(len(buf)), n: int32(len(r.raw))} //nolint:gosec // a record is far below 2 GiB (records are bounded)
		buf = append(append(buf, r.raw...), '\n')
	}
	if err := a.write(buf, true); err != nil {
		return nil, err
	}
	return locs, nil
}

// write puts buf (complete lines) at the end of the complete lines,
// creating the file if need be, and fsyncs it if sync is set. The audit
// log shares it (and the rotation) with the mission archive.
func (a *archiveFile) write(buf []byte, sync bool) error {
	if a.f == nil {
		f, err := os.OpenFile(a.path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		if err := fsatomic.SyncDir(filepath.Dir(a.path)); err != nil {
			f.Close()
			return err
		}
		a.f = f
		a.clean = false
	}
	// Drop a torn tail first, so it cannot glue onto the new first line
	// (once: after a write that succeeded there is none).
	if !a.clean {
		if err := a.f.Truncate(a.end); err != nil {
			return err
		}
	}
	a.clean = false
	if _, err := a.f.WriteAt(buf, a.end); err != nil {
		return err
	}
	if sync {
		if err := a.f.Sync(); err != nil {
			return err
		}
	}
	a.end += int64(len(buf))
	a.clean = true
	return nil
}

func (a *archiveFile) read(loc arcLoc) (ports.Mission, error) {
	f := a.f
	if loc.old {
		f = a.old
	}
	if f == nil {
		return ports.Mission{}, fmt.Errorf("read %s: no such generation", a.path)
	}
	buf := make([]byte, loc.n)
	if _, err := f.ReadAt(buf, loc.off); err != nil {
		return ports.Mission{}, fmt.Errorf("read %s: %w", a.path, err)
	}
	var m ports.Mission
	if err := json.Unmarshal(buf, &m); err != nil {
		return ports.Mission{}, fmt.Errorf("%s at offset %d: %w", a.path, loc.off, err)
	}
	return m, nil
}

func (a *archiveFile) close() error {
	if a.old != nil {
		a.old.Close()
	}
	if a.f == nil {
		return nil
	}
	return a.f.Close()
}

// groupCommit feeds everything queued to commit as one batch, from one
// goroutine: while a batch is being written the next one gathers, so
// concurrent callers share a write and its fsyncs. The outbox uses it too.
type groupCommit[R any] struct {
	commit func([]R)
	idle   func() // run on request, between batches; may be nil

	mu       sync.Mutex
	queue    []R
	idleWant bool
	stopped  bool
	wake     chan struct{}
	done     chan struct{}
}

func newGroupCommit[R any](commit func([]R), idle func()) *groupCommit[R] {
	g := &groupCommit[R]{commit: commit, idle: idle, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go g.run()
	return g
}

// submit queues r for the next batch; false once stopped.
func (g *groupCommit[R]) submit(r R) bool {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return false
	}
	g.queue = append(g.queue, r)
	g.mu.Unlock()
	g.poke()
	return true
}

// requestIdle asks for one run of idle once the queue is empty.
func (g *groupCommit[R]) requestIdle() {
	g.mu.Lock()
	g.idleWant = true
	g.mu.Unlock()
	g.poke()
}

func (g *groupCommit[R]) poke() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// stop refuses new work, commits what is queued and waits for the goroutine.
func (g *groupCommit[R]) stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	g.poke()
	<-g.done
}

func (g *groupCommit[R]) run() {
	defer close(g.done)
	for {
		g.mu.Lock()
		batch, idle, stopped := g.queue, g.idleWant, g.stopped
		g.queue, g.idleWant = nil, false
		g.mu.Unlock()
		switch {
		case len(batch) > 0:
			g.commit(batch)
			if idle {
				g.requestIdle() // keep the request for when the queue is empty
			}
		case stopped:
			return
		case idle && g.idle != nil:
			g.idle()
		case !idle:
			<-g.wake
		}
	}
}
