package rest

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"math/bits"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
)

// Output buffers of exec calls, pooled by size class (powers of two): a
// 1 MiB answer used to cost a few fresh megabytes per call (the growing
// collector, the string conversion, the encoder's buffers), and the kernel
// zeroing those pages was a third of agentic-mgmt's CPU.
const (
	minBufClass = 12 // 4 KiB
	maxBufClass = 24 // 16 MiB, DefaultMaxOutputBytes; larger ones are not kept
)

var outBufs [maxBufClass - minBufClass + 1]sync.Pool

// getOutBuf returns an empty buffer of capacity at least n (n ≥ 1).
func getOutBuf(n int) []byte {
	class := max(minBufClass, bits.Len(uint(n-1)))
	if class > maxBufClass {
		return make([]byte, 0, n)
	}
	if p, ok := outBufs[class-minBufClass].Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return make([]byte, 0, 1<<class)
}

// putOutBuf gives b back to the pool; nothing may use it afterwards.
func putOutBuf(b []byte) {
	c := cap(b)
	if c < 1<<minBufClass || c > 1<<maxBufClass || c&(c-1) != 0 {
		return
	}
	b = b[:0]
	outBufs[bits.Len(uint(c))-1-minBufClass].Put(&b)
}

// execAnswer is the JSON answer of an exec call (openapi.yaml ExecResult),
// byte for byte what encoding/json makes of restapi.ExecCommand200JSONResponse
// (HTML-safe escaping, the trailing newline), written straight from the
// collected output: no string copies of it, no body-sized buffer. Its
// output buffers go back to the pool once written.
type execAnswer struct {
	result         restapi.ExecResult // Stdout, Stderr and Encoding unset
	stdout, stderr []byte
	// answered, when set, runs once the answer is written and flushed
	// (the exec's "ended" log line): the client has it by then.
	answered func()
}

func newExecAnswer(r restapi.ExecResult, stdout, stderr []byte) *execAnswer {
	return &execAnswer{result: r, stdout: stdout, stderr: stderr}
}

// release gives the output buffers back; the answer is spent.
func (a *execAnswer) release() {
	putOutBuf(a.stdout)
	putOutBuf(a.stderr)
	a.stdout, a.stderr = nil, nil
}

// VisitExecCommandResponse writes the answer and flushes it before the
// handler returns: what runs after (answered, then the request's log line
// and audit entry in serve) no longer delays it. An answer that fits in
// one stage goes with its Content-Length, so the client has all of it
// with that flush; a longer one is chunked and its last chunk follows the
// handler's return as before.
func (a *execAnswer) VisitExecCommandResponse(w http.ResponseWriter) error {
	defer a.release()
	w.Header().Set("Content-Type", "application/json")
	lw := &lazyHeader{w: w, length: -1}
	if err := a.writeTo(lw); err != nil {
		// The status went out.
		return &streamBroken{err}
	}
	hoptrace.Mark("mgmt.exec_answered")
	if err := http.NewResponseController(w).Flush(); err != nil {
		return &streamBroken{err}
	}
	if a.answered != nil {
		a.answered()
	}
	return nil
}

// lazyHeader sends the status with the first write, and a Content-Length
// if length was known by then (≥ 0).
type lazyHeader struct {
	w      http.ResponseWriter
	sent   bool
	length int
}

func (l *lazyHeader) Write(p []byte) (int, error) {
	if !l.sent {
		l.sent = true
		if l.length >= 0 {
			l.w.Header().Set("Content-Length", strconv.Itoa(l.length))
		}
		l.w.WriteHeader(http.StatusOK)
	}
	return l.w.Write(p)
}

// stageSize is the piece the answer is written in, except runs of output
// that need no escaping, which go to the writer as they are.
const stageSize = 64 << 10

var stageBufs = sync.Pool{New: func() any { b := make([]byte, 0, stageSize); return &b }}

// answerWriter stages small pieces and writes long runs directly.
type answerWriter struct {
	w   io.Writer
	buf []byte
	err error
}

func (aw *answerWriter) flush() {
	if len(aw.buf) > 0 && aw.err == nil {
		_, aw.err = aw.w.Write(aw.buf)
	}
	aw.buf = aw.buf[:0]
}

// room makes sure n more bytes (n ≤ stageSize) fit in the stage.
func (aw *answerWriter) room(n int) {
	if len(aw.buf)+n > cap(aw.buf) {
		aw.flush()
	}
}

func (aw *answerWriter) raw(p []byte) {
	if len(p) >= stageSize/4 {
		aw.flush()
		if aw.err == nil {
			_, aw.err = aw.w.Write(p)
		}
		return
	}
	aw.room(len(p))
	aw.buf = append(aw.buf, p...)
}

func (aw *answerWriter) str(s string) {
	aw.room(len(s))
	aw.buf = append(aw.buf, s...)
}

// jsonString writes s (any string: small fields) as encoding/json does.
func (aw *answerWriter) jsonString(s string) {
	b, err := json.Marshal(s)
	if err != nil && aw.err == nil {
		aw.err = err
	}
	aw.raw(b)
}

func (aw *answerWriter) int(n int64) {
	aw.room(20)
	aw.buf = strconv.AppendInt(aw.buf, n, 10)
}

func (aw *answerWriter) bool(b bool) {
	aw.room(5)
	aw.buf = strconv.AppendBool(aw.buf, b)
}

func (a *execAnswer) writeTo(w io.Writer) error {
	sp := stageBufs.Get().(*[]byte)
	aw := &answerWriter{w: w, buf: (*sp)[:0]}
	defer func() {
		*sp = aw.buf[:0]
		stageBufs.Put(sp)
	}()
	r := &a.result
	text := utf8.Valid(a.stdout) && utf8.Valid(a.stderr)
	enc := restapi.Utf8
	if !text {
		enc = restapi.Base64
	}
	// The fields in encoding/json's order: the struct's.
	aw.str(`{"agent_id":`)
	aw.jsonString(r.AgentId)
	aw.str(`,"command_id":`)
	aw.jsonString(r.CommandId)
	aw.str(`,"duration_ms":`)
	aw.int(r.DurationMs)
	aw.str(`,"encoding":`)
	aw.jsonString(string(enc))
	if r.Error != nil {
		aw.str(`,"error":`)
		aw.jsonString(*r.Error)
	}
	aw.str(`,"exit_code":`)
	aw.int(int64(r.ExitCode))
	if r.Signal != nil {
		aw.str(`,"signal":`)
		aw.int(int64(*r.Signal))
	}
	for i, out := range [2][]byte{a.stderr, a.stdout} {
		if i == 0 {
			aw.str(`,"stderr":"`)
		} else {
			aw.str(`","stdout":"`)
		}
		if text {
			aw.text(out)
		} else {
			aw.base64(out)
		}
	}
	aw.str(`","success":`)
	aw.bool(r.Success)
	aw.str(`,"timed_out":`)
	aw.bool(r.TimedOut)
	aw.str(`,"truncated":`)
	aw.bool(r.Truncated)
	aw.str("}\n")
	if lw, ok := w.(*lazyHeader); ok && !lw.sent {
		// Nothing written yet: the stage holds the whole answer.
		lw.length = len(aw.buf)
	}
	aw.flush()
	return aw.err
}

func (aw *answerWriter) base64(p []byte) {
	const piece = stageSize / 4 * 3
	for len(p) > 0 && aw.err == nil {
		n := min(len(p), piece)
		m := base64.StdEncoding.EncodedLen(n)
		aw.room(m)
		base64.StdEncoding.Encode(aw.buf[len(aw.buf):len(aw.buf)+m], p[:n])
		aw.buf = aw.buf[:len(aw.buf)+m]
		p = p[n:]
	}
}

// textSafe says which bytes of valid UTF-8 encoding/json (EscapeHTML on)
// writes as they are inside a string: all but control characters, '"',
// '\\', '<', '>', '&' and 0xE2, the lead byte of U+2028 and U+2029 (which
// it escapes too), looked at apart.
var textSafe = func() (t [256]bool) {
	for i := range t {
		t[i] = i >= 0x20 && i != '"' && i != '\\' && i != '<' && i != '>' && i != '&' && i != 0xE2
	}
	return t
}()

// SWAR constants: each byte of a word at once.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// plainWord says none of the 8 bytes of x needs a look: all ASCII, none a
// control character, '"', '&', '<', '>' or '\\'.
func plainWord(x uint64) bool {
	zero := func(v uint64) uint64 { return (v - lsb) &^ v }
	m := x |
		(x-0x20*lsb)&^x | // a byte < 0x20
		zero(x&^(0x04*lsb)^(0x22*lsb)) | // '"' 0x22 or '&' 0x26
		zero(x&^(0x02*lsb)^(0x3C*lsb)) | // '<' 0x3C or '>' 0x3E
		zero(x^(0x5C*lsb)) // '\\'
	return m&msb == 0
}

// text writes valid UTF-8 as the inside of a JSON string, escaped as
// encoding/json escapes it.
func (aw *answerWriter) text(s []byte) {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		for i+8 <= len(s) && plainWord(binary.LittleEndian.Uint64(s[i:])) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if textSafe[c] {
			i++
			continue
		}
		if c == 0xE2 {
			// U+2028 LINE SEPARATOR, U+2029 PARAGRAPH SEPARATOR.
			if i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xA8 || s[i+2] == 0xA9) {
				aw.raw(s[start:i])
				aw.room(6)
				aw.buf = append(aw.buf, '\\', 'u', '2', '0', '2', hex[s[i+2]&0xF])
				i += 3
				start = i
				continue
			}
			i++
			continue
		}
		aw.raw(s[start:i])
		aw.room(6)
		switch c {
		case '"', '\\':
			aw.buf = append(aw.buf, '\\', c)
		case '\b':
			aw.buf = append(aw.buf, '\\', 'b')
		case '\f':
			aw.buf = append(aw.buf, '\\', 'f')
		case '\n':
			aw.buf = append(aw.buf, '\\', 'n')
		case '\r':
			aw.buf = append(aw.buf, '\\', 'r')
		case '\t':
			aw.buf = append(aw.buf, '\\', 't')
		default:
			aw.buf = append(aw.buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		i++
		start = i
	}
	aw.raw(s[start:])
}
