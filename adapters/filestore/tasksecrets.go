package filestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TaskSecrets resolves a task manifest's secrets: source env from the
// server's environment, source file from a file under Dir (no .., no
// symlink out of it). Values are returned, never logged.
type TaskSecrets struct {
	Dir    string
	Getenv func(string) (string, bool)
}

// Resolve implements task.SecretSource.
func (s TaskSecrets) Resolve(source, key string) (string, bool, error) {
	switch source {
	case "env":
		v, ok := s.Getenv(key)
		return v, ok, nil
	case "file":
		root, err := os.OpenRoot(s.Dir)
		if errors.Is(err, os.ErrNotExist) {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		defer func() { _ = root.Close() }()
		b, err := root.ReadFile(filepath.FromSlash(key))
		if errors.Is(err, os.ErrNotExist) {
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("reading the secret file: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), true, nil
	}
	return "", false, fmt.Errorf("unknown secret source %q", source)
}
