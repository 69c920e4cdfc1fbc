// Package filetest holds the checks tests make of files on disk, for the
// packages that write them (fsatomic, filestore) to share.
package filetest

import (
	"io/fs"
	"os"
	"strings"
	"testing"
)

// OnlyFiles fails t unless dir holds exactly the named entries, in order:
// no temp file of an interrupted or racing write is left behind.
func OnlyFiles(t testing.TB, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("dir has %q, want %q", got, names)
	}
}

// Mode is the permission bits of the file at path.
func Mode(t testing.TB, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}
