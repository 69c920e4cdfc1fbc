package fsatomic

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	for _, tc := range []struct {
		data string
		perm fs.FileMode
	}{{"first", 0o600}, {"second, longer", 0o644}, {"", 0o640}} {
		if err := WriteFile(p, []byte(tc.data), tc.perm); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != tc.data {
			t.Fatalf("read %q, %v; want %q", got, err, tc.data)
		}
		if m := testkit.Mode(t, p); m != tc.perm {
			t.Fatalf("perm %v, want %v", m, tc.perm)
		}
		testkit.OnlyFiles(t, dir, "f")
	}
}

func TestWriteFileAtomicErrorsLeaveNoTemp(t *testing.T) {
	dir := t.TempDir()
	// Renaming a file over a non-empty directory fails after the temp file
	// was written: it must be cleaned up.
	target := filepath.Join(dir, "target")
	if err := os.MkdirAll(filepath.Join(target, "child"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(target, []byte("x"), 0o600); err == nil {
		t.Fatal("want an error replacing a directory")
	}
	testkit.OnlyFiles(t, dir, "target")

	if err := WriteFile(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); err == nil {
		t.Fatal("want an error in a missing directory")
	}
	testkit.OnlyFiles(t, dir, "target")
}

// A write that fails part way (here: the filesystem is full) removes its
// temp file and leaves the old content; once space returns the write works.
func TestWriteFileOnAFullDiskLeavesNoTemp(t *testing.T) {
	dir := testkit.Tmpfs(t, "64k")
	p := filepath.Join(dir, "f")
	if err := WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20)
	for _, write := range []func(string, []byte, os.FileMode) error{WriteFile, WriteFileExclusive} {
		if err := write(p, big, 0o600); err == nil {
			t.Fatal("want an error writing 1 MiB to a 64 KiB filesystem")
		}
		testkit.OnlyFiles(t, dir, "f")
		if got, err := os.ReadFile(p); err != nil || string(got) != "old" {
			t.Fatalf("after the failed write: %q, %v; want the old content", got, err)
		}
	}
	if err := WriteFile(p, []byte("new"), 0o600); err != nil {
		t.Fatalf("with space again: %v", err)
	}
	testkit.OnlyFiles(t, dir, "f")
}

// Readers racing with writers must always see one whole version.
func TestWriteFileAtomicNeverTorn(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	versions := make(map[string]bool)
	for i := range 4 {
		versions[strings.Repeat(string(rune('a'+i)), 4096*(i+1))] = true
	}
	var first string
	for v := range versions {
		first = v
		break
	}
	if err := WriteFile(p, []byte(first), 0o600); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for v := range versions {
		wg.Go(func() {
			for range 20 {
				if err := WriteFile(p, []byte(v), 0o600); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	readErr := make(chan error, 1)
	go func() {
		defer close(readErr)
		for {
			select {
			case <-done:
				return
			default:
			}
			got, err := os.ReadFile(p)
			if err != nil || !versions[string(got)] {
				readErr <- fmt.Errorf("torn read: %d bytes, %v", len(got), err)
				return
			}
		}
	}()
	wg.Wait()
	close(done)
	if err := <-readErr; err != nil {
		t.Fatal(err)
	}
	testkit.OnlyFiles(t, dir, "f")
}

func TestWriteFileExclusive(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := WriteFileExclusive(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileExclusive(p, []byte("two"), 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("want ErrExist, got %v", err)
	}
	if got, _ := os.ReadFile(p); string(got) != "one" {
		t.Fatalf("got %q", got)
	}
	testkit.OnlyFiles(t, dir, "f")
}
