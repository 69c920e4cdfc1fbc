package filestore

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// AgentHashesFile is the name of the hash file in the secrets dir.
const AgentHashesFile = "agent-hashes.json"

// AgentKindsFile records each agent's runtime kind beside its hash,
// {"<agent_id>": "host|container|vm"}: the isolation tier an agent is
// trusted with, which it cannot change by declaring another.
const AgentKindsFile = "agent-kinds.json"

// lockFile serialises read-modify-write of the hash file between processes
// that use this package (a server and a provisioning tool, say).
const lockFile = ".agent-hashes.lock"

// AgentHashes stores sha256 hashes of agent secrets in
// <secrets dir>/agent-hashes.json as {"<agent_id>": "<hex sha256>"}.
// Other processes may write the file too; it is re-read whenever its
// identity, size or mtime changes.
type AgentHashes struct {
	dir  string
	path string

	mu     sync.Mutex
	hashes map[string]string
	stamp  fileStamp // of the file hashes was read from; zero = not loaded
	// kinds caches the kinds file the same way, so an agent that connects
	// again costs a stat, not a parse of every agent's kind.
	kinds      map[string]string
	kindsStamp fileStamp

	// First pins wait in a batch that one writer commits at once: ten
	// thousand agents registering together write the file a few times, not
	// ten thousand times (measured: the connect storm was quadratic).
	pinMu     sync.Mutex
	pinBatch  *pinBatch
	pinActive bool
}

type pinBatch struct {
	want map[string]ports.RuntimeKind
	got  map[string]string
	err  error
	done chan struct{}
}

var _ ports.AgentCredentials = (*AgentHashes)(nil)

// fileStamp tells whether the file changed since it was read. The inode
// catches atomic replacements even within one mtime tick.
type fileStamp struct {
	exists bool
	dev    uint64
	ino    uint64
	size   int64
	mtime  time.Time
}

func stampOf(fi fs.FileInfo) fileStamp {
	s := fileStamp{exists: true, size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = uint64(st.Dev), st.Ino
	}
	return s
}

// NewAgentHashes uses secretsDir, creating it with mode 0700 if needed. The
// file itself is read lazily, so a corrupt file surfaces on Verify and Put.
func NewAgentHashes(secretsDir string) (*AgentHashes, error) {
	if secretsDir == "" {
		return nil, errors.New("filestore: empty secrets dir")
	}
	if err := os.MkdirAll(secretsDir, 0o700); err != nil {
		return nil, fmt.Errorf("filestore: create secrets dir: %w", err)
	}
	return &AgentHashes{dir: secretsDir, path: filepath.Join(secretsDir, AgentHashesFile)}, nil
}

// Path is the hash file's location.
func (h *AgentHashes) Path() string { return h.path }

// Verify reports whether sha256(secret) matches the hash stored for agentID,
// comparing in constant time. An unknown agent or an empty secret is
// (false, nil); an unreadable or corrupt file is an error.
func (h *AgentHashes) Verify(agentID, secret string) (bool, error) {
	if secret == "" {
		return false, nil
	}
	h.mu.Lock()
	err := h.refreshLocked()
	stored, ok := h.hashes[agentID]
	h.mu.Unlock()
	if err != nil {
		return false, err
	}
	if !ok {
		return false, nil
	}
	want, err := hex.DecodeString(stored)
	if err != nil || len(want) != sha256.Size {
		return false, fmt.Errorf("filestore: %s: hash of agent %q is not %d hex digits", h.path, agentID, 2*sha256.Size)
	}
	got := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(got[:], want) == 1, nil
}

// Put stores the hash of secret for agentID. It refuses to rewrite a file it
// cannot parse, so entries written by others are never lost.
func (h *AgentHashes) Put(agentID, secret string) error {
	_, err := h.store(agentID, secret, true)
	return err
}

// Create is Put that refuses to replace an existing credential, checked and
// written under the file lock, so two creators cannot both win.
func (h *AgentHashes) Create(agentID, secret string) error {
	exists, err := h.store(agentID, secret, false)
	if err == nil && exists {
		return fmt.Errorf("%w: %q", ports.ErrCredentialExists, agentID)
	}
	return err
}

// store writes the hash of secret for agentID, over an existing one only
// when replace; exists says there was one.
func (h *AgentHashes) store(agentID, secret string, replace bool) (exists bool, err error) {
	if agentID == "" {
		return false, errors.New("filestore: empty agent id")
	}
	if secret == "" {
		return false, errors.New("filestore: empty secret")
	}
	sum := sha256.Sum256([]byte(secret))
	err = h.update(func(m map[string]string) bool {
		if _, exists = m[agentID]; exists && !replace {
			return false
		}
		m[agentID] = hex.EncodeToString(sum[:])
		return true
	})
	return exists, err
}

// Delete forgets agentID and its kind; an unknown agent is not an error.
func (h *AgentHashes) Delete(agentID string) error {
	_, err := h.Revoke(agentID)
	return err
}

// Revoke is Delete that also says whether agentID had a credential (what
// an audit of revocations records).
func (h *AgentHashes) Revoke(agentID string) (existed bool, err error) {
	if err := h.update(func(m map[string]string) bool {
		if _, existed = m[agentID]; !existed {
			return false
		}
		delete(m, agentID)
		return true
	}); err != nil {
		return existed, err
	}
	return existed, h.updateKinds(func(m map[string]string) bool {
		if _, ok := m[agentID]; !ok {
			return false
		}
		delete(m, agentID)
		return true
	})
}

// PinKind implements ports.AgentCredentials, under the same file lock as
// the hashes.
func (h *AgentHashes) PinKind(agentID string, kind ports.RuntimeKind) (ports.RuntimeKind, error) {
	if !kind.Valid() {
		return "", fmt.Errorf("filestore: runtime kind %q", kind)
	}
	h.mu.Lock()
	err := h.refreshKindsLocked()
	k, ok := h.kinds[agentID]
	h.mu.Unlock()
	if err != nil {
		return "", err
	}
	if ok {
		return ports.RuntimeKind(k), nil
	}
	h.pinMu.Lock()
	if h.pinBatch == nil {
		h.pinBatch = &pinBatch{want: map[string]ports.RuntimeKind{}, done: make(chan struct{})}
	}
	b := h.pinBatch
	if _, dup := b.want[agentID]; !dup {
		b.want[agentID] = kind // the first of two concurrent pins wins, as under the lock
	}
	lead := !h.pinActive
	h.pinActive = true
	h.pinMu.Unlock()
	if lead {
		h.commitPins()
	}
	<-b.done
	if b.err != nil {
		return "", b.err
	}
	return ports.RuntimeKind(b.got[agentID]), nil
}

// commitPins writes batches until none is waiting: those that gathered
// while the previous one was written go in the next write.
func (h *AgentHashes) commitPins() {
	for {
		h.pinMu.Lock()
		b := h.pinBatch
		h.pinBatch = nil
		if b == nil {
			h.pinActive = false
			h.pinMu.Unlock()
			return
		}
		h.pinMu.Unlock()
		b.got = make(map[string]string, len(b.want))
		b.err = h.updateKinds(func(m map[string]string) bool {
			changed := false
			for id, k := range b.want {
				if old, ok := m[id]; ok {
					b.got[id] = old
					continue
				}
				m[id], b.got[id] = string(k), string(k)
				changed = true
			}
			return changed
		})
		close(b.done)
	}
}

// refreshKindsLocked re-reads the kinds file if it changed; h.mu held.
func (h *AgentHashes) refreshKindsLocked() error {
	return refreshStamped(filepath.Join(h.dir, AgentKindsFile), &h.kinds, &h.kindsStamp)
}

// updateKinds is update for the kinds file, which is small and read afresh.
func (h *AgentHashes) updateKinds(change func(map[string]string) bool) error {
	return h.locked(func() error {
		path := filepath.Join(h.dir, AgentKindsFile)
		data, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("filestore: %w", err)
		}
		m, err := parseHashes(data)
		if err != nil {
			return fmt.Errorf("filestore: %s is corrupt: %w (refusing to overwrite it)", path, err)
		}
		if !change(m) {
			return nil
		}
		if err := writeMap(path, m); err != nil {
			return err
		}
		h.kindsStamp = fileStamp{} // read back, with the new file's stamp
		return h.refreshKindsLocked()
	})
}

// update applies change to a fresh copy of the file's contents and writes the
// result back if change reports a modification.
func (h *AgentHashes) update(change func(map[string]string) bool) error {
	return h.locked(func() error {
		if err := h.refreshLocked(); err != nil {
			return fmt.Errorf("%w (refusing to overwrite it)", err)
		}
		next := make(map[string]string, len(h.hashes)+1)
		for k, v := range h.hashes {
			next[k] = v
		}
		if !change(next) {
			return nil
		}
		if err := writeMap(h.path, next); err != nil {
			return err
		}
		h.hashes = next
		// Forget the stamp so the next call re-reads: stat-ing here could record
		// a later writer's stamp against our contents.
		h.stamp = fileStamp{}
		return nil
	})
}

// locked runs f holding h.mu and the file lock, as every change must.
func (h *AgentHashes) locked(f func() error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	unlock, err := h.lockFile()
	if err != nil {
		return err
	}
	defer unlock()
	return f()
}

// writeMap writes m as the {"id": "value"} file at path.
func writeMap(path string, m map[string]string) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := fsatomic.WriteFile(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("filestore: write %s: %w", path, err)
	}
	return nil
}

// lockFile takes an exclusive flock on the lock file beside the hashes.
func (h *AgentHashes) lockFile() (func(), error) {
	f, err := os.OpenFile(filepath.Join(h.dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("filestore: open lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("filestore: lock: %w", err)
	}
	return func() { f.Close() }, nil // closing drops the lock
}

// refreshLocked re-reads the file if it changed since the last read.
func (h *AgentHashes) refreshLocked() error {
	return refreshStamped(h.path, &h.hashes, &h.stamp)
}

// refreshStamped re-reads a {"id": "value"} file into *m if its stamp is
// not *stamp any more (a missing file is empty); a corrupt one is an
// error and forgets the stamp, so it is read again next time.
func refreshStamped(path string, m *map[string]string, stamp *fileStamp) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		*m, *stamp = map[string]string{}, fileStamp{}
		return nil
	}
	if err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	defer f.Close()
	// Stat the open file, not the path, so the stamp matches what we read.
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	st := stampOf(fi)
	if stamp.exists && *stamp == st {
		return nil
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("filestore: read %s: %w", path, err)
	}
	parsed, err := parseHashes(data)
	if err != nil {
		*stamp = fileStamp{}
		return fmt.Errorf("filestore: %s is corrupt: %w", path, err)
	}
	*m, *stamp = parsed, st
	return nil
}

func parseHashes(data []byte) (map[string]string, error) {
	// An empty file (as left by `touch`) holds nothing that could be lost.
	if len(bytes.TrimSpace(data)) == 0 {
		return map[string]string{}, nil
	}
	var m map[string]string
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) != 0 {
		return nil, errors.New("trailing data after the JSON object")
	}
	if m == nil { // the JSON literal null
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}
