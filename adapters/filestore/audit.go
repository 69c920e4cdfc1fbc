package filestore

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// AuditFile is the audit log's file in the data dir; it rotates to
// audit.1.jsonl like the mission archive.
const AuditFile = "audit.jsonl"

// DefaultAuditSyncInterval is how often appended audit lines are fsynced.
const DefaultAuditSyncInterval = time.Second

// AuditLogConfig configures an AuditLog.
type AuditLogConfig struct {
	Dir string
	// MaxBytes is the size past which audit.jsonl is rotated to
	// audit.1.jsonl (replacing the older one), so about two generations
	// are kept. Zero means DefaultMaxArchiveBytes, negative never.
	MaxBytes int64
	// SyncInterval is how often appended lines are fsynced (zero:
	// DefaultAuditSyncInterval). Every entry is written (write(2)) before
	// Append returns, so it survives the process dying; a power loss may
	// lose up to this much.
	SyncInterval time.Duration
	Logger       *slog.Logger
}

// AuditLog is ports.AuditLog in <Dir>/audit.jsonl: one JSON line per
// entry, written by Append, fsynced on a timer and at rotation and close
// (an fsync per entry would cost the exec path too much), rotated as the
// mission archive is (archiveFile). A cursor names a generation by a hash
// of its first line and an offset in it, so it stays good across a
// rotation and a restart.
type AuditLog struct {
	mu     sync.Mutex
	arc    *archiveFile
	curID  string // generation ids: hash of the first line ("" if empty)
	oldID  string
	dirty  bool
	closed bool
	log    *slog.Logger
	stop   chan struct{}
	done   chan struct{}
}

var _ ports.AuditLog = (*AuditLog)(nil)

// NewAuditLog opens (creating its directory) the audit log in cfg.Dir.
func NewAuditLog(cfg AuditLogConfig) (*AuditLog, error) {
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxArchiveBytes
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = DefaultAuditSyncInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	arc, err := openArchive(filepath.Join(cfg.Dir, AuditFile), nil, cfg.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	l := &AuditLog{arc: arc, log: cfg.Logger, stop: make(chan struct{}), done: make(chan struct{})}
	if l.curID, err = generationID(arc.f); err == nil {
		l.oldID, err = generationID(arc.old)
	}
	if err != nil {
		_ = arc.close()
		return nil, fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	go l.syncLoop(cfg.SyncInterval)
	return l, nil
}

// generationID hashes f's first line ("" for none or no file).
func generationID(f *os.File) (string, error) {
	if f == nil {
		return "", nil
	}
	line, err := bufio.NewReader(io.NewSectionReader(f, 0, 1<<20)).ReadBytes('\n')
	if errors.Is(err, io.EOF) {
		return "", nil // empty, or a torn first line the next write replaces
	}
	if err != nil {
		return "", err
	}
	return lineID(line), nil
}

func lineID(line []byte) string {
	h := fnv.New64a()
	_, _ = h.Write(line)
	return strconv.FormatUint(h.Sum64(), 36)
}

// Append writes e as one line.
func (l *AuditLog) Append(e ports.AuditEntry) error {
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("%w: the audit log is closed", ports.ErrStoreUnavailable)
	}
	if l.arc.full() {
		// Durable before it becomes the old generation.
		if err := l.arc.f.Sync(); err != nil {
			return fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
		}
		if err := l.arc.rotate(); err != nil {
			return fmt.Errorf("%w: rotate %s: %v", ports.ErrStoreUnavailable, l.arc.path, err)
		}
		l.oldID, l.curID, l.dirty = l.curID, "", false
	}
	if err := l.arc.write(line, false); err != nil {
		return fmt.Errorf("%w: append %s: %v", ports.ErrStoreUnavailable, l.arc.path, err)
	}
	if l.curID == "" {
		l.curID = lineID(line)
	}
	l.dirty = true
	return nil
}

func (l *AuditLog) syncLoop(every time.Duration) {
	defer close(l.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			if err := l.sync(); err != nil {
				l.log.Error("filestore: audit log fsync failed", "err", err)
			}
		}
	}
}

func (l *AuditLog) sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.dirty || l.arc.f == nil || l.closed {
		return nil
	}
	l.dirty = false
	return l.arc.f.Sync()
}

// Close fsyncs and closes the log.
func (l *AuditLog) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	var err error
	if l.dirty && l.arc.f != nil {
		err = l.arc.f.Sync()
	}
	if cerr := l.arc.close(); err == nil {
		err = cerr
	}
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	return err
}

// auditCursor is where a page ends: a generation and an offset in it.
type auditCursor struct {
	gen string
	off int64
}

func (c auditCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.gen + ":" + strconv.FormatInt(c.off, 10)))
}

func parseAuditCursor(s string) (auditCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return auditCursor{}, ports.ErrBadCursor
	}
	gen, off, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(off, 10, 64)
	if !ok || gen == "" || err != nil || n < 0 {
		return auditCursor{}, ports.ErrBadCursor
	}
	return auditCursor{gen: gen, off: n}, nil
}

// auditGen is one generation as a query reads it: its own handle (a
// rotation meanwhile does not move it) up to the end seen at the start.
type auditGen struct {
	id  string
	f   *os.File
	end int64
}

// Query reads the rotated generation, then the current one.
func (l *AuditLog) Query(q ports.AuditQuery) ([]ports.AuditEntry, string, error) {
	var start auditCursor
	if q.Cursor != "" {
		c, err := parseAuditCursor(q.Cursor)
		if err != nil {
			return nil, "", err
		}
		start = c
	}
	limit := q.Limit
	if limit <= 0 {
		limit = ports.DefaultAuditLimit
	}
	limit = min(limit, ports.MaxAuditLimit)
	gens, err := l.snapshot()
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	defer func() {
		for _, g := range gens {
			g.f.Close()
		}
	}()
	// Where to begin: the cursor's generation and offset; the oldest kept
	// when there is none or it names a generation rotated away.
	from, off := 0, int64(0)
	for i, g := range gens {
		if start.gen != "" && g.id == start.gen {
			from, off = i, start.off
		}
	}
	var out []ports.AuditEntry
	for i := from; i < len(gens); i++ {
		g := gens[i]
		if i > from {
			off = 0
		}
		if off >= g.end {
			continue
		}
		br := bufio.NewReaderSize(io.NewSectionReader(g.f, off, g.end-off), 1<<16)
		pos := off
		for {
			line, err := br.ReadBytes('\n')
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, "", fmt.Errorf("%w: read %s: %v", ports.ErrStoreUnavailable, AuditFile, err)
			}
			pos += int64(len(line))
			var e ports.AuditEntry
			if json.Unmarshal(line, &e) != nil || !auditMatch(e, q) {
				continue
			}
			out = append(out, e)
			if len(out) == limit {
				if pos >= g.end && i == len(gens)-1 {
					return out, "", nil
				}
				return out, auditCursor{gen: g.id, off: pos}.String(), nil
			}
		}
	}
	return out, "", nil
}

func auditMatch(e ports.AuditEntry, q ports.AuditQuery) bool {
	return (q.Since.IsZero() || !e.At.Before(q.Since)) &&
		(q.Actor == "" || e.Actor == q.Actor) &&
		(q.Target == "" || e.Target == q.Target)
}

// snapshot opens both generations under the lock, so that no rotation
// falls between the two opens, and notes how far each is written.
func (l *AuditLog) snapshot() ([]auditGen, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var gens []auditGen
	add := func(path, id string, end int64) error {
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if end < 0 {
			st, err := f.Stat()
			if err != nil {
				f.Close()
				return err
			}
			end = st.Size()
		}
		gens = append(gens, auditGen{id: id, f: f, end: end})
		return nil
	}
	if l.oldID != "" {
		if err := add(rotatedPath(l.arc.path), l.oldID, -1); err != nil {
			return nil, err
		}
	}
	if l.curID != "" && l.arc.f != nil {
		if err := add(l.arc.path, l.curID, l.arc.end); err != nil {
			for _, g := range gens {
				g.f.Close()
			}
			return nil, err
		}
	}
	return gens, nil
}
