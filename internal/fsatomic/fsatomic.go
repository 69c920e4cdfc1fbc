// Package fsatomic replaces files so that a crash at any instant leaves
// either the old or the new content, never a torn file: every durable file
// of the server (stores, pid files, records) is written through it.
package fsatomic

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data. It writes a temp file in the same
// directory (so the rename cannot cross filesystems), fsyncs it, renames it
// over path and fsyncs the directory, so a crash at any instant leaves either
// the old or the new file, never a torn one. perm is applied exactly,
// regardless of the umask. On error no temp file is left behind.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	tmp, err := writeTemp(path, data, perm)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// WriteFileExclusive is WriteFile that fails with fs.ErrExist instead of
// replacing an existing file: link(2) of the finished temp file refuses an
// existing name, so two racing creators cannot both win.
func WriteFileExclusive(path string, data []byte, perm os.FileMode) error {
	tmp, err := writeTemp(path, data, perm)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil {
		var le *os.LinkError
		if errors.As(err, &le) {
			return le.Err // keep fs.ErrExist testable without the noisy LinkError text
		}
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// writeTemp writes data to a new, fsynced temp file beside path and returns
// its name; on error the temp file is already removed.
func writeTemp(path string, data []byte, perm os.FileMode) (name string, err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return "", err
	}
	// tmp, not the named result: every error return below clears name
	// ("") before this deferred cleanup runs, and removing "" would leave
	// the temp file behind.
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return "", err
	}
	if _, err = f.Write(data); err != nil {
		return "", err
	}
	if err = f.Sync(); err != nil {
		return "", err
	}
	if err = f.Close(); err != nil {
		return "", err
	}
	return tmp, nil
}

// SyncDir makes a rename, link or removal in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
