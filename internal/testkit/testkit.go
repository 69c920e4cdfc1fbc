// Package testkit holds the small helpers tests across the tree share:
// checks of the files a package writes, and a buffer a process or a logger
// writes while the test reads it.
package testkit

import (
	"bytes"
	"io/fs"
	"os"
	"strings"
	"sync"
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

// Buffer is a bytes.Buffer safe for a process (or a logger) writing it
// while a test reads it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
