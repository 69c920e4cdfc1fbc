package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentfs"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// rawFileGet starts a GET of host-01's file remote on a connection of its
// own and returns its answer, the body not read yet.
func rawFileGet(t *testing.T, s *harness.Server, remote string) (*http.Response, net.Conn) {
	t.Helper()
	u := fileURL(s, "host-01", "/content", remote)
	c, err := net.Dial("tcp", strings.TrimPrefix(s.RESTURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatalf("the answer to GET %s: %v", remote, err)
	}
	return resp, c
}

// socketsOf counts the sockets process pid holds.
func socketsOf(pid int) int {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// fileHelpersOf lists the file helpers running on path.
func fileHelpersOf(path string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		args := strings.Split(string(b), "\x00")
		if len(args) > 2 && args[1] == agentfs.HelperArg && strings.Contains(string(b), path) {
			out = append(out, p)
		}
	}
	return out
}

// randomFileAt writes size random bytes to path, readable by all, with a
// modification time an hour ago (so that a change shows whatever the
// clock's granularity).
func randomFileAt(t *testing.T, path string, size int) []byte {
	t.Helper()
	data := make([]byte, size)
	_, _ = rand.Read(data)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	return data
}

// A download of a regular file over plain HTTP/1.1 goes from the file to
// the client's socket with no copy through user space on the way (the
// file helper's sendfile into the agent's raw data connection, spliced
// into the client's connection, taken off the HTTP server: Connection:
// close says so) from 1 MiB on, and is answered as the server answers a
// small one: 200, application/octet-stream, the Content-Length, the
// bytes. The refusals are the server's, with the commands' user's
// permissions; HTTP/2 keeps the server's answer. A file changed while it
// goes out is cut short of its Content-Length, never answered whole; a
// client gone mid-way leaves no helper, connection or transfer behind.
func TestFilesSplicedDownloads(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test makes a file only root can read; run the tests as root (CI does)")
	}
	s := startServer(t, 1, "", "AGENTIC_HOST_USER=agentic-host")
	// Not under t.TempDir, whose parent is root's alone.
	dir, err := os.MkdirTemp("", "dl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	_ = os.Chmod(dir, 0o755)

	for _, size := range []int{0, 1<<20 - 1, 1 << 20, 1<<20 + 1, 64<<20 + 3} {
		remote := filepath.Join(dir, "f"+strconv.Itoa(size))
		data := randomFileAt(t, remote, size)
		resp, _ := rawFileGet(t, s, remote)
		got, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: %d, %d bytes back, %v", size, resp.StatusCode, len(got), err)
		}
		if resp.ContentLength != int64(size) || resp.Header.Get("Content-Type") != "application/octet-stream" || resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%d bytes: Content-Length %d, headers %v", size, resp.ContentLength, resp.Header)
		}
		if spliced := size >= 1<<20; resp.Close != spliced {
			t.Errorf("%d bytes: Connection: close %v, want %v (spliced from 1 MiB on)", size, resp.Close, spliced)
		}
	}
	big := filepath.Join(dir, "f"+strconv.Itoa(64<<20+3))
	// Through a symlink as before: the helper opens the path as the
	// commands' user would.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(big, link); err != nil {
		t.Fatal(err)
	}
	if st, b := fileDo(t, s, http.MethodGet, fileURL(s, "host-01", "/content", link), nil); st != http.StatusOK || len(b) != 64<<20+3 {
		t.Errorf("through a symlink: %d, %d bytes", st, len(b))
	}

	// The refusals, as JSON, before any byte.
	secret := filepath.Join(dir, "root-only")
	randomFileAt(t, secret, 2<<20)
	_ = os.Chmod(secret, 0o600)
	for _, c := range []struct {
		what, path string
		status     int
		code       string
	}{
		{"a missing file", filepath.Join(dir, "nope"), 404, "file_not_found"},
		{"a directory", dir, 400, "invalid_path"},
		{"a file the commands' user may not read", secret, 403, "permission_denied"},
	} {
		if st, b := fileDo(t, s, http.MethodGet, fileURL(s, "host-01", "/content", c.path), nil); st != c.status || errorCode(b) != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.what, st, b, c.status, c.code)
		}
	}

	// HTTP/2 (h2c): the server's answer, the same bytes.
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: p}}
	req, _ := http.NewRequest(http.MethodGet, fileURL(s, "host-01", "/content", big), nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := h2.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.ProtoMajor != 2 || len(got) != 64<<20+3 || resp.ContentLength != 64<<20+3 {
		t.Errorf("HTTP/2: HTTP/%d, %d bytes, Content-Length %d, %v", resp.ProtoMajor, len(got), resp.ContentLength, err)
	}

	// Rewritten in place (the same size) while it goes out: cut short.
	changing := filepath.Join(dir, "changing")
	randomFileAt(t, changing, 64<<20)
	resp, _ = rawFileGet(t, s, changing)
	if _, err := io.ReadFull(resp.Body, make([]byte, 1<<20)); err != nil || !resp.Close {
		t.Fatalf("the start of a spliced download: %v, Connection: close %v", err, resp.Close)
	}
	f, err := os.OpenFile(changing, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("changed"), 100); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) || 1<<20+n >= 64<<20 {
		t.Errorf("a file changed while it went out: %d of %d bytes, %v; want it cut short", 1<<20+n, 64<<20, err)
	}

	// Clients gone mid-way, more than the agent's 8 transfers at once:
	// each one's helper and connections go, and a download after them
	// is whole.
	agentPID := harness.HostAgentPIDs(s.DataDir)["host-01"]
	agentSockets, serverSockets := socketsOf(agentPID), socketsOf(s.Cmd.Process.Pid)
	for i := range 10 {
		var (
			resp *http.Response
			c    net.Conn
		)
		// A transfer given up a moment ago may still hold its place.
		eventually(t, time.Minute, "a place among the agent's transfers", func() bool {
			resp, c = rawFileGet(t, s, big)
			return resp.StatusCode != http.StatusTooManyRequests
		})
		if _, err := io.ReadFull(resp.Body, make([]byte, 1<<20)); err != nil || !resp.Close {
			t.Fatalf("client %d: %d %v, Connection: close %v", i, resp.StatusCode, err, resp.Close)
		}
		_ = c.Close()
	}
	eventually(t, time.Minute, "no file helper left by the clients gone", func() bool { return len(fileHelpersOf(big)) == 0 })
	eventually(t, time.Minute, "the agent's and the server's sockets as before", func() bool {
		return socketsOf(agentPID) <= agentSockets && socketsOf(s.Cmd.Process.Pid) <= serverSockets
	})
	resp, _ = rawFileGet(t, s, big)
	got, err = io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || len(got) != 64<<20+3 {
		t.Errorf("after the clients gone: %d, %d bytes, %v", resp.StatusCode, len(got), err)
	}
}
