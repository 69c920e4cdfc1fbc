package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/apicontract"
)

// fileURL is a file route of agent on s.
func fileURL(s *harness.Server, agent, route, p string, extra ...string) string {
	q := url.Values{"path": {p}}
	for i := 0; i+1 < len(extra); i += 2 {
		q.Set(extra[i], extra[i+1])
	}
	return s.RESTURL + "/api/v1/agents/" + agent + "/files" + route + "?" + q.Encode()
}

// fileDo sends a request with the operator token; the answer's body is read
// whole (tests keep files small enough) and its sha256 taken.
func fileDo(t *testing.T, s *harness.Server, method, u string, body io.Reader) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, u, err)
	}
	if err := apicontract.CheckResponse(req, resp.StatusCode, resp.Header, b); err != nil {
		t.Errorf("openapi.yaml: %v", err)
	}
	return resp.StatusCode, b
}

func errorCode(b []byte) string {
	var e restapi.Error
	_ = json.Unmarshal(b, &e)
	return e.Code
}

func listing(t *testing.T, s *harness.Server, agent, p string) restapi.FileListing {
	t.Helper()
	st, b := fileDo(t, s, http.MethodGet, fileURL(s, agent, "", p), nil)
	if st != http.StatusOK {
		t.Fatalf("listing %s: %d %s", p, st, b)
	}
	var l restapi.FileListing
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// Random binary files of 0 B, 1 B, 1 MiB and 100 MiB go to a host agent
// and back with the same sha256, through REST and through agenticctl cp.
func TestFilesRoundTrip(t *testing.T) {
	s := startServer(t, 1, "")
	dir := t.TempDir()
	for _, size := range []int{0, 1, 1 << 20, 100 << 20} {
		data := make([]byte, size)
		_, _ = rand.Read(data)
		want := sha256.Sum256(data)
		remote := filepath.Join(dir, "remote", fmt.Sprintf("f%d.bin", size))
		st, b := fileDo(t, s, http.MethodPut, fileURL(s, "host-01", "/content", remote, "mode", "0600"), bytes.NewReader(data))
		if st != http.StatusNoContent {
			t.Fatalf("upload of %d bytes: %d %s", size, st, b)
		}
		st, b = fileDo(t, s, http.MethodGet, fileURL(s, "host-01", "/content", remote), nil)
		if st != http.StatusOK || sha256.Sum256(b) != want {
			t.Fatalf("download of %d bytes: %d, %d bytes, sha256 equal %v", size, st, len(b), sha256.Sum256(b) == want)
		}
		fi, err := os.Stat(remote)
		if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != int64(size) {
			t.Fatalf("the file on the agent: %v %v", fi, err)
		}
		if size > 1<<20 {
			continue
		}
		// The CLI, both ways.
		local := filepath.Join(dir, fmt.Sprintf("local%d", size))
		if err := os.WriteFile(local, data, 0o640); err != nil {
			t.Fatal(err)
		}
		if out, errOut, code := ctl(t, s.RESTURL, s.Token, "cp", local, "host-01:"+remote+".cli"); code != 0 {
			t.Fatalf("cp up: %d %s %s", code, out, errOut)
		}
		back := local + ".back"
		if out, errOut, code := ctl(t, s.RESTURL, s.Token, "cp", "host-01:"+remote+".cli", back); code != 0 {
			t.Fatalf("cp down: %d %s %s", code, out, errOut)
		}
		got, err := os.ReadFile(back)
		if err != nil || sha256.Sum256(got) != want {
			t.Fatalf("cp round trip of %d bytes: %d bytes back, %v", size, len(got), err)
		}
		if fi, _ := os.Stat(back); fi.Mode().Perm() != 0o640 {
			t.Errorf("cp kept mode %v, want 0640", fi.Mode().Perm())
		}
	}
}

// Listings, modes, relative paths, delete, and the typed errors.
func TestFilesListModesDeleteAndErrors(t *testing.T) {
	s := startServer(t, 1, "", "AGENTIC_FILE_MAX_BYTES=4096")
	dir := t.TempDir()
	put := func(p string, body []byte, mode string) (int, []byte) {
		return fileDo(t, s, http.MethodPut, fileURL(s, "host-01", "/content", p, "mode", mode), bytes.NewReader(body))
	}
	if st, b := put(filepath.Join(dir, "a/b/x.sh"), []byte("#!/bin/sh\n"), "755"); st != http.StatusNoContent {
		t.Fatalf("put: %d %s", st, b)
	}
	if err := os.Symlink("x.sh", filepath.Join(dir, "a/b/link")); err != nil {
		t.Fatal(err)
	}
	l := listing(t, s, "host-01", filepath.Join(dir, "a/b"))
	if l.Path != filepath.Join(dir, "a/b") || len(l.Entries) != 2 {
		t.Fatalf("listing: %+v", l)
	}
	if e := l.Entries[1]; e.Name != "x.sh" || e.Type != restapi.File || e.Mode != "0755" || e.Size != 10 {
		t.Errorf("x.sh: %+v", e)
	}
	if e := l.Entries[0]; e.Name != "link" || e.Type != restapi.Symlink || e.LinkTarget == nil || *e.LinkTarget != "x.sh" {
		t.Errorf("link: %+v", e)
	}
	// A file's listing is its one entry.
	if one := listing(t, s, "host-01", filepath.Join(dir, "a/b/x.sh")); len(one.Entries) != 1 || one.Entries[0].Name != "x.sh" {
		t.Errorf("listing a file: %+v", one)
	}
	// Relative paths start where the agent's commands start.
	r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "pwd"})
	wd := strings.TrimSpace(string(decoded(t, r, r.Stdout)))
	if rel := listing(t, s, "host-01", "."); rel.Path != wd {
		t.Errorf("'.' is %q, commands start in %q", rel.Path, wd)
	}

	for _, c := range []struct {
		what, method, url string
		body              []byte
		status            int
		code              string
	}{
		{"missing file", http.MethodGet, fileURL(s, "host-01", "/content", filepath.Join(dir, "nope")), nil, 404, "file_not_found"},
		{"missing listing", http.MethodGet, fileURL(s, "host-01", "", filepath.Join(dir, "nope")), nil, 404, "file_not_found"},
		{"a directory as a file", http.MethodGet, fileURL(s, "host-01", "/content", dir), nil, 400, "invalid_path"},
		{"a file as an archive", http.MethodGet, fileURL(s, "host-01", "/archive", filepath.Join(dir, "a/b/x.sh")), nil, 400, "invalid_path"},
		{"write over a directory", http.MethodPut, fileURL(s, "host-01", "/content", filepath.Join(dir, "a")), []byte("x"), 400, "invalid_path"},
		{"NUL in the path", http.MethodGet, fileURL(s, "host-01", "/content", "a\x00b"), nil, 400, "invalid_path"},
		{"bad mode", http.MethodPut, fileURL(s, "host-01", "/content", filepath.Join(dir, "m"), "mode", "999"), []byte("x"), 400, "invalid_request"},
		{"too large", http.MethodPut, fileURL(s, "host-01", "/content", filepath.Join(dir, "big")), make([]byte, 5000), 413, "file_too_large"},
		{"unknown agent", http.MethodGet, fileURL(s, "nobody-here", "", dir), nil, 404, "agent_not_found"},
		{"full directory", http.MethodDelete, fileURL(s, "host-01", "", filepath.Join(dir, "a")), nil, 409, "directory_not_empty"},
		{"delete /", http.MethodDelete, fileURL(s, "host-01", "", "/", "recursive", "true"), nil, 400, "invalid_path"},
	} {
		var body io.Reader
		if c.body != nil {
			body = bytes.NewReader(c.body)
		}
		st, b := fileDo(t, s, c.method, c.url, body)
		if st != c.status || errorCode(b) != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.what, st, b, c.status, c.code)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "big")); !os.IsNotExist(err) {
		t.Errorf("a refused upload left a file: %v", err)
	}
	// A file over the maximum is not read either.
	if err := os.WriteFile(filepath.Join(dir, "large"), make([]byte, 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, b := fileDo(t, s, http.MethodGet, fileURL(s, "host-01", "/content", filepath.Join(dir, "large")), nil); st != 413 || errorCode(b) != "file_too_large" {
		t.Errorf("reading a file over the maximum: %d %s", st, b)
	}
	if st, b := fileDo(t, s, http.MethodDelete, fileURL(s, "host-01", "", filepath.Join(dir, "a"), "recursive", "true"), nil); st != http.StatusNoContent {
		t.Fatalf("recursive delete: %d %s", st, b)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Errorf("after a recursive delete: %v", err)
	}
}

// A tree goes out as tar and back in (gzipped), symlinks kept as links;
// agenticctl cp moves whole directories both ways.
func TestFilesTreeRoundTrip(t *testing.T) {
	s := startServer(t, 1, "")
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	for p, content := range map[string]string{"top.txt": "top", "d/e/deep.txt": "deep", "d/empty/": ""} {
		full := filepath.Join(src, p)
		if strings.HasSuffix(p, "/") {
			_ = os.MkdirAll(full, 0o755)
			continue
		}
		_ = os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("e/deep.txt", filepath.Join(src, "d/link")); err != nil {
		t.Fatal(err)
	}
	st, tarball := fileDo(t, s, http.MethodGet, fileURL(s, "host-01", "/archive", src), nil)
	if st != http.StatusOK {
		t.Fatalf("archive: %d %s", st, tarball)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(tarball)
	_ = zw.Close()
	dst := filepath.Join(dir, "dst", "new")
	if st, b := fileDo(t, s, http.MethodPut, fileURL(s, "host-01", "/archive", dst), &gz); st != http.StatusNoContent {
		t.Fatalf("extract: %d %s", st, b)
	}
	sameTree(t, src, dst)

	// agenticctl cp: a local directory into an existing remote one, and back.
	remote := filepath.Join(dir, "remote")
	_ = os.Mkdir(remote, 0o755)
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "cp", src, "host-01:"+remote); code != 0 {
		t.Fatalf("cp dir up: %d %s %s", code, out, errOut)
	}
	sameTree(t, src, filepath.Join(remote, "src"))
	back := filepath.Join(dir, "back")
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "cp", "host-01:"+filepath.Join(remote, "src"), back); code != 0 {
		t.Fatalf("cp dir down: %d %s %s", code, out, errOut)
	}
	sameTree(t, src, back)
	out, errOut, code := ctl(t, s.RESTURL, s.Token, "ls", "host-01:"+filepath.Join(remote, "src", "d"))
	if code != 0 || !strings.Contains(out, "link -> e/deep.txt") || !strings.Contains(out, "empty") {
		t.Errorf("ls: %d %q %s", code, out, errOut)
	}
}

// sameTree compares two trees: names, types, contents, modes, link targets.
func sameTree(t *testing.T, a, b string) {
	t.Helper()
	walk := func(root string) map[string]string {
		m := map[string]string{}
		_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				t.Errorf("walking %s: %v", p, err)
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			switch {
			case fi.Mode()&os.ModeSymlink != 0:
				target, _ := os.Readlink(p)
				m[rel] = "link " + target
			case fi.IsDir():
				m[rel] = "dir"
			default:
				c, _ := os.ReadFile(p)
				m[rel] = fmt.Sprintf("file %v %q", fi.Mode().Perm(), c)
			}
			return nil
		})
		return m
	}
	wa, wb := walk(a), walk(b)
	for k, v := range wa {
		if wb[k] != v {
			t.Errorf("%s: %q in %s, %q in %s", k, v, a, wb[k], b)
		}
	}
	for k := range wb {
		if _, ok := wa[k]; !ok {
			t.Errorf("%s is in %s only", k, b)
		}
	}
}

// tarOf builds an archive from entries made by the caller.
func tarOf(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	_ = tw.Close()
	return buf.Bytes()
}

// Every archive that would write outside its directory, or make what
// extraction never makes, is refused with 400 and writes nothing at all.
func TestFilesRefusedArchivesWriteNothing(t *testing.T) {
	s := startServer(t, 1, "")
	dir := t.TempDir()
	outside := filepath.Join(dir, "outside")
	_ = os.Mkdir(outside, 0o755)
	target := filepath.Join(dir, "target")
	_ = os.Mkdir(target, 0o755)
	// A link already in the target that points outside.
	if err := os.Symlink(outside, filepath.Join(target, "out")); err != nil {
		t.Fatal(err)
	}
	fine := &tar.Header{Name: "fine.txt", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}
	cases := map[string][]*tar.Header{
		"dot-dot":                {fine, {Name: "../outside/evil", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}},
		"dot-dot inside":         {fine, {Name: "a/../../outside/evil", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}},
		"absolute":               {fine, {Name: outside + "/evil", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}},
		"through its own link":   {fine, {Name: "l", Linkname: outside, Typeflag: tar.TypeSymlink}, {Name: "l/evil", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}},
		"through an older link":  {fine, {Name: "out/evil", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}},
		"char device":            {fine, {Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666}},
		"block device":           {fine, {Name: "sda", Typeflag: tar.TypeBlock, Devmajor: 8, Mode: 0o666}},
		"fifo":                   {fine, {Name: "pipe", Typeflag: tar.TypeFifo, Mode: 0o644}},
		"hard link":              {fine, {Name: "hl", Linkname: "/etc/passwd", Typeflag: tar.TypeLink}},
		"into a new directory":   {fine, {Name: "../evil", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}},
		"dir through older link": {{Name: "out/sub/", Mode: 0o755, Typeflag: tar.TypeDir}},
	}
	for name, hdrs := range cases {
		dest := target
		if name == "into a new directory" {
			dest = filepath.Join(target, "new", "deeper")
		}
		st, b := fileDo(t, s, http.MethodPut, fileURL(s, "host-01", "/archive", dest), bytes.NewReader(tarOf(t, hdrs...)))
		if st != http.StatusBadRequest || errorCode(b) != "invalid_path" {
			t.Errorf("%s: %d %s, want 400 invalid_path", name, st, b)
		}
	}
	for _, d := range []string{outside, target} {
		ents, _ := os.ReadDir(d)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		want := ""
		if d == target {
			want = "out"
		}
		if strings.Join(names, ",") != want {
			t.Errorf("%s holds %v after refused archives, want %q", d, names, want)
		}
	}
	// Not a tar at all.
	if st, b := fileDo(t, s, http.MethodPut, fileURL(s, "host-01", "/archive", target), strings.NewReader(strings.Repeat("not a tar ", 100))); st != http.StatusBadRequest || errorCode(b) != "invalid_path" {
		t.Errorf("garbage: %d %s", st, b)
	}
}

// Host agents that run as an unprivileged user do their file work as it:
// what that user cannot read or write is permission_denied.
func TestFilesPermissionDeniedAsTheAgentsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test makes files only root can read; run the tests as root (CI does)")
	}
	s := startServer(t, 1, "", "AGENTIC_HOST_USER=agentic-host")
	// Not under t.TempDir: its parent is root's alone, so the user could
	// not reach even what it may read, and every check would pass for
	// the wrong reason.
	dir, err := os.MkdirTemp("", "perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	_ = os.Chmod(dir, 0o755)
	secret := filepath.Join(dir, "root-only")
	if err := os.WriteFile(secret, []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, b := fileDo(t, s, http.MethodGet, fileURL(s, "host-01", "/content", secret), nil); st != http.StatusForbidden || errorCode(b) != "permission_denied" {
		t.Errorf("reading a root-only file: %d %s", st, b)
	}
	if st, b := fileDo(t, s, http.MethodPut, fileURL(s, "host-01", "/content", filepath.Join(dir, "new")), strings.NewReader("x")); st != http.StatusForbidden || errorCode(b) != "permission_denied" {
		t.Errorf("writing into root's directory: %d %s", st, b)
	}
	if st, b := fileDo(t, s, http.MethodDelete, fileURL(s, "host-01", "", secret), nil); st != http.StatusForbidden || errorCode(b) != "permission_denied" {
		t.Errorf("deleting root's file: %d %s", st, b)
	}
	if _, err := os.Stat(secret); err != nil {
		t.Errorf("root's file: %v", err)
	}
	// A directory the user cannot read: 403 with a JSON error, before any
	// byte of an archive (not a 200 with an empty or cut body). Root's
	// own 0700 directory, and a 000 one; a readable one shows the user
	// reaches them.
	for name, mode := range map[string]os.FileMode{"open": 0o755, "root-dir": 0o700, "mode-000": 0o000} {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "f"), []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	if st, b := fileDo(t, s, http.MethodGet, fileURL(s, "host-01", "/archive", filepath.Join(dir, "open")), nil); st != http.StatusOK || !bytes.Contains(b, []byte("data")) {
		t.Errorf("archive of a readable directory: %d, %d bytes", st, len(b))
	}
	for _, d := range []string{"root-dir", "mode-000"} {
		if st, b := fileDo(t, s, http.MethodGet, fileURL(s, "host-01", "/archive", filepath.Join(dir, d)), nil); st != http.StatusForbidden || errorCode(b) != "permission_denied" {
			t.Errorf("archive of %s: %d %q", d, st, b)
		}
	}
	// What the agent's user may write, it writes as itself.
	r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "sh", Args: &[]string{"-c", "echo $HOME; id -u"}})
	fields := strings.Fields(string(decoded(t, r, r.Stdout)))
	home := fields[0]
	if st, b := fileDo(t, s, http.MethodPut, fileURL(s, "host-01", "/content", "mine.txt"), strings.NewReader("mine")); st != http.StatusNoContent {
		t.Fatalf("writing in the user's own directory: %d %s", st, b)
	}
	l := listing(t, s, "host-01", "mine.txt")
	fi, err := os.Stat(l.Path)
	if err != nil || fmt.Sprint(fi.Sys().(*syscall.Stat_t).Uid) != fields[1] || !strings.HasPrefix(l.Path, home) {
		t.Errorf("mine.txt at %s (home %s): %v, uid %v, want uid %s", l.Path, home, err, fi.Sys().(*syscall.Stat_t).Uid, fields[1])
	}
}

// An agent killed in the middle of an upload or a download: the caller gets
// a clear error (an upload: 502 agent_gone; a download: a cut body), and no
// half-written file is left under the final name.
func TestFilesAgentKilledMidTransfer(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir)
	dir := t.TempDir()
	final := filepath.Join(dir, "upload.bin")

	// Upload: the body trickles, the agent dies half-way.
	pr, pw := io.Pipe()
	done := make(chan struct{})
	var st int
	var b []byte
	go func() {
		defer close(done)
		st, b = fileDo(t, s, http.MethodPut, fileURL(s, "host-01", "/content", final), pr)
	}()
	chunk := make([]byte, 1<<20)
	for range 8 {
		if _, err := pw.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 2*time.Minute, "the upload's temporary file", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, ".upload.bin.upload-*"))
		return len(m) == 1
	})
	before := connectedAt(t, s, "host-01")
	harness.KillHostAgents(dataDir)
	go func() {
		for {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the upload did not end after its agent was killed")
	}
	pw.CloseWithError(io.ErrClosedPipe)
	if st != http.StatusBadGateway || errorCode(b) != "agent_gone" {
		t.Errorf("upload to a killed agent: %d %s, want 502 agent_gone", st, b)
	}
	if _, err := os.Stat(final); !os.IsNotExist(err) {
		t.Errorf("a cut upload left the final file: %v", err)
	}
	eventually(t, 2*time.Minute, "the cut upload's temporary file removed", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, ".upload.bin.upload-*"))
		return len(m) == 0
	})

	// Download: the supervisor restarts the agent; kill it again mid-read.
	// The restarted one, not the killed one the server may still list.
	waitReconnected(t, s, "host-01", before)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Sparse: read like any file, written in no time.
	big := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 200<<20); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fileURL(s, "host-01", "/content", big), nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("download: %v %v", resp, err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadFull(resp.Body, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	before = connectedAt(t, s, "host-01")
	harness.KillHostAgents(dataDir)
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil || n+1<<20 >= 200<<20 {
		t.Errorf("a download from a killed agent read %d more bytes and ended with %v; want a cut body and an error", n, err)
	}
	// The CLI says so, and leaves no partial file. It reads through a proxy
	// that holds the download after its first MiB until the agent is dead:
	// the copy cannot finish first, however fast the machine.
	waitReconnected(t, s, "host-01", before)
	proxyURL, release := holdDownloads(t, s.RESTURL, 1<<20)
	local := filepath.Join(dir, "local.bin")
	cp := startProc(t, exec.Command(bins.Ctl, "--server", proxyURL, "--token", s.Token, "cp", "-q", "host-01:"+big, local))
	eventually(t, 2*time.Minute, "the CLI's partial file", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, ".local.bin.part-*"))
		return len(m) == 1
	})
	harness.KillHostAgents(dataDir)
	release()
	if err := cp.wait(); err == nil {
		t.Fatalf("cp from an agent killed mid-transfer ended well:\n%s", cp.out)
	}
	if !strings.Contains(cp.out.String(), "cut short") {
		t.Errorf("cp from a killed agent said %q", cp.out)
	}
	if _, err := os.Stat(local); !os.IsNotExist(err) {
		t.Errorf("cp left a partial file under the final name: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".local.bin.part-*")); len(m) != 0 {
		t.Errorf("cp left %v", m)
	}
}

// connectedAt is when the server saw agent id connect last.
func connectedAt(t *testing.T, s *harness.Server, id string) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	a, err := s.Client().GetAgentWithResponse(ctx, id)
	if err != nil || a.JSON200 == nil || a.JSON200.ConnectedAt == nil {
		t.Fatalf("agent %s: %v %v", id, err, a)
	}
	return *a.JSON200.ConnectedAt
}

// waitReconnected waits for agent id to be ready on a connection made
// after since: a killed agent may still be listed ready for a moment (the
// server hears its transfer streams break before its link), and a wait
// for "ready" alone would take the dying one.
func waitReconnected(t *testing.T, s *harness.Server, id string, since time.Time) {
	t.Helper()
	eventually(t, patience, "agent "+id+" reconnected", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		a, err := s.Client().GetAgentWithResponse(ctx, id)
		return err == nil && a.JSON200 != nil && a.JSON200.ConnectedAt != nil && a.JSON200.ConnectedAt.After(since) &&
			(a.JSON200.Status == restapi.Ready || a.JSON200.Status == restapi.Busy)
	})
}

// holdDownloads is a proxy to the REST server at target that passes a file
// download's first n bytes on, then holds the rest until release is called
// (the test's end releases it too).
func holdDownloads(t *testing.T, target string, n int64) (proxyURL string, release func()) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1                    // what passes reaches the client at once
	rp.ErrorLog = log.New(io.Discard, "", 0) // the cut body is the point
	rp.ModifyResponse = func(resp *http.Response) error {
		if strings.HasSuffix(resp.Request.URL.Path, "/files/content") && resp.StatusCode == http.StatusOK {
			resp.Body = &heldBody{ReadCloser: resp.Body, left: n, gate: gate}
		}
		return nil
	}
	srv := httptest.NewServer(rp)
	// Released before Close, which waits for the handlers.
	t.Cleanup(func() { release(); srv.Close() })
	return srv.URL, release
}

// heldBody reads left bytes, then waits for gate before reading on.
type heldBody struct {
	io.ReadCloser
	left int64
	gate chan struct{}
}

func (b *heldBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		<-b.gate
	} else if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// The requests TestSpecFuzz's seed 1234 sent: an archive extracted under a
// path of 4095 bytes (the most the spec allows), which makes files deeper
// than PATH_MAX, then the archive of a directory above it. The agent walked
// the tree by paths from /, failed with ENAMETOOLONG after the 200 had gone
// out, and the answer was cut short (unexpected EOF). Now the archive is
// whole, the deep directory is listed and archived, a file is written at
// 4095 bytes, and the tree is deleted.
func TestFilesTreeDeeperThanPathMax(t *testing.T) {
	s := startServer(t, 1, "")
	t1 := filepath.Join(t.TempDir(), "t1")
	// The generator's at_max_length path: segments of 99 bytes to 4095.
	deep := t1
	for len(deep) < 4095 {
		deep += "/" + strings.Repeat("a", 99)
	}
	deep = deep[:4095]
	if strings.HasSuffix(deep, "/") {
		deep = deep[:4094] + "a"
	}
	rel := strings.TrimPrefix(deep, t1+"/")
	upload := tarOf(t, &tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5})
	if st, b := fileDo(t, s, http.MethodPut, fileURL(s, "host-01", "/archive", deep), bytes.NewReader(upload)); st != http.StatusNoContent {
		t.Fatalf("writeArchive at %d bytes: %d %s", len(deep), st, b)
	}
	entries := func(what string, tarball []byte) map[string]string {
		t.Helper()
		got := map[string]string{}
		tr := tar.NewReader(bytes.NewReader(tarball))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return got
			}
			if err != nil {
				t.Fatalf("%s: the archive after %d entries: %v", what, len(got), err)
			}
			b, _ := io.ReadAll(tr)
			got[h.Name] = string(b)
		}
	}
	st, tarball := fileDo(t, s, http.MethodGet, fileURL(s, "host-01", "/archive", t1), nil)
	if st != http.StatusOK {
		t.Fatalf("readArchive of t1: %d %s", st, tarball)
	}
	got := entries("t1", tarball)
	if got[rel+"/x"] != "xxxxx" {
		t.Errorf("t1's archive lacks the deep file %.60q…/x: %d entries", rel, len(got))
	}
	if _, ok := got[rel+"/d/"]; !ok {
		t.Errorf("t1's archive lacks the deep directory d/")
	}
	if want := strings.Count(rel, "/") + 1 + 2; len(got) != want {
		t.Errorf("t1's archive has %d entries, want %d", len(got), want)
	}
	if st, tarball = fileDo(t, s, http.MethodGet, fileURL(s, "host-01", "/archive", deep), nil); st != http.StatusOK {
		t.Fatalf("readArchive at 4095 bytes: %d %s", st, tarball)
	}
	if got := entries("deep", tarball); len(got) != 2 || got["x"] != "xxxxx" {
		t.Errorf("the deep directory's archive: %v", got)
	}
	l := listing(t, s, "host-01", deep)
	if len(l.Entries) != 2 || l.Entries[0].Name != "d" || l.Entries[1].Name != "x" || l.Entries[1].Size != 5 {
		t.Errorf("the deep directory's listing: %+v", l.Entries)
	}
	// A file written at 4095 bytes (beside the deep directory): its
	// temporary name beside it is longer.
	file := deep[:len(deep)-1] + "f"
	if st, b := fileDo(t, s, http.MethodPut, fileURL(s, "host-01", "/content", file), strings.NewReader("file")); st != http.StatusNoContent {
		t.Fatalf("writeFile at %d bytes: %d %s", len(file), st, b)
	}
	if st, b := fileDo(t, s, http.MethodGet, fileURL(s, "host-01", "/content", file), nil); st != http.StatusOK || string(b) != "file" {
		t.Fatalf("readFile at %d bytes: %d %q", len(file), st, b)
	}
	if st, b := fileDo(t, s, http.MethodDelete, fileURL(s, "host-01", "", t1, "recursive", "true"), nil); st != http.StatusNoContent {
		t.Fatalf("deleteFile t1: %d %s", st, b)
	}
	if _, err := os.Lstat(t1); !os.IsNotExist(err) {
		t.Fatalf("t1 after its deletion: %v", err)
	}
}
