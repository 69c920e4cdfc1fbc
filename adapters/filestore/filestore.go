// Package filestore keeps the server's state in plain files under its data
// dir, written crash-safe (internal/fsatomic) or appended and synced: the
// instance identity and the operator token, the agents' credential hashes,
// missions and their event outbox, sessions' output logs, tasks and their
// events, and warm pools; it also reads the secrets a task's manifest names.
package filestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/internal/secret"
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

// OperatorTokenFile is the name of the operator token file in the data dir.
const OperatorTokenFile = "operator-token"

// LoadOrCreateOperatorToken returns the token in <dataDir>/operator-token,
// creating the dir (0700) and the file (0600) with a random 32-byte
// base64url token on first use. A file holding only whitespace is replaced:
// an empty token could never be accepted anyway.
func LoadOrCreateOperatorToken(dataDir string) (string, error) {
	if dataDir == "" {
		return "", errors.New("filestore: empty data dir")
	}
	path := filepath.Join(dataDir, OperatorTokenFile)
	tok, err := readToken(path)
	if err != nil || tok != "" {
		return tok, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("filestore: create data dir: %w", err)
	}
	// Creators, in this process or another, take turns on an advisory lock
	// of the data dir itself, so the first one's token is the one all see
	// and no lock file joins the data dir.
	unlock, err := lockDir(dataDir)
	if err != nil {
		return "", fmt.Errorf("filestore: lock data dir: %w", err)
	}
	defer unlock()
	if tok, err := readToken(path); err != nil || tok != "" {
		return tok, err
	}
	if tok, err = secret.Token(); err != nil {
		return "", err
	}
	if err := fsatomic.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("filestore: write operator token: %w", err)
	}
	return tok, nil
}

// lockDir takes an exclusive flock on dir and returns its release.
func lockDir(dir string) (func(), error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX); err != nil {
		d.Close()
		return nil, err
	}
	return func() { d.Close() }, nil // closing the descriptor drops the lock
}

// readToken returns the trimmed token, or "" if the file is missing or blank.
func readToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("filestore: read operator token: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// DefaultSecretsDir is /var/lib/agentic-sandbox/secrets for root, else
// $XDG_STATE_HOME/agentic-sandbox/secrets (XDG_STATE_HOME defaulting to
// ~/.local/state). Its parent is the data dir.
func DefaultSecretsDir() string {
	home, _ := os.UserHomeDir()
	return defaultSecretsDir(os.Geteuid(), os.Getenv("XDG_STATE_HOME"), home)
}

func defaultSecretsDir(euid int, xdgState, home string) string {
	const rootDir = "/var/lib/agentic-sandbox/secrets"
	if euid == 0 {
		return rootDir
	}
	// The XDG spec says relative values are invalid and must be ignored.
	if xdgState != "" && filepath.IsAbs(xdgState) {
		return filepath.Join(xdgState, "agentic-sandbox", "secrets")
	}
	if home == "" {
		// Without a home there is no per-user place; the system path fails
		// loudly on permissions rather than putting secrets somewhere odd.
		return rootDir
	}
	return filepath.Join(home, ".local", "state", "agentic-sandbox", "secrets")
}

// DataDir is the data dir that holds secretsDir: its parent.
func DataDir(secretsDir string) string {
	return filepath.Dir(filepath.Clean(secretsDir))
}
