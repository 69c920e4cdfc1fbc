package filestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/google/uuid"
)

// IdentityFile is the name of the instance identity file in the data dir.
const IdentityFile = "identity"

// LoadOrCreateIdentity returns this instance's id from <dataDir>/identity,
// creating the dir (0700) and the file (0644: the id is not secret) with a
// new UUIDv7 on first start. A file that does not hold a UUID is an error
// naming it and is left alone: replacing it would silently give the
// instance a new identity and orphan the missions aiwg serve assigned to
// the old one.
func LoadOrCreateIdentity(dataDir string) (string, error) {
	if dataDir == "" {
		return "", errors.New("filestore: empty data dir")
	}
	path := filepath.Join(dataDir, IdentityFile)
	id, err := readIdentity(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return id, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("filestore: create data dir: %w", err)
	}
	u, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	// Exclusive create: of two processes starting at once, one wins and
	// the other reads the winner's id, so both agree.
	err = fsatomic.WriteFileExclusive(path, []byte(u.String()+"\n"), 0o644)
	if errors.Is(err, fs.ErrExist) {
		return readIdentity(path)
	}
	if err != nil {
		return "", fmt.Errorf("filestore: write %s: %w", path, err)
	}
	return u.String(), nil
}

// readIdentity returns the id in path (an error wrapping fs.ErrNotExist
// when there is no file).
func readIdentity(path string) (string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("filestore: read %s: %w", path, err)
	}
	s := strings.TrimSpace(string(data))
	// Only the canonical 36-character form: uuid.Parse also takes urn:
	// and braced forms, which are not what this package writes.
	u, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return "", fmt.Errorf("filestore: %s does not hold a UUID (%.40q); fix or remove it", path, s)
	}
	return u.String(), nil
}
