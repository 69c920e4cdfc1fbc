package rest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A large upload sent over plain HTTP/1.1 with a Content-Length is taken
// off the HTTP server: its connection is hijacked once the request is
// authenticated and vetted, and the body is read from the socket itself,
// so that whoever copies it into another socket (the agent's raw data
// connection, adapters/agentrpc) moves it with splice(2) and not through
// user space. The answer is the same status, headers and JSON as the
// server would write, with "Connection: close": the connection is not
// used again. TLS, HTTP/2, chunked bodies and small uploads keep the HTTP
// server's body.

// spliceMinBytes is the smallest upload taken off the HTTP server: below
// it, keeping the connection for the next request is worth more.
const spliceMinBytes = 1 << 20

// spliceSegment is the most bytes one splice moves before the idle
// deadline is pushed back: an upload may slow to this much a minute.
const spliceSegment = 1 << 20

// spliceUpload takes r's connection over for its body when it can (see
// above); nil when it does not. The answer sw writes goes to the
// connection once the request's handling is done.
func (s *Server) spliceUpload(sw *statusWriter, r *http.Request) *splicedBody {
	if r.ProtoMajor != 1 || r.TLS != nil || r.ContentLength < spliceMinBytes || len(r.TransferEncoding) > 0 {
		return nil
	}
	conn, brw, err := http.NewResponseController(sw).Hijack()
	if err != nil {
		return nil
	}
	b := &splicedBody{conn: conn, left: r.ContentLength, length: r.ContentLength}
	// What the server's reader holds past the headers is the body's start.
	if n := min(int64(brw.Reader.Buffered()), r.ContentLength); n > 0 {
		early, _ := brw.Reader.Peek(int(n))
		b.early = bytes.Clone(early)
		b.left -= n
	}
	a := &hijackedAnswer{conn: conn, header: sw.Header().Clone()}
	sw.ResponseWriter = a
	if strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		// The HTTP server would have said it at the body's first read.
		_ = conn.SetWriteDeadline(time.Now().Add(answerTimeout))
		if _, err := io.WriteString(conn, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			_ = b.fail(err)
		}
	}
	// The request's context ends once every handler and the audit are
	// done with it (ServeHTTP returned): the answer goes out then.
	context.AfterFunc(r.Context(), func() { a.send(s.log) })
	return b
}

// errUploadCut is an upload whose connection ended before its
// Content-Length.
var errUploadCut = errors.New("the upload ended before all of its Content-Length arrived")

// splicedBody is an upload's body read from its hijacked connection: the
// bytes the server had read already, then at most left from the socket.
type splicedBody struct {
	conn   net.Conn
	early  []byte
	left   int64
	length int64
	closed atomic.Bool
	mu     sync.Mutex
	err    error // the body's own failure (the client's), first one
}

// push moves the idle deadline on, unless the body was closed.
func (b *splicedBody) push() {
	_ = b.conn.SetReadDeadline(time.Now().Add(uploadIdle))
	if b.closed.Load() {
		_ = b.conn.SetReadDeadline(time.Unix(1, 0))
	}
}

// fail notes the body's own failure; the error to return.
func (b *splicedBody) fail(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w (%d of %d bytes)", errUploadCut, b.length-b.left, b.length)
		}
		b.err = err
	}
	return b.err
}

// failure is the body's own failure, if it had one.
func (b *splicedBody) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *splicedBody) Read(p []byte) (int, error) {
	if len(b.early) > 0 {
		n := copy(p, b.early)
		b.early = b.early[n:]
		return n, nil
	}
	if b.left == 0 {
		return 0, io.EOF
	}
	if err := b.failure(); err != nil {
		return 0, err
	}
	b.push()
	n, err := b.conn.Read(p[:min(int64(len(p)), b.left)])
	b.left -= int64(n)
	if err != nil && (b.left > 0 || !errors.Is(err, io.EOF)) {
		return n, b.fail(err)
	}
	return n, nil
}

// WriteTo moves the body to w: when w is a TCP socket (and the client's
// connection one too), splice(2) moves it, a segment at a time so that the
// idle deadline moves with the bytes.
func (b *splicedBody) WriteTo(w io.Writer) (int64, error) {
	var written int64
	if len(b.early) > 0 {
		n, err := w.Write(b.early)
		written += int64(n)
		b.early = nil
		if err != nil {
			return written, err
		}
	}
	for b.left > 0 {
		if err := b.failure(); err != nil {
			return written, err
		}
		b.push()
		n, err := io.CopyN(w, b.conn, min(b.left, spliceSegment))
		written += n
		b.left -= n
		if err != nil {
			if errors.Is(err, io.EOF) || b.closed.Load() || isTimeout(err) {
				return written, b.fail(err)
			}
			return written, err
		}
	}
	return written, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Close ends a read or a WriteTo under way (a given-up upload), at once.
func (b *splicedBody) Close() error {
	if b.closed.CompareAndSwap(false, true) {
		_ = b.conn.SetReadDeadline(time.Unix(1, 0))
	}
	return nil
}

// answerTimeout bounds the writing of the answer to a hijacked upload.
const answerTimeout = 30 * time.Second

// hijackedAnswer is the ResponseWriter of a hijacked upload: what the
// handlers write is kept, and sent as the HTTP server would write it once
// they are done.
type hijackedAnswer struct {
	conn   net.Conn
	header http.Header
	status int
	body   bytes.Buffer
	mu     sync.Mutex
	sent   bool
}

func (a *hijackedAnswer) Header() http.Header { return a.header }

func (a *hijackedAnswer) WriteHeader(code int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.status == 0 {
		a.status = code
	}
}

func (a *hijackedAnswer) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sent {
		return 0, http.ErrHijacked
	}
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.body.Write(p)
}

// send writes the answer and closes the connection.
func (a *hijackedAnswer) send(log *slog.Logger) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sent {
		return
	}
	a.sent = true
	if a.status == 0 {
		a.status = http.StatusOK
	}
	h := a.header.Clone()
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	h.Set("Connection", "close")
	if bodyAllowed(a.status) {
		h.Set("Content-Length", strconv.Itoa(a.body.Len()))
		if h.Get("Content-Type") == "" && a.body.Len() > 0 {
			h.Set("Content-Type", http.DetectContentType(a.body.Bytes()))
		}
	} else {
		h.Del("Content-Length")
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "HTTP/1.1 %03d %s\r\n", a.status, http.StatusText(a.status))
	_ = h.Write(&out)
	out.WriteString("\r\n")
	if bodyAllowed(a.status) {
		out.Write(a.body.Bytes())
	}
	_ = a.conn.SetWriteDeadline(time.Now().Add(answerTimeout))
	if _, err := a.conn.Write(out.Bytes()); err != nil {
		log.Debug("rest: the answer to an upload not written", "err", err)
	}
	lingerClose(a.conn)
}

// bodyAllowed says whether an answer of status has a body (RFC 9110).
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// lingerClose closes c as the HTTP server closes a connection with a body
// it did not read: its write side first, then what the client still
// sends is read and dropped a moment, so that closing with unread bytes
// does not reset the connection before the client has the answer.
func lingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, _ = io.CopyN(io.Discard, c, 256<<10)
	}
	_ = c.Close()
}
