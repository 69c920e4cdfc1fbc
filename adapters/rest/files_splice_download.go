package rest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A large download asked for over plain HTTP/1.1 is taken off the HTTP
// server, the mirror of spliced uploads: once the agent has opened the
// file and its bytes come on a raw connection of their own (agentrpc's
// files_raw_read.go), the request's connection is hijacked, the answer's
// status line and headers written as the server would write them (the
// same status, Content-Type and Content-Length, the middlewares' headers,
// "Connection: close": the connection is not used again), and the reader
// splices the agent's connection into it. A download the agent cannot
// finish cleanly (the file changed, the agent went) is cut short of its
// Content-Length, as the server's own answer is. TLS, HTTP/2, HEAD, a
// Range, small files and bytes on the HTTP/2 data stream keep the HTTP
// server's answer.

// splicer is a download that can move its bytes to a socket itself.
type splicer interface {
	// Spliceable says SpliceTo can be used.
	Spliceable() bool
	// SpliceTo writes all of the file to dst and returns nil, or stops
	// short of its size with an error; idle bounds each wait on a side.
	SpliceTo(dst net.Conn, idle time.Duration) (int64, error)
}

// spliceDownload marks r's answer as one that may be spliced (see above);
// called with the request, before any handler.
func spliceDownload(sw *statusWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.ProtoMajor != 1 || r.TLS != nil || r.Header.Get("Range") != "" {
		return
	}
	sw.ResponseWriter = &splicingWriter{ResponseWriter: sw.ResponseWriter}
}

// splicingWriter is the ResponseWriter of a download that may be spliced;
// once its connection is taken, what is written to it goes nowhere.
type splicingWriter struct {
	http.ResponseWriter
	hijacked bool
}

// Unwrap lets http.ResponseController reach the real writer.
func (s *splicingWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *splicingWriter) WriteHeader(code int) {
	if !s.hijacked {
		s.ResponseWriter.WriteHeader(code)
	}
}

func (s *splicingWriter) Write(p []byte) (int, error) {
	if s.hijacked {
		return 0, http.ErrHijacked
	}
	return s.ResponseWriter.Write(p)
}

// splicingOf finds w's splicingWriter, if it has one.
func splicingOf(w http.ResponseWriter) *splicingWriter {
	for {
		if s, ok := w.(*splicingWriter); ok {
			return s
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}

// fileDownload is ReadFile's answer: spliced where it can be, the
// server's otherwise.
type fileDownload struct {
	r    ports.FileReader
	body io.Reader // download's: it closes r when the request ends
}

// splicerOf finds r's splicer, through the readers that wrap it.
func splicerOf(r ports.FileReader) (splicer, bool) {
	for {
		if sp, ok := r.(splicer); ok {
			return sp, true
		}
		u, ok := r.(interface{ Unwrap() ports.FileReader })
		if !ok {
			return nil, false
		}
		r = u.Unwrap()
	}
}

func (d fileDownload) VisitReadFileResponse(w http.ResponseWriter) error {
	if sp, ok := splicerOf(d.r); ok && d.r.Size() >= spliceMinBytes && sp.Spliceable() {
		if s := splicingOf(w); s != nil {
			if conn, _, err := http.NewResponseController(s.ResponseWriter).Hijack(); err == nil {
				s.hijacked = true
				return d.splice(w, conn, sp)
			}
		}
	}
	return restapi.ReadFile200ApplicationoctetStreamResponse{Body: d.body, ContentLength: d.r.Size()}.VisitReadFileResponse(w)
}

// splice answers on conn, taken off the server, and moves the file to it.
func (d fileDownload) splice(w http.ResponseWriter, conn net.Conn, sp splicer) error {
	h := w.Header() // what the middlewares set, as the server would send it
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(d.r.Size(), 10))
	// The status writer notes the 200 for the request's log; the
	// hijacked writer sends nothing.
	w.WriteHeader(http.StatusOK)
	h = h.Clone()
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	h.Set("Connection", "close")
	var head bytes.Buffer
	fmt.Fprintf(&head, "HTTP/1.1 %03d %s\r\n", http.StatusOK, http.StatusText(http.StatusOK))
	_ = h.Write(&head)
	head.WriteString("\r\n")
	_ = conn.SetWriteDeadline(time.Now().Add(uploadIdle))
	if _, err := conn.Write(head.Bytes()); err != nil {
		_ = conn.Close()
		_ = d.r.Close()
		return &streamBroken{err}
	}
	if _, err := sp.SpliceTo(conn, uploadIdle); err != nil {
		// Short of the Content-Length: the client knows it is cut.
		_ = conn.Close()
		_ = d.r.Close()
		return &streamBroken{err}
	}
	lingerClose(conn)
	return nil
}
