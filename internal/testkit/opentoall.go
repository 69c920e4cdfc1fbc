package testkit

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// OpenToAll lets anyone read dir's tree and reach dir: a test's temp
// directories are 0700, and a server running as root reads some of what a
// test leaves there (a local repository, say) as nobody.
func OpenToAll(t testing.TB, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		add := fs.FileMode(0o044)
		if d.IsDir() {
			add = 0o055
		}
		return os.Chmod(p, fi.Mode().Perm()|add) //nolint:gosec // a test's own temp tree: nothing hostile writes in it
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := filepath.Dir(dir); p != filepath.Dir(p) && p != filepath.Clean(os.TempDir()); p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, fi.Mode().Perm()|0o011); err != nil {
			t.Fatal(err)
		}
	}
}
