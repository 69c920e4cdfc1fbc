package filestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
)

// MissionsJournalFile holds the changes to live missions made since
// missions.json was last written: one flush per change instead of the two
// of an atomic replacement, which is most of a mission transition's cost.
const MissionsJournalFile = "missions-journal.jsonl"

// journalMaxBytes is the journal's size past which the next change rewrites
// missions.json instead, bounding both the file and its replay at start.
const journalMaxBytes = 1 << 20

// missionJournal is missions-journal.jsonl. Its first line names the
// generation of missions.json its changes apply to; every further line is
// one committed batch, a JSON array of mission records, so a batch is
// applied whole or not at all. A journal of another generation is stale:
// missions.json already holds its changes.
type missionJournal struct {
	path string
	f    *os.File // nil until the first append, unless a current journal was read
	gen  uint64   // the generation of the lines in the file
	end  int64    // where the last complete batch ends
	// dirty: bytes past end (a torn batch, a failed write) to cut first.
	dirty bool
	fresh bool  // created, no header yet
	max   int64 // journalMaxBytes; tests lower it
}

// journalHeader is the journal's first line.
type journalHeader struct {
	Journal int    `json:"journal"`
	Gen     uint64 `json:"gen"`
}

const journalVersion = 1

// readJournal returns the batches of the journal at path that apply to
// generation gen, in order. A journal of another generation, or one whose
// header a crash tore, has nothing to apply. A batch that does not parse
// ends the replay: only the last write can be torn, and it was never
// reported durable.
func readJournal(path string, gen uint64) (j *missionJournal, batches [][]json.RawMessage, err error) {
	j = &missionJournal{path: path, max: journalMaxBytes}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return j, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("filestore: read %s: %w", path, err)
	}
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		return j, nil, nil // torn while being restarted
	}
	var h journalHeader
	if err := json.Unmarshal(data[:nl], &h); err != nil || h.Journal != journalVersion {
		return nil, nil, fmt.Errorf("filestore: %s is corrupt (fix or move it away; it was not changed): bad header %q", path, data[:nl])
	}
	if h.Gen != gen {
		return j, nil, nil
	}
	off := nl + 1
	for off < len(data) {
		n := bytes.IndexByte(data[off:], '\n')
		if n < 0 {
			break
		}
		var batch []json.RawMessage
		if json.Unmarshal(data[off:off+n], &batch) != nil {
			break
		}
		batches = append(batches, batch)
		off += n + 1
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("filestore: open %s: %w", path, err)
	}
	j.f, j.gen, j.end, j.dirty = f, gen, int64(off), off < len(data)
	return j, batches, nil
}

// full reports whether the next change to generation gen should rewrite
// missions.json instead.
func (j *missionJournal) full(gen uint64) bool {
	return j.f != nil && !j.fresh && j.gen == gen && j.end >= j.max
}

// append writes recs as one batch for generation gen and flushes it. The
// first batch of a generation restarts the file with its header, in the
// same write and flush.
func (j *missionJournal) append(gen uint64, recs []*missionRec) error {
	if j.f == nil {
		f, err := os.OpenFile(j.path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		if err := unix.Fsync(int(f.Fd())); err != nil { //nolint:gosec // an fd fits in int
			f.Close()
			return err
		}
		if err := fsatomic.SyncDir(filepath.Dir(j.path)); err != nil {
			f.Close()
			return err
		}
		j.f, j.fresh = f, true
	}
	var buf []byte
	restart := j.fresh || j.gen != gen
	if restart {
		buf = fmt.Appendf(buf, "{\"journal\":%d,\"gen\":%d}\n", journalVersion, gen)
	}
	buf = append(buf, '[')
	for i, r := range recs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, r.raw...)
	}
	buf = append(buf, "]\n"...)
	at := j.end
	if restart {
		at = 0
	}
	if restart || j.dirty {
		if err := j.f.Truncate(at); err != nil {
			return err
		}
	}
	// From here until the flush the file may hold a part of the batch.
	j.dirty = true
	if _, err := j.f.WriteAt(buf, at); err != nil {
		return err
	}
	// fdatasync: the data and the size, without the timestamps fsync adds.
	if err := unix.Fdatasync(int(j.f.Fd())); err != nil { //nolint:gosec // an fd fits in int
		return err
	}
	if restart {
		j.gen, j.fresh = gen, false
	}
	j.end, j.dirty = at+int64(len(buf)), false
	return nil
}

func (j *missionJournal) close() error {
	if j.f == nil {
		return nil
	}
	return j.f.Close()
}
