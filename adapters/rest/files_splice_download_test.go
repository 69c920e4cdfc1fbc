package rest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// splicingFiles is a fakeFiles whose reads can be spliced: SpliceTo
// writes the body to the socket, then fails with cut (nil: a clean end).
type splicingFiles struct {
	fakeFiles
	spliced atomic.Int32
}

type splicingReader struct {
	cutReader
	f    *splicingFiles
	body []byte
}

func (r *splicingReader) Spliceable() bool { return true }

func (r *splicingReader) SpliceTo(dst net.Conn, _ time.Duration) (int64, error) {
	r.f.spliced.Add(1)
	n, err := dst.Write(r.body)
	if err == nil {
		err = r.cut
	}
	return int64(n), err
}

func (f *splicingFiles) ReadFile(context.Context, string, string) (ports.FileReader, error) {
	return &splicingReader{cutReader: cutReader{r: strings.NewReader(f.body), cut: f.cut, size: f.size}, f: f, body: []byte(f.body)}, nil
}

func splicingServer(t *testing.T, f *splicingFiles, tlsToo bool) *httptest.Server {
	t.Helper()
	f.written, f.modes = map[string]string{}, map[string]fs.FileMode{}
	h := New(Deps{Token: testToken, Files: f, MaxFileBytes: 64 << 20}).Handler()
	srv := httptest.NewUnstartedServer(h)
	if tlsToo {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

// rawDownload sends a request for the file f (with extra header lines) on a connection of
// its own and reads the answer as it is on the wire: the body up to the
// connection's end, and the error that ended it.
func rawDownload(t *testing.T, srv *httptest.Server, method, extra string) (*http.Response, []byte, error) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	head := method + " /api/v1/agents/a1/files/content?path=f HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testToken + "\r\n" + extra + "\r\n"
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("the answer to a %s: %v", method, err)
	}
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// A large download whose bytes can be spliced is taken off the HTTP
// server (Connection: close) and answered in the same shape as the
// server's own answer to a small one: the same status, headers and body.
func TestASplicedDownloadIsAnsweredAsTheServerWould(t *testing.T) {
	big := bytes.Repeat([]byte("z"), spliceMinBytes+5)
	f := &splicingFiles{fakeFiles: fakeFiles{body: string(big), size: int64(len(big))}}
	srv := splicingServer(t, f, false)
	spliced, splicedBody, err := rawDownload(t, srv, http.MethodGet, "")
	if err != nil || !bytes.Equal(splicedBody, big) {
		t.Fatalf("the spliced download: %d of %d bytes, %v", len(splicedBody), len(big), err)
	}
	if f.spliced.Load() != 1 || !spliced.Close || spliced.ContentLength != int64(len(big)) {
		t.Fatalf("spliced %d times, Connection: close %v, Content-Length %d", f.spliced.Load(), spliced.Close, spliced.ContentLength)
	}

	f.body, f.size = "small", 5
	small, smallBody, err := rawDownload(t, srv, http.MethodGet, "")
	if err != nil || small.Close || f.spliced.Load() != 1 {
		t.Fatalf("a small download: %v, Connection: close %v, spliced %d times; want the server's answer", err, small.Close, f.spliced.Load())
	}
	if a, b := shape(small, nil), shape(spliced, nil); a != b {
		t.Errorf("answered by the server:\n%s\nspliced:\n%s", a, b)
	}
	if string(smallBody) != "small" || small.ContentLength != 5 {
		t.Errorf("the small download: %q, Content-Length %d", smallBody, small.ContentLength)
	}
}

// HEAD, a Range, TLS and HTTP/2 keep the server's answer: the same bytes,
// never spliced.
func TestDownloadsTheServerAnswersItself(t *testing.T) {
	big := bytes.Repeat([]byte("q"), spliceMinBytes+5)
	f := &splicingFiles{fakeFiles: fakeFiles{body: string(big), size: int64(len(big))}}
	srv := splicingServer(t, f, false)
	resp, b, err := rawDownload(t, srv, http.MethodHead, "")
	if err != nil || resp.StatusCode != http.StatusOK || len(b) != 0 || resp.Close {
		t.Errorf("HEAD: %d, %d bytes, Connection: close %v, %v", resp.StatusCode, len(b), resp.Close, err)
	}
	resp, b, err = rawDownload(t, srv, http.MethodGet, "Range: bytes=0-9\r\n")
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(b, big) || resp.Close {
		t.Errorf("a Range: %d, %d bytes, Connection: close %v, %v", resp.StatusCode, len(b), resp.Close, err)
	}

	f2 := &splicingFiles{fakeFiles: fakeFiles{body: string(big), size: int64(len(big))}}
	tsrv := splicingServer(t, f2, true)
	for _, h2 := range []bool{false, true} {
		tr := tsrv.Client().Transport.(*http.Transport).Clone()
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			tr.ForceAttemptHTTP2 = false
			tr.TLSClientConfig = tr.TLSClientConfig.Clone()
			tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
		}
		req, _ := http.NewRequest(http.MethodGet, tsrv.URL+"/api/v1/agents/a1/files/content?path=f", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(b, big) || resp.Close || resp.ProtoMajor != map[bool]int{false: 1, true: 2}[h2] {
			t.Errorf("TLS, HTTP/%d: %d bytes, Connection: close %v, %v", resp.ProtoMajor, len(b), resp.Close, err)
		}
	}
	if n := f.spliced.Load() + f2.spliced.Load(); n != 0 {
		t.Errorf("spliced %d times", n)
	}
}

// A spliced download the reader cannot finish is cut short of its
// Content-Length: the client reads an unexpected end, never the whole.
func TestACutSplicedDownloadEndsShort(t *testing.T) {
	f := &splicingFiles{fakeFiles: fakeFiles{body: strings.Repeat("h", spliceMinBytes), size: 3 * spliceMinBytes, cut: ports.ErrAgentGone}}
	srv := splicingServer(t, f, false)
	resp, b, err := rawDownload(t, srv, http.MethodGet, "")
	if !errors.Is(err, io.ErrUnexpectedEOF) || resp.StatusCode != http.StatusOK || int64(len(b)) >= resp.ContentLength || f.spliced.Load() != 1 {
		t.Errorf("a cut spliced download: %d, %d of %d bytes, %v; want an unexpected end", resp.StatusCode, len(b), resp.ContentLength, err)
	}
}

// A download whose reader ends with an error after every byte of its size
// (the file changed meanwhile) is cut short by its last byte, which is
// held back until a clean end: not answered whole.
func TestADownloadEndedWithAnErrorAfterItsBytesIsCut(t *testing.T) {
	for _, size := range []int{3, 5 << 20} {
		f := &fakeFiles{body: strings.Repeat("b", size), size: int64(size), cut: ports.ErrAgentGone}
		srv := filesServer(t, f, 64<<20)
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/agents/a1/files/content?path=x", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue // aborted before the status went out
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil || len(b) >= size {
			t.Errorf("%d bytes then an error: read %d bytes, %v; want the answer cut", size, len(b), err)
		}
		f.cut = nil
		resp = filesReq(t, http.MethodGet, srv.URL+"/api/v1/agents/a1/files/content?path=x", nil)
		if b, err := io.ReadAll(resp.Body); err != nil || len(b) != size {
			t.Errorf("%d bytes and a clean end: read %d bytes, %v", size, len(b), err)
		}
	}
}
