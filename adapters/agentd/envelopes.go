package agentd

import (
	"encoding/binary"
	"io"
	"net/http"
	"strings"
)

// wholeEnvelopes makes a gRPC request body hand the HTTP/2 writer whole
// messages. connect writes each message into the body pipe in two writes,
// its 5-byte prefix and then the message, and net/http sends (and flushes)
// every read of the body as a DATA frame of its own: two frames, two
// socket writes and two wake-ups of the server's reader per message (seen
// in the terminal echo profile, docs/benchmarks.md). Once a prefix is read
// the rest of its message follows at once, so reading on to the message's
// end blocks for nothing.
type wholeEnvelopes struct{ next http.RoundTripper }

func (w wholeEnvelopes) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody || !strings.HasPrefix(req.Header.Get("Content-Type"), "application/grpc") {
		return w.next.RoundTrip(req)
	}
	r := *req
	r.Body = &envelopeBody{body: req.Body}
	return w.next.RoundTrip(&r)
}

// envelopeBody reads a stream of envelopes (1 flag byte, a 4-byte big-endian
// length, the message), returning from Read only at a message's end, when
// p is full, or on an error.
type envelopeBody struct {
	body   io.ReadCloser
	prefix [5]byte
	inPre  int    // prefix bytes seen of the current envelope
	left   uint32 // message bytes of the current envelope still to come
}

func (e *envelopeBody) Read(p []byte) (int, error) {
	total := 0
	for {
		n, err := e.body.Read(p[total:])
		e.track(p[total : total+n])
		total += n
		if err != nil || total == len(p) || (total > 0 && e.inPre == 0 && e.left == 0) {
			return total, err
		}
	}
}

func (e *envelopeBody) track(b []byte) {
	for len(b) > 0 {
		if e.left > 0 {
			k := min(uint32(len(b)), e.left) //nolint:gosec // len(b) of a read buffer fits
			e.left -= k
			b = b[k:]
			continue
		}
		e.prefix[e.inPre] = b[0]
		e.inPre++
		b = b[1:]
		if e.inPre == len(e.prefix) {
			e.inPre, e.left = 0, binary.BigEndian.Uint32(e.prefix[1:])
		}
	}
}

func (e *envelopeBody) Close() error { return e.body.Close() }
