package rest

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawPut sends a PUT of path with a Content-Length of length and body
// (fewer bytes when the length lies; halfClose then ends the sending
// side), on a connection of its own, and reads the answer as it is on the
// wire.
func rawPut(t *testing.T, srv *httptest.Server, path string, length int, body []byte, halfClose bool) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	head := "PUT /api/v1/agents/a1/files/content?path=" + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testToken +
		"\r\nContent-Length: " + strconv.Itoa(length) + "\r\n\r\n"
	go func() {
		_, _ = c.Write(append([]byte(head), body...))
		if halfClose {
			_ = c.(*net.TCPConn).CloseWrite()
		}
	}()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the answer to a PUT of %d bytes: %v", length, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// shape is an answer's status, header names and body, without what
// differs from one answer to the next (Date, X-Request-Id, the length).
func shape(resp *http.Response, body []byte) string {
	var names []string
	for k := range resp.Header {
		switch k {
		case "Date", "X-Request-Id", "Content-Length", "Connection":
		default:
			names = append(names, k+": "+strings.Join(resp.Header[k], ","))
		}
	}
	sort.Strings(names)
	return resp.Status + "\n" + strings.Join(names, "\n") + "\n" + string(body)
}

// A large upload is taken off the HTTP server (its connection hijacked,
// said by Connection: close) and answered in the same shape as a small
// one the server answers itself: the same status, headers and JSON, for a
// success and for a refusal.
func TestASplicedUploadIsAnsweredAsTheServerWould(t *testing.T) {
	f := &fakeFiles{refuse: "denied"}
	srv := filesServer(t, f, 64<<20)
	big := bytes.Repeat([]byte("x"), spliceMinBytes+5)
	for _, path := range []string{"ok", "denied"} {
		small, smallBody := rawPut(t, srv, path+"-small", 3, []byte("abc"), false)
		spliced, splicedBody := rawPut(t, srv, path, len(big), big, false)
		if !spliced.Close || small.Close {
			t.Errorf("%s: Connection: close on the large upload's answer %v, on the small one's %v: want it only where the connection was taken off the server", path, spliced.Close, small.Close)
		}
		if a, b := strings.ReplaceAll(shape(small, smallBody), path+"-small", path), shape(spliced, splicedBody); a != b {
			t.Errorf("%s: answered by the server:\n%s\nspliced:\n%s", path, a, b)
		}
		if spliced.ContentLength != int64(len(splicedBody)) {
			t.Errorf("%s: Content-Length %d for %d bytes", path, spliced.ContentLength, len(splicedBody))
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !bytes.Equal([]byte(f.written["ok"]), big) {
		t.Errorf("the spliced upload wrote %d bytes, want %d", len(f.written["ok"]), len(big))
	}
}

// An upload whose connection ends before its Content-Length is a 400 that
// says so, never a shorter file: spliced or read by the server alike.
func TestAnUploadShortOfItsContentLengthIsRefused(t *testing.T) {
	f := &fakeFiles{}
	srv := filesServer(t, f, 64<<20)
	for _, c := range []struct {
		name         string
		length, sent int
	}{
		{"spliced", 3 << 20, 2 << 20},
		{"read by the server", 1000, 10},
	} {
		resp, b := rawPut(t, srv, "short", c.length, bytes.Repeat([]byte("y"), c.sent), true)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"invalid_request"`) || !strings.Contains(string(b), "Content-Length") {
			t.Errorf("%s: %d of %d bytes: %d %s", c.name, c.sent, c.length, resp.StatusCode, b)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.written["short"]; ok {
		t.Errorf("a short upload was written: %d bytes", len(f.written["short"]))
	}
}
