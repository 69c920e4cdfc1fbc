package filestore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// SessionLogsDir is the directory of session logs in the data dir.
const SessionLogsDir = "sessions"

// DefaultSessionLogMaxBytes bounds each session's log unless configured.
const DefaultSessionLogMaxBytes = 64 << 20

// segmentsPerLog is how many segments a full log spans: dropping happens a
// whole segment file at a time, so disk use per session is at most
// MaxBytes + MaxBytes/segmentsPerLog.
const segmentsPerLog = 8

const segmentSuffix = ".seg"

// SessionLog is a ports.SessionLog on disk. Each session has a directory
// (dir/s-<id>, or dir/x-<hex id> for ids that are not plain tokens) of
// segment files named by the absolute offset of their first byte
// (%020d.seg), so a log's offsets are rebuilt from file names and sizes
// alone on open: nothing else is stored.
//
// Bound: a session holds its last MaxBytes bytes exactly; the first held
// offset is max(base of the oldest segment, End-MaxBytes), and a segment
// file is removed once every byte of it is older than that.
//
// Durability: every Append is written to its segment file with pwrite(2)
// before it returns, with no buffering in the process, so a crash or
// restart of agentic-mgmt loses nothing that Append acknowledged. There is
// no fsync per Append (it would cap a terminal at the disk's sync rate); a
// segment is fsynced when it is full and the next one begins, and every
// open segment at Close. A machine crash can therefore lose the unsynced
// tail of the active segment, and those offsets are then assigned again;
// a viewer holding a later offset gets ErrOffsetBeyondEnd and resyncs.
//
// Storage failures (a full disk): bytes that cannot be written still take
// their offsets, so nothing is dropped in silence: they become a hole in
// the log (a gap for readers, ReadFrom says so), are counted (Lost,
// LostBytes) and Append returns ports.ErrOutputNotStored. Every later Append
// tries again, in a new segment that starts after the hole, so storing
// resumes by itself once there is room. Holes between segments survive a
// restart (segment files are named by offset); a hole at the very end does
// not (its offsets are assigned again, as after a machine crash).
//
// Memory is bounded: nothing but the segment list is kept per session and
// reads are served from the files (the page cache), so ReadFrom allocates
// at most max bytes. One file stays open per session appended to since
// open, until Delete or Close.
type SessionLog struct {
	dir    string
	max    int64
	segMax int64
	done   chan struct{} // closed by Close: wakes every waiter

	mu       sync.Mutex
	sessions map[string]*slSession
	closed   bool

	lostTotal atomic.Uint64 // bytes not stored since this log was opened
}

var _ ports.SessionLog = (*SessionLog)(nil)

// SessionLogOptions configures NewSessionLog.
type SessionLogOptions struct {
	// MaxBytes bounds each session's log; 0 means DefaultSessionLogMaxBytes.
	MaxBytes int64
	// SegmentBytes is the size of one segment file; 0 means MaxBytes/8
	// (at least 4 KiB).
	SegmentBytes int64
}

type slSegment struct {
	base uint64
	size int64
}

type slSession struct {
	dir string

	// mu guards everything below: Append and Delete hold it exclusively,
	// readers shared (reads are pread calls, safe side by side).
	mu    sync.RWMutex
	segs  []slSegment // by base; the last one is active. Between two, or after the last, a hole: bytes not stored
	first uint64
	end   uint64
	lost  uint64   // bytes in holes: not stored since open, and those found between segments on load
	w     *os.File // the active segment, nil until the next Append needs it
	// cur is the output cursor (sessionlog_cursor.go), kept when hasCur;
	// cf its file, open while appended to; curOnDisk says the file exists.
	cur       ports.OutputCursor
	hasCur    bool
	cf        *os.File
	curOnDisk bool
	dead      error // set by Delete (ErrSessionNotFound) or Close: drop this entry
	notify    chan struct{}

	// watched says a waiter holds notify, so Append must close and replace it
	// (spares a channel per Append when nobody waits).
	watched atomic.Bool
	deleted atomic.Bool

	// rmu guards readers: open handles of older segments, shared by readers
	// (opening a file per 4 KiB read costs more than the read).
	rmu     sync.Mutex
	readers []*slReadFile
}

// maxReadFiles bounds the cached read handles per session: one per viewer
// position worth keeping; a third position evicts the least recently used.
const maxReadFiles = 2

type slReadFile struct {
	f       *os.File
	base    uint64
	refs    int  // readers using f; guarded by rmu
	evicted bool // out of the cache: closed by its last reader
}

// NewSessionLog opens the session logs kept in dir (created 0700 if missing).
// Sessions are read lazily, on first use.
func NewSessionLog(dir string, opts SessionLogOptions) (*SessionLog, error) {
	if dir == "" {
		return nil, errors.New("filestore: empty session log dir")
	}
	bound := opts.MaxBytes
	if bound == 0 {
		bound = DefaultSessionLogMaxBytes
	}
	if bound < 0 || opts.SegmentBytes < 0 {
		return nil, fmt.Errorf("filestore: negative session log bound")
	}
	seg := opts.SegmentBytes
	if seg == 0 {
		seg = max(bound/segmentsPerLog, min(bound, 4096))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("filestore: create session log dir: %w", err)
	}
	return &SessionLog{dir: dir, max: bound, segMax: seg, done: make(chan struct{}), sessions: map[string]*slSession{}}, nil
}

// sessionDirName maps a session id to a safe directory name; the two
// prefixes keep a literal id from colliding with an encoded one.
func sessionDirName(id string) string {
	plain := id != ""
	for i := 0; i < len(id) && plain; i++ {
		c := id[i]
		plain = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	if plain && len(id) <= 128 {
		return "s-" + id
	}
	return "x-" + hex.EncodeToString([]byte(id))
}

// get returns the entry of id, loading it from disk if needed. Without
// create, a session with neither an entry nor a directory gives nil.
func (l *SessionLog) get(id string, create bool) (*slSession, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ports.ErrSessionLogClosed
	}
	if s := l.sessions[id]; s != nil {
		l.mu.Unlock()
		return s, nil
	}
	dir := filepath.Join(l.dir, sessionDirName(id))
	if !create {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			l.mu.Unlock()
			return nil, nil // not kept in memory: unknown ids must not grow the map
		}
	}
	s := &slSession{dir: dir, notify: make(chan struct{})}
	s.mu.Lock() // published locked: others wait for the load below
	l.sessions[id] = s
	l.mu.Unlock()
	err := s.load(l.max)
	if err != nil {
		s.dead = err
		l.forget(id, s)
	}
	s.mu.Unlock()
	return s, err
}

func (l *SessionLog) forget(id string, s *slSession) {
	l.mu.Lock()
	if l.sessions[id] == s {
		delete(l.sessions, id)
	}
	l.mu.Unlock()
}

// lock returns the live entry of id locked (exclusively when write), or
// nil (not locked) for a session that does not exist and create is false.
func (l *SessionLog) lock(id string, create, write bool) (*slSession, error) {
	for {
		s, err := l.get(id, create)
		if s == nil || err != nil {
			return nil, err
		}
		if write {
			s.mu.Lock()
		} else {
			s.mu.RLock()
		}
		if s.dead == nil {
			return s, nil
		}
		dead := s.dead
		s.unlock(write)
		if errors.Is(dead, ports.ErrSessionLogClosed) {
			return nil, dead
		}
		// Deleted while we waited for the lock: the id starts anew.
	}
}

func (s *slSession) unlock(write bool) {
	if write {
		s.mu.Unlock()
	} else {
		s.mu.RUnlock()
	}
}

// load reads the segment list. A segment that ends short of the next one
// leaves a hole: bytes that could not be stored (a full segment is fsynced
// before the next is created, so a crash does not make one). Holes are
// kept as holes (counted as lost), so offsets only ever go forward and no
// offset maps to two bytes.
func (s *slSession) load(bound int64) error {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("filestore: read session log %s: %w", s.dir, err)
	}
	var segs []slSegment
	for _, e := range entries {
		base, err := strconv.ParseUint(strings.TrimSuffix(e.Name(), segmentSuffix), 10, 64)
		if err != nil || !strings.HasSuffix(e.Name(), segmentSuffix) || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return fmt.Errorf("filestore: stat session log segment: %w", err)
		}
		segs = append(segs, slSegment{base: base, size: info.Size()})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].base < segs[j].base })
	s.loadCursor()
	for i := len(segs) - 1; i > 0; i-- {
		prevEnd := segs[i-1].base + uint64(segs[i-1].size) //nolint:gosec // file sizes are never negative
		if prevEnd > segs[i].base {
			// Overlapping segments cannot be told apart: keep the later ones.
			s.removeSegments(segs[:i])
			segs = segs[i:]
			break
		}
		s.lost += segs[i].base - prevEnd
	}
	s.segs = segs
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		s.first, s.end = segs[0].base, last.base+uint64(last.size) //nolint:gosec // file sizes are never negative
	}
	s.settleCursor()
	s.trim(bound)
	return nil
}

func (s *slSession) segPath(base uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%020d%s", base, segmentSuffix))
}

// removeSegments deletes segment files; a failure only leaves disk space
// behind (they are outside the held range), so it is not reported.
func (s *slSession) removeSegments(segs []slSegment) {
	if len(segs) == 0 {
		return
	}
	for _, seg := range segs {
		os.Remove(s.segPath(seg.base))
	}
	// Handles of removed segments would keep their disk space.
	s.rmu.Lock()
	kept := s.readers[:0]
	for _, rf := range s.readers {
		if rf.base <= segs[len(segs)-1].base {
			s.evict([]*slReadFile{rf})
		} else {
			kept = append(kept, rf)
		}
	}
	s.readers = kept
	s.rmu.Unlock()
}

// trim moves the first held offset up to the bound and removes segments
// wholly before it. The active segment always stays (it holds End).
func (s *slSession) trim(bound int64) {
	if s.end > uint64(bound) && s.end-uint64(bound) > s.first { //nolint:gosec // the bound is positive (checked in New)
		s.first = s.end - uint64(bound)
	}
	n := 0
	for n < len(s.segs)-1 && s.segs[n].base+uint64(s.segs[n].size) <= s.first {
		n++
	}
	if n > 0 {
		s.removeSegments(s.segs[:n])
		s.segs = append(s.segs[:0], s.segs[n:]...)
	}
	if len(s.segs) > 0 && s.first < s.segs[0].base {
		s.first = s.segs[0].base
	}
}

// Append implements ports.SessionLog.
func (l *SessionLog) Append(sessionID string, data []byte) (uint64, error) {
	s, err := l.lock(sessionID, true, true)
	if err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if len(data) > 0 {
		s.dropCursor() // bytes no cursor accounts for
	}
	return l.appendLocked(s, data)
}

// appendLocked is Append with s locked for writing.
func (l *SessionLog) appendLocked(s *slSession, data []byte) (uint64, error) {
	var err error
	off := s.end
	if len(data) == 0 {
		return off, nil
	}
	if int64(len(data)) > l.max {
		// Bytes that would be dropped at once are not written: the log
		// restarts past them, in a new segment at their offset.
		skip := len(data) - int(l.max)
		_ = s.closeWriter() // a segment that failed to close loses nothing kept: all of it goes now
		s.removeSegments(s.segs)
		s.segs = s.segs[:0]
		s.end += uint64(skip) //nolint:gosec // skip is a slice length
		s.first = s.end
		data = data[skip:]
	}
	if n, werr := s.write(data, l.segMax); werr != nil {
		// What was not written still takes its offsets: a hole, counted.
		lost := uint64(len(data) - n) //nolint:gosec // n <= len(data)
		s.end += lost
		s.lost += lost
		l.lostTotal.Add(lost)
		err = fmt.Errorf("%w: %d bytes at offset %d: %w", ports.ErrOutputNotStored, lost, s.end-lost, werr)
	}
	s.trim(l.max)
	if s.end != off && s.watched.Swap(false) {
		close(s.notify)
		s.notify = make(chan struct{})
	}
	return off, err
}

// write appends data across as many segments as it takes and returns how
// many of its bytes were stored (all of them unless err): a failed write
// keeps what reached the file (a prefix, at its right offsets) and stops.
func (s *slSession) write(data []byte, segMax int64) (int, error) {
	written := 0
	for len(data) > 0 {
		if s.w == nil || s.segs[len(s.segs)-1].size >= segMax || !s.atEnd() {
			if err := s.roll(segMax); err != nil {
				return written, err
			}
		}
		seg := &s.segs[len(s.segs)-1]
		n := min(int64(len(data)), segMax-seg.size)
		k, err := s.w.WriteAt(data[:n], seg.size)
		seg.size += int64(k)
		s.end += uint64(k) //nolint:gosec // k >= 0
		written += k
		if err != nil {
			// A failed write may have left more in the file than it reported
			// (tmpfs does): cut the file to what is counted, or a restart
			// would take those bytes for stored. Should that fail too, they
			// are this chunk's own bytes at their own offsets, never another's.
			_ = s.w.Truncate(seg.size)
			if seg.size == 0 {
				// An empty segment (the disk was full from its first byte)
				// is not kept: the next try makes a new one after the hole.
				_ = s.closeWriter()
				os.Remove(s.segPath(seg.base))
				s.segs = s.segs[:len(s.segs)-1]
			}
			return written, fmt.Errorf("filestore: append to session log: %w", err)
		}
		data = data[n:]
	}
	return written, nil
}

// atEnd says the last segment ends at End (no hole after it), so appends
// may go on in it.
func (s *slSession) atEnd() bool {
	last := s.segs[len(s.segs)-1]
	return last.base+uint64(last.size) == s.end //nolint:gosec // file sizes are never negative
}

// roll opens the active segment for writing, or starts a new one when
// there is none or it is full (fsyncing the full one first).
func (s *slSession) roll(segMax int64) error {
	if s.w == nil && len(s.segs) > 0 && s.segs[len(s.segs)-1].size < segMax && s.atEnd() {
		last := s.segs[len(s.segs)-1]
		f, err := os.OpenFile(s.segPath(last.base), os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("filestore: open session log segment: %w", err)
		}
		s.w = f
		return nil
	}
	if s.w != nil {
		if err := s.w.Sync(); err != nil {
			return fmt.Errorf("filestore: fsync session log segment: %w", err)
		}
		if err := s.closeWriter(); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("filestore: create session log: %w", err)
	}
	f, err := os.OpenFile(s.segPath(s.end), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("filestore: create session log segment: %w", err)
	}
	if err := fsatomic.SyncDir(s.dir); err != nil {
		f.Close()
		os.Remove(s.segPath(s.end)) // the next try makes it again, maybe at another offset
		return err
	}
	s.w = f
	s.segs = append(s.segs, slSegment{base: s.end})
	return nil
}

func (s *slSession) closeWriter() error {
	if s.w == nil {
		return nil
	}
	err := s.w.Close()
	s.w = nil
	if err != nil {
		return fmt.Errorf("filestore: close session log segment: %w", err)
	}
	return nil
}

// ReadFrom implements ports.SessionLog.
func (l *SessionLog) ReadFrom(sessionID string, offset uint64, max int) ([]byte, uint64, bool, error) {
	s, err := l.lock(sessionID, false, false)
	if err != nil {
		return nil, 0, false, err
	}
	if s == nil {
		if offset > 0 {
			return nil, 0, false, fmt.Errorf("%w: %d > 0", ports.ErrOffsetBeyondEnd, offset)
		}
		return nil, 0, false, nil
	}
	defer s.mu.RUnlock()
	if offset > s.end {
		return nil, 0, false, fmt.Errorf("%w: %d > %d", ports.ErrOffsetBeyondEnd, offset, s.end)
	}
	start, gap := offset, false
	if start < s.first {
		start, gap = s.first, true
	}
	// A read stops at a hole; one that starts in a hole begins after it.
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base+uint64(s.segs[i].size) > start }) //nolint:gosec // file sizes are never negative
	if i == len(s.segs) {
		if start < s.end {
			start, gap = s.end, true
		}
		return nil, start, gap, nil
	}
	if s.segs[i].base > start {
		start, gap = s.segs[i].base, true
	}
	j := i
	for j+1 < len(s.segs) && s.segs[j].base+uint64(s.segs[j].size) == s.segs[j+1].base { //nolint:gosec // file sizes are never negative
		j++
	}
	runEnd := s.segs[j].base + uint64(s.segs[j].size) //nolint:gosec // file sizes are never negative
	if max <= 0 || start == runEnd {
		return nil, start, gap, nil
	}
	buf := make([]byte, min(uint64(max), runEnd-start))
	if err := s.readAt(buf, start); err != nil {
		return nil, start, gap, err
	}
	return buf, start, gap, nil
}

// Lost implements ports.SessionLog.
func (l *SessionLog) Lost(sessionID string) uint64 {
	s, err := l.lock(sessionID, false, false)
	if s == nil || err != nil {
		return 0
	}
	defer s.mu.RUnlock()
	return s.lost
}

// LostBytes is how many bytes of output, of all sessions, could not be
// stored since the log was opened.
func (l *SessionLog) LostBytes() uint64 { return l.lostTotal.Load() }

// readAt fills buf from offset pos, which lies within the held range.
func (s *slSession) readAt(buf []byte, pos uint64) error {
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base+uint64(s.segs[i].size) > pos })
	for len(buf) > 0 && i < len(s.segs) {
		seg := s.segs[i]
		n := min(int64(len(buf)), seg.size-int64(pos-seg.base)) //nolint:gosec // pos lies within the segment: the difference is below its size
		if i == len(s.segs)-1 && s.w != nil {
			if _, err := s.w.ReadAt(buf[:n], int64(pos-seg.base)); err != nil { //nolint:gosec // pos lies within the segment
				return fmt.Errorf("filestore: read session log segment: %w", err)
			}
		} else {
			rf, err := s.acquire(seg.base)
			if err != nil {
				return err
			}
			_, err = rf.f.ReadAt(buf[:n], int64(pos-seg.base)) //nolint:gosec // pos lies within the segment
			s.release(rf)
			if err != nil {
				return fmt.Errorf("filestore: read session log segment: %w", err)
			}
		}
		buf, pos = buf[n:], pos+uint64(n)
		i++
	}
	return nil
}

// acquire returns a read handle of the segment at base, from the cache or
// newly opened (evicting the least recently used one).
func (s *slSession) acquire(base uint64) (*slReadFile, error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	for i, rf := range s.readers {
		if rf.base == base {
			copy(s.readers[1:i+1], s.readers[:i]) // most recent first
			s.readers[0] = rf
			rf.refs++
			return rf, nil
		}
	}
	f, err := os.Open(s.segPath(base))
	if err != nil {
		return nil, fmt.Errorf("filestore: open session log segment: %w", err)
	}
	rf := &slReadFile{f: f, base: base, refs: 1}
	s.readers = append([]*slReadFile{rf}, s.readers...)
	if len(s.readers) > maxReadFiles {
		s.evict(s.readers[maxReadFiles:])
		s.readers = s.readers[:maxReadFiles]
	}
	return rf, nil
}

func (s *slSession) release(rf *slReadFile) {
	s.rmu.Lock()
	rf.refs--
	if rf.refs == 0 && rf.evicted {
		rf.f.Close()
	}
	s.rmu.Unlock()
}

// evict takes handles out of the cache, closing those no reader uses now.
// Called with rmu held.
func (s *slSession) evict(rfs []*slReadFile) {
	for _, rf := range rfs {
		rf.evicted = true
		if rf.refs == 0 {
			rf.f.Close()
		}
	}
}

// dropReaders evicts every cached read handle (on Delete and Close; a
// handle of a removed segment would otherwise keep its disk space).
func (s *slSession) dropReaders() {
	s.rmu.Lock()
	s.evict(s.readers)
	s.readers = nil
	s.rmu.Unlock()
}

// Release implements ports.SessionLog.
func (l *SessionLog) Release(sessionID string) error {
	s, err := l.lock(sessionID, false, true)
	if s == nil || err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.dropReaders()
	s.closeCursor()
	return s.closeWriter()
}

// Bounds implements ports.SessionLog.
func (l *SessionLog) Bounds(sessionID string) (first, end uint64) {
	s, err := l.lock(sessionID, false, false)
	if s == nil || err != nil {
		return 0, 0
	}
	defer s.mu.RUnlock()
	return s.first, s.end
}

// End implements ports.SessionLog.
func (l *SessionLog) End(sessionID string) uint64 {
	_, end := l.Bounds(sessionID)
	return end
}

// Wait implements ports.SessionLog. A waiter holds a channel that the next
// Append closes (and Delete); Close wakes everyone through l.done.
func (l *SessionLog) Wait(ctx context.Context, sessionID string, offset uint64) error {
	for {
		s, err := l.lock(sessionID, true, false)
		if err != nil {
			return err
		}
		if s.end > offset {
			s.mu.RUnlock()
			return nil
		}
		ch := s.notify
		s.watched.Store(true)
		s.mu.RUnlock()
		select {
		case <-ch:
			if s.deleted.Load() {
				return fmt.Errorf("%w: session log %s deleted", ports.ErrSessionNotFound, sessionID)
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-l.done:
			return ports.ErrSessionLogClosed
		}
	}
}

// Delete implements ports.SessionLog.
func (l *SessionLog) Delete(sessionID string) error {
	s, err := l.lock(sessionID, true, true)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	// The files go next: a segment that failed to close loses nothing.
	_ = s.closeWriter()
	s.closeCursor()
	s.dropReaders()
	// Removed before the entry leaves the map, so a new entry for the id
	// cannot load the old files.
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("filestore: delete session log: %w", err)
	}
	s.dead = ports.ErrSessionNotFound
	s.deleted.Store(true)
	close(s.notify)
	l.forget(sessionID, s)
	return fsatomic.SyncDir(l.dir)
}

// Close fsyncs and closes every open segment. Calls after it fail with
// ports.ErrSessionLogClosed.
func (l *SessionLog) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	sessions := l.sessions
	l.sessions = nil
	close(l.done)
	l.mu.Unlock()
	var errs []error
	for _, s := range sessions {
		s.mu.Lock()
		if s.w != nil {
			if err := s.w.Sync(); err != nil {
				errs = append(errs, fmt.Errorf("filestore: fsync session log segment: %w", err))
			}
		}
		if err := s.closeWriter(); err != nil {
			errs = append(errs, err)
		}
		s.closeCursor()
		s.dropReaders()
		s.dead = ports.ErrSessionLogClosed
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}
