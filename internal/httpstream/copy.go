// Package httpstream copies an answer to an HTTP client as it comes, for
// the adapters that relay streamed answers (event streams, model tokens).
package httpstream

import (
	"io"
	"net/http"
)

// bufferSize is one read of the answer.
const bufferSize = 32 << 10

// Copy writes each read of body to w and flushes it, so that an event
// stream reaches the client event by event; tee (nil: none) sees the same
// bytes. It returns what was written, and ends at body's end, a read
// error, or a write error (the client went away).
func Copy(w http.ResponseWriter, body io.Reader, tee io.Writer) int64 {
	rc := http.NewResponseController(w)
	buf := make([]byte, bufferSize)
	var n int64
	for {
		k, err := body.Read(buf)
		if k > 0 {
			if tee != nil {
				_, _ = tee.Write(buf[:k])
			}
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n
			}
			n += int64(k)
			_ = rc.Flush()
		}
		if err != nil {
			return n
		}
	}
}
