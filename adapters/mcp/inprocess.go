package mcp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
)

// inProcess is an http.RoundTripper that serves each request with a handler
// of this process: the server's MCP endpoint calls its own REST API without
// a network hop, through every check a remote client meets (token, spec,
// limits). The response streams: its body is what the handler writes, as
// it writes it, and closing the body early ends the handler's context.
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	in := req.Clone(ctx)
	in.URL = &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	in.RequestURI = req.URL.RequestURI()
	in.Host = req.URL.Host
	in.RemoteAddr = "in-process:0"
	in.Proto, in.ProtoMajor, in.ProtoMinor = "HTTP/1.1", 1, 1
	if in.Body == nil {
		in.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeWriter{pw: pw, header: http.Header{}, committed: make(chan struct{})}
	go func() {
		defer cancel()
		defer func() {
			if req.Body != nil {
				_ = req.Body.Close()
			}
			if p := recover(); p != nil {
				w.commit(http.StatusInternalServerError)
				_ = pw.CloseWithError(fmt.Errorf("the REST handler failed: %v", p))
				return
			}
			w.commit(http.StatusOK)
			_ = pw.Close()
		}()
		t.h.ServeHTTP(w, in)
	}()
	select {
	case <-w.committed:
	case <-ctx.Done():
		select {
		case <-w.committed: // the handler answered as the caller gave up
		default:
			_ = pr.CloseWithError(ctx.Err())
			return nil, ctx.Err()
		}
	}
	resp := &http.Response{
		Status:        strconv.Itoa(w.status) + " " + http.StatusText(w.status),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.sent,
		Body:          &handlerBody{PipeReader: pr, cancel: cancel},
		ContentLength: -1,
		Request:       req,
	}
	if n, err := strconv.ParseInt(w.sent.Get("Content-Length"), 10, 64); err == nil && n >= 0 {
		resp.ContentLength = n
	}
	return resp, nil
}

// handlerBody is a response body read from the handler as it writes;
// closing it stops the handler.
type handlerBody struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (b *handlerBody) Close() error {
	b.cancel()
	return b.PipeReader.Close()
}

// pipeWriter is the handler's side: the status and header are committed by
// the first WriteHeader or Write (or the handler's return), the body goes
// into the pipe.
type pipeWriter struct {
	pw        *io.PipeWriter
	header    http.Header
	once      sync.Once
	status    int
	sent      http.Header
	committed chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 {
		return // informational answers are not passed on
	}
	w.commit(code)
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.commit(http.StatusOK)
	return w.pw.Write(b)
}

// Flush has nothing to do: every Write reaches the reader at once.
func (w *pipeWriter) Flush() {}

func (w *pipeWriter) commit(code int) {
	w.once.Do(func() {
		w.status = code
		w.sent = w.header.Clone()
		close(w.committed)
	})
}
