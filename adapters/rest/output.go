package rest

import (
	"encoding/base64"
	"sync"
	"unicode/utf8"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// ring keeps the last max bytes of a stream with absolute offsets. It grows
// on demand, so a command that prints little costs little.
type ring struct {
	buf  []byte
	max  int
	head int   // index of the oldest byte held
	n    int   // bytes held
	end  int64 // offset just after the newest byte ever written
}

func (r *ring) start() int64 { return r.end - int64(r.n) }

func (r *ring) write(p []byte) {
	r.end += int64(len(p))
	if len(p) >= r.max {
		if len(r.buf) < r.max {
			r.buf = make([]byte, r.max)
		}
		copy(r.buf, p[len(p)-r.max:])
		r.head, r.n = 0, r.max
		return
	}
	if need := r.n + len(p); need > len(r.buf) && len(r.buf) < r.max {
		r.grow(min(r.max, max(need, 2*len(r.buf), 4096)))
	}
	for len(p) > 0 {
		tail := (r.head + r.n) % len(r.buf)
		k := copy(r.buf[tail:], p)
		p = p[k:]
		r.n += k
		// A full ring overwrites its oldest bytes.
		if over := r.n - len(r.buf); over > 0 {
			r.head = (r.head + over) % len(r.buf)
			r.n = len(r.buf)
		}
	}
}

func (r *ring) grow(size int) {
	nb := make([]byte, size)
	r.copyOut(nb, 0, r.n)
	r.buf, r.head = nb, 0
}

// size is the memory the ring holds.
func (r *ring) size() int64 { return int64(cap(r.buf)) }

// compact shrinks the buffer to the bytes held (once nothing more is
// written: a finished command), keeping offsets.
func (r *ring) compact() {
	if cap(r.buf) == r.n {
		return
	}
	nb := make([]byte, r.n)
	r.copyOut(nb, 0, r.n)
	r.buf, r.head = nb, 0
}

// release drops the bytes held; offsets stay, reads return nothing.
func (r *ring) release() {
	r.buf, r.head, r.n, r.max = nil, 0, 0, 0
}

// copyOut copies n held bytes starting skip bytes after the oldest.
func (r *ring) copyOut(dst []byte, skip, n int) {
	if n == 0 {
		return
	}
	i := (r.head + skip) % len(r.buf)
	k := copy(dst[:n], r.buf[i:])
	copy(dst[k:n], r.buf)
}

// read returns up to limit bytes from offset from (clamped to what is held)
// and the offset the data starts at.
func (r *ring) read(from int64, limit int) ([]byte, int64) {
	from = max(r.start(), min(from, r.end))
	n := min(int(r.end-from), limit)
	out := make([]byte, n)
	r.copyOut(out, int(from-r.start()), n)
	return out, from
}

// collector gathers the output of an exec call, keeping the first max bytes
// per stream; a PTY's merged output counts as stdout.
type collector struct {
	mu        sync.Mutex
	max       int
	stdout    []byte
	stderr    []byte
	truncated bool
	taken     bool
}

func (c *collector) add(ch ports.OutputChunk) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.taken {
		return
	}
	dst := &c.stdout
	if ch.Stream == ports.StreamStderr {
		dst = &c.stderr
	}
	data := ch.Data
	if room := c.max - len(*dst); len(data) > room {
		c.truncated = true
		data = data[:max(room, 0)]
	}
	if len(data) == 0 {
		return
	}
	// Pooled buffers (execanswer.go), a size class up at a time: no
	// reallocation per chunk, and the answer gives them back once written.
	if need := len(*dst) + len(data); need > cap(*dst) {
		nb := getOutBuf(min(max(need, 2*cap(*dst), 32<<10), c.max))
		nb = append(nb, *dst...)
		putOutBuf(*dst)
		*dst = nb
	}
	*dst = append(*dst, data...)
}

// take returns what was collected (in pooled buffers: see putOutBuf) and
// lets go of it: the link keeps the command (and so this collector, through
// its output callback) for late lookups long after the exec call returned,
// and must not keep its output with it. Output that arrives later is dropped.
func (c *collector) take() (stdout, stderr []byte, truncated bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stdout, stderr, truncated = c.stdout, c.stderr, c.truncated
	c.stdout, c.stderr, c.taken = nil, nil, true
	return stdout, stderr, truncated
}

// encodeOutput applies openapi's OutputEncoding: utf-8 when both streams are
// valid UTF-8, else both base64.
func encodeOutput(stdout, stderr []byte) (string, string, restapi.OutputEncoding) {
	if utf8.Valid(stdout) && utf8.Valid(stderr) {
		return string(stdout), string(stderr), restapi.Utf8
	}
	return base64.StdEncoding.EncodeToString(stdout), base64.StdEncoding.EncodeToString(stderr), restapi.Base64
}

// holdBackPartialRune drops an incomplete UTF-8 sequence at the end of b, so
// text cut mid-character between two polls does not force base64; the bytes
// come with the next poll. It never returns nothing for something: a poll
// that got only a partial character returns it, or the client would spin.
func holdBackPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax-1 && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < utf8.RuneSelf {
			return b
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) && i < len(b) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}
