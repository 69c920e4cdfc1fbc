package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// rawUpload starts a PUT of a file's content on a connection of its own,
// with a Content-Length of length, and returns the connection (its
// headers sent, no byte of the body yet) and a reader of the answer.
func rawUpload(t *testing.T, s *harness.Server, remote string, length int, expectContinue bool) (*net.TCPConn, *bufio.Reader) {
	t.Helper()
	u := fileURL(s, "host-01", "/content", remote)
	c, err := net.Dial("tcp", strings.TrimPrefix(s.RESTURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	head := "PUT " + strings.TrimPrefix(u, s.RESTURL) + " HTTP/1.1\r\nHost: agentic\r\nAuthorization: Bearer " + s.Token +
		"\r\nContent-Type: application/octet-stream\r\nContent-Length: " + strconv.Itoa(length) + "\r\n"
	if expectContinue {
		head += "Expect: 100-continue\r\n"
	}
	if _, err := io.WriteString(c, head+"\r\n"); err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn), bufio.NewReader(c)
}

// uploadLeftovers lists the temporary files of uploads to path.
func uploadLeftovers(path string) []string {
	m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".upload-*"))
	return m
}

// A large upload over plain HTTP/1.1 goes from the client's socket to the
// host agent's file without a copy through user space (its connection
// taken off the HTTP server, the agent's data connection raw, the file
// helper splicing it into the file): the bytes arrive whole, with the
// mode asked for, after a 100 Continue when the client waits for one.
// One cut short of its Content-Length (the client half-closes) is
// answered 400 and leaves the file as it was; one whose connection is cut
// mid-way leaves it as it was too, and no temporary file.
func TestFilesSplicedUploads(t *testing.T) {
	s := startServer(t, 1, "")
	dir := t.TempDir()
	remote := filepath.Join(dir, "up", "f.bin")
	data := make([]byte, 3<<20+7)
	_, _ = rand.Read(data)

	c, br := rawUpload(t, s, remote, len(data), true)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("before the body: %v %v, want 100 Continue", resp, err)
	}
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("the upload's answer: %v %v, want 204", resp, err)
	}
	if got, err := os.ReadFile(remote); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the file on the agent: %d bytes of %d, %v", len(got), len(data), err)
	}

	// Cut short of its Content-Length: refused, the old file kept.
	c, br = rawUpload(t, s, remote, 8<<20, false)
	if _, err := c.Write(make([]byte, 2<<20)); err != nil {
		t.Fatal(err)
	}
	_ = c.CloseWrite()
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || errorCode(b) != "invalid_request" || !strings.Contains(string(b), "Content-Length") {
		t.Errorf("an upload short of its Content-Length: %d %s, want 400 invalid_request", resp.StatusCode, b)
	}
	eventually(t, time.Minute, "no temporary file after a short upload", func() bool { return len(uploadLeftovers(remote)) == 0 })
	if got, _ := os.ReadFile(remote); !bytes.Equal(got, data) {
		t.Errorf("a short upload changed the file: %d bytes", len(got))
	}

	// The connection cut mid-way: nothing kept either.
	c, _ = rawUpload(t, s, remote, 8<<20, false)
	if _, err := c.Write(make([]byte, 3<<20)); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the cut upload's temporary file", func() bool { return len(uploadLeftovers(remote)) == 1 })
	_ = c.Close()
	eventually(t, time.Minute, "no temporary file after a cut upload", func() bool { return len(uploadLeftovers(remote)) == 0 })
	if got, _ := os.ReadFile(remote); !bytes.Equal(got, data) {
		t.Errorf("a cut upload changed the file: %d bytes", len(got))
	}
}
