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
)

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
