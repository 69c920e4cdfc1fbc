package hitl

import (
	"bytes"
	"strings"
)

// SummaryBytes is the size of a mission summary: the tail of its output.
const SummaryBytes = 2048

// Tail keeps the last part of a session's output as a terminal shows it. Feed
// it raw PTY chunks in order; escape sequences and runes split across chunks
// are handled. The zero value keeps SummaryBytes.
type Tail struct {
	max int
	s   screen
}

// NewTail returns a Tail whose String is at most maxBytes long; maxBytes < 1
// means SummaryBytes.
func NewTail(maxBytes int) *Tail {
	if maxBytes < 1 {
		maxBytes = SummaryBytes
	}
	return &Tail{max: maxBytes}
}

func (t *Tail) maxBytes() int {
	if t.max < 1 {
		return SummaryBytes
	}
	return t.max
}

// Write feeds a raw chunk. It never fails; the results only make Tail an
// io.Writer.
func (t *Tail) Write(p []byte) (int, error) {
	t.s.limit = t.maxBytes()
	t.s.write(p)
	return len(p), nil
}

// String returns the last at most maxBytes bytes of the cleaned text, cut at
// a rune boundary.
func (t *Tail) String() string {
	t.s.init()
	return string(cutTail(t.s.render(nil), t.maxBytes()))
}

// LastLine returns the last line with visible text, without trailing blanks.
func (t *Tail) LastLine() string {
	t.s.init()
	for i := len(t.s.rows) - 1; i >= 0; i-- {
		if r := trimBlank(t.s.rows[i]); len(r) > 0 {
			return string(r)
		}
	}
	out := t.s.out
	for len(out) > 0 {
		i := bytes.LastIndexByte(out, '\n')
		line := out[i+1:]
		out = out[:max(i, 0)]
		if len(bytes.TrimRight(line, " \t")) > 0 {
			return strings.TrimRight(string(line), " \t")
		}
		if i < 0 {
			break
		}
	}
	return ""
}

// CurrentLine returns the text after the last newline, as shown (a prompt
// often has no newline after it), trailing blanks included.
func (t *Tail) CurrentLine() string {
	t.s.init()
	return string(t.s.rows[len(t.s.rows)-1])
}
