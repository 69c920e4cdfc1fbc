package filestore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The output cursor of a session log (ports.SessionOutputLog) is one
// fixed-size record in the file "cursor" of the session's directory,
// rewritten in place (pwrite at 0, no fsync) after the bytes of every
// AppendOutput: the same durability as the bytes, so a kill -9 of
// agentic-mgmt leaves the cursor either matching the log or one append
// behind it. On load, a log that ends past its cursor (the process died
// between the two writes) is cut back to the cursor: those bytes were not
// acknowledged to the agent, which sends them again. A log that ends short
// of its cursor (a machine crash lost the unsynced tail) gets a hole up to
// it, a gap for readers, since the agent was told it had those bytes.
const (
	cursorFile = "cursor"
	// cursorRecord is the size of the record; a cursor that does not fit
	// (a command id of hundreds of bytes) is not kept.
	cursorRecord = 512
)

type cursorJSON struct {
	CommandID string                        `json:"command_id"`
	Next      map[ports.OutputStream]uint64 `json:"next"`
	End       uint64                        `json:"end"`
}

var _ ports.SessionOutputLog = (*SessionLog)(nil)

// AppendOutput implements ports.SessionOutputLog.
func (l *SessionLog) AppendOutput(sessionID string, src ports.OutputSource, lost uint64, data []byte) (uint64, error) {
	s, err := l.lock(sessionID, true, true)
	if err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if lost > 0 {
		// A hole: the next write starts a segment after it.
		s.end += lost
		s.lost += lost
		l.lostTotal.Add(lost)
	}
	off, err := l.appendLocked(s, data)
	if len(data) > 0 || lost > 0 {
		// Bytes that could not be stored took their offsets all the same.
		if !s.hasCur || s.cur.CommandID != src.CommandID {
			s.cur = ports.OutputCursor{CommandID: src.CommandID, Next: map[ports.OutputStream]uint64{}}
		}
		s.cur.Next[src.Stream] = src.Offset + uint64(len(data))
		s.cur.End = s.end
		s.hasCur = true
		if werr := s.writeCursor(); werr != nil {
			// No cursor on disk rather than a stale one: a restarted
			// server then takes the agent's output from where it comes.
			s.dropCursor()
			s.hasCur = true // this process still knows it
		}
	}
	return off, err
}

// OutputCursor implements ports.SessionOutputLog.
func (l *SessionLog) OutputCursor(sessionID string) (ports.OutputCursor, bool) {
	s, err := l.lock(sessionID, false, false)
	if s == nil || err != nil {
		return ports.OutputCursor{}, false
	}
	defer s.mu.RUnlock()
	if !s.hasCur {
		return ports.OutputCursor{}, false
	}
	c := s.cur
	c.Next = make(map[ports.OutputStream]uint64, len(s.cur.Next))
	for k, v := range s.cur.Next {
		c.Next[k] = v
	}
	return c, true
}

func (s *slSession) writeCursor() error {
	b, err := json.Marshal(cursorJSON{CommandID: s.cur.CommandID, Next: s.cur.Next, End: s.cur.End})
	if err != nil || len(b) >= cursorRecord {
		return errors.New("filestore: output cursor does not fit its record")
	}
	rec := make([]byte, cursorRecord)
	copy(rec, b)
	copy(rec[len(b):], strings.Repeat(" ", cursorRecord-len(b)-1))
	rec[cursorRecord-1] = '\n'
	if s.cf == nil {
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(s.dir, cursorFile), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("filestore: open output cursor: %w", err)
		}
		s.cf = f
	}
	s.curOnDisk = true
	if _, err := s.cf.WriteAt(rec, 0); err != nil {
		return fmt.Errorf("filestore: write output cursor: %w", err)
	}
	return nil
}

// dropCursor forgets the cursor, on disk too.
func (s *slSession) dropCursor() {
	s.hasCur = false
	if !s.curOnDisk {
		return
	}
	s.closeCursor()
	if err := os.Remove(filepath.Join(s.dir, cursorFile)); err == nil || errors.Is(err, fs.ErrNotExist) {
		s.curOnDisk = false
	}
}

func (s *slSession) closeCursor() {
	if s.cf != nil {
		_ = s.cf.Close()
		s.cf = nil
	}
}

// loadCursor reads the cursor file; one that cannot be read or parsed
// (torn by a machine crash) is none.
func (s *slSession) loadCursor() {
	b, err := os.ReadFile(filepath.Join(s.dir, cursorFile))
	if err != nil {
		return
	}
	s.curOnDisk = true
	var c cursorJSON
	if len(b) != cursorRecord || json.Unmarshal(b, &c) != nil || c.CommandID == "" {
		return
	}
	if c.Next == nil {
		c.Next = map[ports.OutputStream]uint64{}
	}
	s.cur, s.hasCur = ports.OutputCursor{CommandID: c.CommandID, Next: c.Next, End: c.End}, true
}

// settleCursor makes the loaded log end where its cursor says (see the
// comment at the top of this file).
func (s *slSession) settleCursor() {
	if !s.hasCur {
		return
	}
	switch want := s.cur.End; {
	case want > s.end:
		if len(s.segs) == 0 {
			s.first = want
		} else {
			s.lost += want - s.end
		}
		s.end = want
	case want < s.end && want >= s.first:
		s.cut(want)
	case want < s.end:
		s.hasCur = false // older than all the log holds: no use
	}
}

// cut drops the bytes at and after end (load only: no open handles).
func (s *slSession) cut(end uint64) {
	for len(s.segs) > 0 {
		last := &s.segs[len(s.segs)-1]
		if last.base >= end {
			s.removeSegments(s.segs[len(s.segs)-1:])
			s.segs = s.segs[:len(s.segs)-1]
			continue
		}
		if last.base+uint64(last.size) > end { //nolint:gosec // file sizes are never negative
			size := int64(end - last.base) //nolint:gosec // within the segment
			if err := os.Truncate(s.segPath(last.base), size); err != nil {
				s.hasCur = false // cannot cut: keep the bytes, and no cursor
				return
			}
			last.size = size
		}
		break
	}
	if len(s.segs) == 0 {
		s.first = end
	}
	s.end = end
}
