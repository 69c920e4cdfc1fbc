package agentfs

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The test binary is the helper, as the agent binary is in production.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == HelperArg {
		os.Exit(Serve(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func newLocal(t testing.TB) (*Local, string) {
	t.Helper()
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(exe, "")
	if err != nil {
		t.Fatal(err)
	}
	l.dir = dir
	return l, dir
}

func writeAll(t testing.TB, l *Local, path string, data []byte) error {
	t.Helper()
	w, err := l.Create(context.Background(), path, 0o640, 1<<30)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	return w.Commit()
}

func TestWriteReadRoundTrip(t *testing.T) {
	l, dir := newLocal(t)
	for _, size := range []int{0, 1, 5 << 20} {
		data := make([]byte, size)
		_, _ = rand.Read(data)
		if err := writeAll(t, l, "sub/dir/f", data); err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		fi, err := os.Stat(filepath.Join(dir, "sub/dir/f"))
		if err != nil || fi.Mode().Perm() != 0o640 {
			t.Fatalf("written file: %v %v", fi, err)
		}
		r, err := l.Open(context.Background(), "sub/dir/f")
		if err != nil {
			t.Fatal(err)
		}
		if r.Size() != int64(size) {
			t.Fatalf("size %d, want %d", r.Size(), size)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes read back as %d, %v", size, len(got), err)
		}
	}
}

func TestAbortedWriteLeavesNothing(t *testing.T) {
	l, dir := newLocal(t)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := l.Create(context.Background(), "f", 0o644, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("new and partial")); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != "old" {
		t.Fatalf("after an abort the file holds %q", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("an abort left %v", ents)
	}
}

func TestTypedErrors(t *testing.T) {
	l, dir := newLocal(t)
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Open(ctx, "missing"); !errors.Is(err, ports.ErrFileNotFound) {
		t.Errorf("open missing: %v", err)
	}
	if _, err := l.Open(ctx, "d"); !errors.Is(err, ports.ErrInvalidPath) {
		t.Errorf("open a directory: %v", err)
	}
	if err := l.Delete(ctx, "d", false); !errors.Is(err, ports.ErrDirectoryNotEmpty) {
		t.Errorf("delete a full directory: %v", err)
	}
	if err := l.Delete(ctx, "/", true); !errors.Is(err, ports.ErrInvalidPath) {
		t.Errorf("delete /: %v", err)
	}
	if err := writeAll(t, l, "d", []byte("x")); !errors.Is(err, ports.ErrInvalidPath) {
		t.Errorf("write over a directory: %v", err)
	}
	w, err := l.Create(ctx, "big", 0o644, 10)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write(make([]byte, 11))
	if err := w.Commit(); !errors.Is(err, ports.ErrFileTooLarge) {
		t.Errorf("write over the maximum: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "big")); !os.IsNotExist(err) {
		t.Errorf("a refused write left a file: %v", err)
	}
	if err := l.Delete(ctx, "d", true); err != nil {
		t.Errorf("delete recursively: %v", err)
	}
}

func TestListing(t *testing.T) {
	l, dir := newLocal(t)
	_ = os.WriteFile(filepath.Join(dir, "b"), []byte("12345"), 0o600)
	_ = os.Mkdir(filepath.Join(dir, "a"), 0o750)
	_ = os.Symlink("b", filepath.Join(dir, "c"))
	got, err := l.List(context.Background(), ".")
	if err != nil {
		t.Fatal(err)
	}
	if got.Path != dir || len(got.Entries) != 3 {
		t.Fatalf("listing %+v", got)
	}
	a, b, c := got.Entries[0], got.Entries[1], got.Entries[2]
	if a.Name != "a" || a.Type != ports.FileTypeDir || a.Mode != 0o750 {
		t.Errorf("a: %+v", a)
	}
	if b.Name != "b" || b.Type != ports.FileTypeFile || b.Size != 5 || b.Mode != 0o600 {
		t.Errorf("b: %+v", b)
	}
	if c.Name != "c" || c.Type != ports.FileTypeSymlink || c.LinkTarget != "b" {
		t.Errorf("c: %+v", c)
	}
	one, err := l.List(context.Background(), "b")
	if err != nil || len(one.Entries) != 1 || one.Entries[0].Name != "b" {
		t.Fatalf("listing a file: %+v %v", one, err)
	}
}

// A directory whose path is as long as PATH_MAX allows holds entries whose
// paths from / are longer: listing it shows them and its archive holds
// them all (a walk by absolute paths failed with ENAMETOOLONG after the
// archive's first bytes had gone out, and the listing dropped them), and
// files are written there.
func TestDirectoryAtPathMax(t *testing.T) {
	l, base := newLocal(t)
	root, err := os.OpenRoot(base)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	rel := ""
	for len(base)+1+len(rel) < 4095 {
		n := min(99, 4095-len(base)-1-len(rel)-1)
		if rel == "" {
			n++
		}
		rel = filepath.Join(rel, strings.Repeat("a", n))
	}
	dir := filepath.Join(base, rel)
	if len(dir) != 4095 {
		t.Fatalf("made a %d-byte path", len(dir))
	}
	if err := root.MkdirAll(rel+"/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := root.WriteFile(rel+"/x", []byte("x!"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := root.WriteFile(rel+"/d/y", []byte("y!"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := root.Symlink("x", rel+"/l"); err != nil {
		t.Fatal(err)
	}
	// A file at 4095 bytes, and one whose name is 255 bytes: their
	// temporary names are longer than PATH_MAX and NAME_MAX would allow.
	for _, p := range []string{dir[:len(dir)-1] + "f", filepath.Join(base, strings.Repeat("n", 255))} {
		if err := writeAll(t, l, p, []byte("written")); err != nil {
			t.Fatalf("writing %d bytes named %d: %v", len(p), len(filepath.Base(p)), err)
		}
		r, err := l.Open(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil || string(b) != "written" {
			t.Fatalf("read back %q %v", b, err)
		}
	}
	ls, err := l.List(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ls.Entries {
		names = append(names, e.Name+":"+string(e.Type)+":"+e.LinkTarget)
	}
	if got, want := strings.Join(names, " "), "d:dir: l:symlink:x x:file:"; got != want {
		t.Errorf("listing %q, want %q", got, want)
	}
	r, err := l.OpenArchive(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tr := tar.NewReader(r)
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the archive after %v: %v", got, err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b) + h.Linkname
	}
	if want := map[string]string{"d/": "", "d/y": "y!", "l": "x", "x": "x!"}; !maps.Equal(got, want) {
		t.Fatalf("archive %v, want %v", got, want)
	}
}

func BenchmarkWrite(b *testing.B) {
	l, _ := newLocal(b)
	chunk := make([]byte, 256<<10)
	const total = 64 << 20
	b.SetBytes(total)
	for b.Loop() {
		w, err := l.Create(context.Background(), "f", 0o644, 1<<40)
		if err != nil {
			b.Fatal(err)
		}
		for range total / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}
