package rest

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// fakeFiles is a ports.AgentFiles whose reads give body then fail with cut
// (nil: a clean end), and which keeps what it was asked to write.
type fakeFiles struct {
	mu      sync.Mutex
	body    string
	size    int64
	cut     error
	refuse  string // WriteFile of a path starting so: permission denied
	written map[string]string
	modes   map[string]fs.FileMode
}

type cutReader struct {
	r    io.Reader
	cut  error
	size int64
}

func (c *cutReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if errors.Is(err, io.EOF) && c.cut != nil {
		return n, c.cut
	}
	return n, err
}
func (c *cutReader) Close() error { return nil }
func (c *cutReader) Size() int64  { return c.size }

func (f *fakeFiles) ListFiles(context.Context, string, string) (ports.FileListing, error) {
	return ports.FileListing{Path: "/w", Entries: []ports.FileEntry{{Name: "x", Type: ports.FileTypeFile, Mode: 0o644 | fs.ModeSetuid}}}, nil
}

func (f *fakeFiles) ReadFile(context.Context, string, string) (ports.FileReader, error) {
	return &cutReader{r: strings.NewReader(f.body), cut: f.cut, size: f.size}, nil
}

func (f *fakeFiles) ReadArchive(context.Context, string, string) (ports.FileReader, error) {
	return &cutReader{r: strings.NewReader(f.body), cut: f.cut, size: -1}, nil
}

func (f *fakeFiles) WriteFile(_ context.Context, _, p string, mode fs.FileMode, r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if f.refuse != "" && strings.HasPrefix(p, f.refuse) {
		return ports.ErrPermissionDenied
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.written[p], f.modes[p] = string(b), mode
	return nil
}

func (f *fakeFiles) WriteArchive(_ context.Context, _, p string, r io.Reader) error {
	return f.WriteFile(context.Background(), "", p, 0, r)
}

func (f *fakeFiles) DeleteFile(context.Context, string, string, bool) error {
	return ports.ErrDirectoryNotEmpty
}

func filesServer(t *testing.T, f *fakeFiles, max int64) *httptest.Server {
	t.Helper()
	if f.written == nil {
		f.written, f.modes = map[string]string{}, map[string]fs.FileMode{}
	}
	srv := httptest.NewServer(New(Deps{Token: testToken, Files: f, MaxFileBytes: max}).Handler())
	t.Cleanup(srv.Close)
	return srv
}

func filesReq(t *testing.T, method, u string, body io.Reader) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, u, body)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// A download the agent cuts short must not look complete to the client: a
// file ends short of its Content-Length, an archive (chunked) is aborted
// instead of being ended with its last chunk.
func TestACutDownloadIsAborted(t *testing.T) {
	f := &fakeFiles{body: "half of it", size: 100, cut: ports.ErrAgentGone}
	srv := filesServer(t, f, 0)
	for _, route := range []string{"/files/content", "/files/archive"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/agents/a1"+route+"?path=x", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue // aborted before the status went out: nothing looks complete
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Errorf("%s: a cut download read as complete (%d %q)", route, resp.StatusCode, b)
		}
	}
	// The same download, whole, ends cleanly.
	whole := &fakeFiles{body: f.body, size: int64(len(f.body))}
	resp := filesReq(t, http.MethodGet, filesServer(t, whole, 0).URL+"/api/v1/agents/a1/files/content?path=x", nil)
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != whole.body || resp.ContentLength != whole.size {
		t.Errorf("a whole download: %q %v (length %d)", b, err, resp.ContentLength)
	}
}

// Uploads are not bound by the 1 MiB JSON limit but by the file maximum,
// which a declared length over it meets before a byte is read.
func TestUploadsAreBoundByTheFileMaximum(t *testing.T) {
	f := &fakeFiles{}
	srv := filesServer(t, f, 2<<20)
	big := strings.Repeat("x", 3<<19) // 1.5 MiB: over MaxBodyBytes, under the file maximum
	resp := filesReq(t, http.MethodPut, srv.URL+"/api/v1/agents/a1/files/content?path=p&mode=0755", strings.NewReader(big))
	if resp.StatusCode != http.StatusNoContent || f.written["p"] != big || f.modes["p"] != 0o755 {
		t.Fatalf("a 1.5 MiB upload: %d, %d bytes written, mode %v", resp.StatusCode, len(f.written["p"]), f.modes["p"])
	}
	resp = filesReq(t, http.MethodPut, srv.URL+"/api/v1/agents/a1/files/content?path=q", strings.NewReader(strings.Repeat("x", 3<<20)))
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "file_too_large") {
		t.Fatalf("a 3 MiB upload over a 2 MiB maximum: %d %s", resp.StatusCode, b)
	}
	if _, ok := f.written["q"]; ok {
		t.Error("an upload over the maximum reached the agent")
	}
	// Listing modes are octal with the special bits as Unix has them.
	resp = filesReq(t, http.MethodGet, srv.URL+"/api/v1/agents/a1/files?path=.", nil)
	if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), `"mode":"4644"`) {
		t.Errorf("listing: %s", b)
	}
	resp = filesReq(t, http.MethodDelete, srv.URL+"/api/v1/agents/a1/files?path=d", nil)
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusConflict || !strings.Contains(string(b), "directory_not_empty") {
		t.Errorf("delete of a full directory: %d %s", resp.StatusCode, b)
	}
}

// FuzzFileParams sends arbitrary paths and modes: never a 5xx, a bad mode
// or path is a 400, and what reaches the agent is a valid path and mode.
func FuzzFileParams(f *testing.F) {
	for _, seed := range [][2]string{{"a", "0644"}, {"/etc/passwd", "755"}, {"", ""}, {"a\x00b", "0644"}, {"x", "999"},
		{"x", "0o644"}, {"x", "-1"}, {"x", "07777"}, {strings.Repeat("a", 5000), "644"}, {"../../x", "0600"}} {
		f.Add(seed[0], seed[1])
	}
	files := &fakeFiles{written: map[string]string{}, modes: map[string]fs.FileMode{}}
	h := New(Deps{Token: testToken, Files: files}).Handler()
	f.Fuzz(func(t *testing.T, p, mode string) {
		q := url.Values{"path": {p}}
		if mode != "" {
			q.Set("mode", mode)
		}
		req := httptest.NewRequest(http.MethodPut, "/api/v1/agents/a1/files/content?"+q.Encode(), strings.NewReader("data"))
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusNoContent:
			files.mu.Lock()
			m, ok := files.modes[p]
			files.mu.Unlock()
			if !ok || m&^fs.ModePerm != 0 || p == "" || strings.ContainsRune(p, 0) || len(p) > maxPathLen {
				t.Fatalf("accepted path %q mode %q as %v (%v)", p, mode, m, ok)
			}
		case http.StatusBadRequest:
			if !strings.Contains(rec.Body.String(), `"code"`) {
				t.Fatalf("400 without a JSON error: %s", rec.Body.String())
			}
		default:
			t.Fatalf("status %d for path %q mode %q: %s", rec.Code, p, mode, rec.Body.String())
		}
	})
}

// writeSizes records the size of each write.
type writeSizes struct{ sizes []int }

func (w *writeSizes) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return len(p), nil
}

// A download is copied to the answer in writes of up to downloadChunk,
// not io.Copy's 32 KiB (a read of the agent's stream and a chunk of the
// answer each), with its bytes whole and in order.
func TestADownloadIsWrittenInLargeChunks(t *testing.T) {
	const size = 1 << 20
	body := strings.Repeat("0123456789abcdef", size/16)
	r := &cutReader{r: strings.NewReader(body), size: size}
	w := &writeSizes{}
	n, err := io.Copy(w, download(context.Background(), r))
	if err != nil || n != size {
		t.Fatalf("copied %d of %d bytes: %v", n, size, err)
	}
	if largest := slices.Max(w.sizes); largest <= 32<<10 {
		t.Fatalf("largest write %d bytes in %d writes, want more than 32 KiB", largest, len(w.sizes))
	}
}
