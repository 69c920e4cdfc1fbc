package tarsafe

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type entry struct {
	name, link, body string
	typ              byte
	mode             int64
}

func archive(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body))}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestTreeRoundTripKeepsLinks(t *testing.T) {
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "a", "b", "f"), []byte("hello"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b/f", filepath.Join(src, "a", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "outside")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Create(&buf, src); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := Extract(&buf, dst); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a", "b", "f")); err != nil || string(b) != "hello" {
		t.Fatalf("file: %q %v", b, err)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "a", "b", "f")); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", fi.Mode().Perm())
	}
	for name, want := range map[string]string{"a/link": "b/f", "outside": "/etc/passwd"} {
		if got, err := os.Readlink(filepath.Join(dst, name)); err != nil || got != want {
			t.Fatalf("%s: link %q %v, want %q kept as a link", name, got, err, want)
		}
	}
}

// A tree deeper than PATH_MAX (4096 bytes from /) is a tree Linux allows
// and Extract makes (it works relative to open directories): Create
// archives all of it, where a walk by absolute paths failed with
// ENAMETOOLONG half-way and cut the archive short.
func TestTreeDeeperThanPathMaxRoundTrips(t *testing.T) {
	src := t.TempDir()
	deep := strings.TrimSuffix(strings.Repeat(strings.Repeat("a", 99)+"/", 45), "/") // 4499 bytes
	if len(src)+1+len(deep) <= 4096 {
		t.Fatalf("the tree is not deeper than PATH_MAX: %d bytes", len(src)+1+len(deep))
	}
	in := archive(t,
		entry{name: deep + "/d/", typ: tar.TypeDir, mode: 0o755},
		entry{name: deep + "/x", typ: tar.TypeReg, body: "deep"},
		entry{name: deep + "/l", typ: tar.TypeSymlink, link: "x"},
		entry{name: "top", typ: tar.TypeReg, body: "top"})
	if err := Extract(bytes.NewReader(in), src); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Create(&buf, src); err != nil {
		t.Fatalf("Create: %v", err)
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the archive: %v", err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(h.Typeflag) + string(b) + h.Linkname
	}
	for name, want := range map[string]string{
		deep + "/d/": string(rune(tar.TypeDir)), deep + "/x": string(rune(tar.TypeReg)) + "deep",
		deep + "/l": string(rune(tar.TypeSymlink)) + "x", "top": string(rune(tar.TypeReg)) + "top",
		"a" + strings.Repeat("a", 98) + "/": string(rune(tar.TypeDir)),
	} {
		if got[name] != want {
			t.Errorf("entry %.40q…: %q, want %q", name, got[name], want)
		}
	}
	if want := 45 + 4; len(got) != want {
		t.Errorf("%d entries, want %d", len(got), want)
	}
	dst := t.TempDir()
	if err := Extract(bytes.NewReader(buf.Bytes()), dst); err != nil {
		t.Fatalf("extracting the archive again: %v", err)
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	f, err := root.Open(deep + "/x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, err := io.ReadAll(f); err != nil || string(b) != "deep" {
		t.Fatalf("the deep file after the round trip: %q %v", b, err)
	}
}

func TestRefusedArchivesWriteNothing(t *testing.T) {
	outside := t.TempDir()
	for why, entries := range map[string][]entry{
		"absolute":            {{name: "ok", typ: tar.TypeReg, body: "x"}, {name: "/etc/evil", typ: tar.TypeReg, body: "x"}},
		"dot-dot":             {{name: "ok", typ: tar.TypeReg, body: "x"}, {name: "a/../../evil", typ: tar.TypeReg, body: "x"}},
		"device":              {{name: "ok", typ: tar.TypeReg, body: "x"}, {name: "null", typ: tar.TypeChar}},
		"fifo":                {{name: "ok", typ: tar.TypeReg, body: "x"}, {name: "pipe", typ: tar.TypeFifo}},
		"hard link":           {{name: "ok", typ: tar.TypeReg, body: "x"}, {name: "h", typ: tar.TypeLink, link: "/etc/shadow"}},
		"through its symlink": {{name: "ok", typ: tar.TypeReg, body: "x"}, {name: "esc", typ: tar.TypeSymlink, link: outside}, {name: "esc/evil", typ: tar.TypeReg, body: "x"}},
		"empty name":          {{name: "ok", typ: tar.TypeReg, body: "x"}, {name: "", typ: tar.TypeReg, body: "x"}},
	} {
		dst := t.TempDir()
		err := Extract(bytes.NewReader(archive(t, entries...)), dst)
		if !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want refused", why, err)
		}
		if left, _ := os.ReadDir(dst); len(left) != 0 {
			t.Errorf("%s: a refused archive wrote %v", why, left)
		}
	}
	if left, _ := os.ReadDir(outside); len(left) != 0 {
		t.Fatalf("written outside: %v", left)
	}
	// A symlink already in the target is not written through either.
	dst := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dst, "pre")); err != nil {
		t.Fatal(err)
	}
	if err := Extract(bytes.NewReader(archive(t, entry{name: "pre/evil", typ: tar.TypeReg, body: "x"})), dst); !errors.Is(err, ErrRefused) {
		t.Fatalf("through an existing symlink: %v", err)
	}
	if left, _ := os.ReadDir(outside); len(left) != 0 {
		t.Fatalf("written outside: %v", left)
	}
}

// FuzzCheckName: an accepted name never leaves the target directory.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../x", "/abs", "a/../b", "./a", "a//b", "..", ".", "a/..", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		clean, err := CheckName(name)
		if err != nil {
			return
		}
		joined := filepath.Join("/root-dir", filepath.FromSlash(clean))
		if joined != "/root-dir" && !bytes.HasPrefix([]byte(joined), []byte("/root-dir/")) {
			t.Fatalf("CheckName(%q) = %q, which leaves the target (%s)", name, clean, joined)
		}
	})
}

// FuzzExtract: whatever the archive, nothing is written outside the target.
func FuzzExtract(f *testing.F) {
	f.Add(archive(f, entry{name: "a", typ: tar.TypeReg, body: "x"}))
	f.Add(archive(f, entry{name: "l", typ: tar.TypeSymlink, link: ".."}, entry{name: "l/x", typ: tar.TypeReg, body: "x"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		dst := filepath.Join(base, "dst")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = Extract(bytes.NewReader(data), dst)
		ents, _ := os.ReadDir(base)
		for _, e := range ents {
			if e.Name() != "dst" {
				t.Fatalf("written beside the target: %s", e.Name())
			}
		}
	})
}
