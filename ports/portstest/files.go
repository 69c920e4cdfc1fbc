package portstest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// rtFiles moves files to and from a running environment's agent, as its
// commands' user, in its commands' directory: what every runtime must do
// (host, container as nobody, VM over its serial link).
func rtFiles(t *testing.T, h RuntimeHarness, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := h.Files

	wd, err := f.ListFiles(ctx, name, ".")
	if err != nil || !path.IsAbs(wd.Path) {
		t.Fatalf("listing the working directory: %+v, %v", wd, err)
	}
	// Relative paths start where the commands start.
	pwd := RunScript(t, h.Link, name, "pwd; id -u; if [ -w . ]; then echo writable; fi", nil)
	lines := strings.Fields(pwd.Output)
	if pwd.Exit != 0 || len(lines) < 2 || lines[0] != wd.Path {
		t.Fatalf("commands start in %q, files in %q", pwd.Output, wd.Path)
	}
	uid := lines[1]
	// Relative paths where the commands' user may write there (a workspace,
	// a home); else under /tmp (a user without a home starts in /).
	dir := "agentic-files-test"
	base := wd.Path
	if len(lines) < 3 {
		base = "/tmp/" + name
		dir = base + "/" + dir
	}

	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	rel := dir + "/sub/data.bin"
	if err := f.WriteFile(ctx, name, rel, 0o640, bytes.NewReader(data)); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	dirAbs := dir
	if !path.IsAbs(dir) {
		dirAbs = path.Join(base, dir)
	}
	abs := path.Join(dirAbs, "sub/data.bin")
	r, err := f.ReadFile(ctx, name, abs)
	if err != nil {
		t.Fatalf("ReadFile: %v", err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) || r.Size() != int64(len(data)) {
		t.Fatalf("read back %d of %d bytes (size %d), equal %v, %v", len(got), len(data), r.Size(), bytes.Equal(got, data), err)
	}
	// A command sees the file as its user's, with the mode asked for.
	st := RunScript(t, h.Link, name, `stat -c '%s %a %u' "$F"`, map[string]string{"F": abs})
	if want := "1048576 640 " + uid; strings.TrimSpace(st.Output) != want {
		t.Errorf("the written file is %q to a command, want %q", strings.TrimSpace(st.Output), want)
	}
	l, err := f.ListFiles(ctx, name, dir+"/sub")
	if err != nil || len(l.Entries) != 1 || l.Entries[0].Name != "data.bin" || l.Entries[0].Size != 1<<20 ||
		l.Entries[0].Mode != 0o640 || l.Entries[0].Type != ports.FileTypeFile {
		t.Errorf("listing: %+v, %v", l, err)
	}

	// A tree round trip keeps a symlink as a link.
	if r := RunScript(t, h.Link, name, `cd "$D" && mkdir -p t/d && echo x > t/d/f && ln -s d/f t/link`, map[string]string{"D": dirAbs}); r.Exit != 0 {
		t.Fatalf("making a tree: %+v", r)
	}
	ar, err := f.ReadArchive(ctx, name, dir+"/t")
	if err != nil {
		t.Fatalf("ReadArchive: %v", err)
	}
	archive, err := io.ReadAll(ar)
	ar.Close()
	if err != nil {
		t.Fatalf("reading the archive: %v", err)
	}
	if err := f.WriteArchive(ctx, name, dir+"/copy", bytes.NewReader(archive)); err != nil {
		t.Fatalf("WriteArchive: %v", err)
	}
	chk := RunScript(t, h.Link, name, `cd "$D/copy" && readlink link && cat link`, map[string]string{"D": dirAbs})
	if chk.Exit != 0 || chk.Output != "d/f\nx\n" {
		t.Errorf("the copied tree: %+v", chk)
	}

	// An archive that climbs out is refused whole: nothing written.
	var bad bytes.Buffer
	tw := tar.NewWriter(&bad)
	for _, n := range []string{"fine.txt", "../escaped.txt"} {
		_ = tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte("x"))
	}
	_ = tw.Close()
	if err := f.WriteArchive(ctx, name, dir+"/refused", &bad); !errors.Is(err, ports.ErrInvalidPath) {
		t.Errorf("an archive with ..: %v, want ErrInvalidPath", err)
	}
	if l, err := f.ListFiles(ctx, name, dir); err != nil || hasEntry(l, "escaped.txt") || hasEntry(l, "fine.txt") {
		t.Errorf("a refused archive wrote something: %+v, %v", l, err)
	}
	if l, err := f.ListFiles(ctx, name, dir+"/refused"); !errors.Is(err, ports.ErrFileNotFound) {
		t.Errorf("a refused archive made its directory: %+v, %v", l, err)
	}

	// Where the commands' user cannot write, the file work cannot either
	// (root, on a host runtime, can write anywhere: nothing to try there).
	ro := RunScript(t, h.Link, name, `for d in /etc /usr /bin /sbin /; do [ -w "$d" ] || { echo "$d"; exit 0; }; done; exit 1`, nil)
	if ro.Exit == 0 {
		denied := path.Join(strings.TrimSpace(ro.Output), "agentic-denied")
		if err := f.WriteFile(ctx, name, denied, 0o644, strings.NewReader("x")); !errors.Is(err, ports.ErrPermissionDenied) {
			t.Errorf("writing %s as uid %s: %v, want ErrPermissionDenied", denied, uid, err)
		}
	} else if uid != "0" {
		t.Errorf("uid %s can write to /etc, /usr, /bin, /sbin and /", uid)
	}
	if _, err := f.ReadFile(ctx, name, dir+"/missing"); !errors.Is(err, ports.ErrFileNotFound) {
		t.Errorf("reading a missing file: %v, want ErrFileNotFound", err)
	}
	if err := f.DeleteFile(ctx, name, dir, false); !errors.Is(err, ports.ErrDirectoryNotEmpty) {
		t.Errorf("deleting a full directory: %v, want ErrDirectoryNotEmpty", err)
	}
	if err := f.DeleteFile(ctx, name, dir, true); err != nil {
		t.Errorf("deleting the tree: %v", err)
	}
	if _, err := f.ListFiles(ctx, name, dir); !errors.Is(err, ports.ErrFileNotFound) {
		t.Errorf("listing a deleted tree: %v, want ErrFileNotFound", err)
	}
}

func hasEntry(l ports.FileListing, name string) bool {
	for _, e := range l.Entries {
		if e.Name == name {
			return true
		}
	}
	return false
}
