// Package testkit holds the small helpers tests across the tree share:
// checks of the files a package writes, waiting for a condition or a value,
// and a buffer a process or a logger writes while the test reads it.
package testkit

import (
	"bytes"
	"io/fs"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
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

// Within polls cond until it holds or d has passed, and says whether it
// held (for a goroutine, which may not fail the test itself).
func Within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// Eventually fails t, naming what it waited for, unless cond holds within d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(d, cond) {
		t.Fatalf("timed out after %v waiting for: %s", d, what)
	}
}

// Receive is the next value from ch; none within d fails t with what (what
// did not happen).
func Receive[T any](t testing.TB, d time.Duration, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s (waited %v)", what, d)
		var zero T
		return zero
	}
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
