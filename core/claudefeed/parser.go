package claudefeed

import (
	"bytes"
	"maps"
	"strconv"
)

// keepBuf is the largest line buffer kept between lines; a bigger one (after
// a long line) is released so an idle parser stays small.
const keepBuf = 64 << 10

// maxPending bounds the tool calls remembered to name their results; past
// it the memory is cleared (results then come without a ToolName).
const maxPending = 4096

// Parser turns stream-json bytes into events. The zero value is not ready:
// use NewParser. A Parser is not safe for concurrent use.
type Parser struct {
	maxLine int

	buf      []byte // the current line so far
	dropping bool   // the current line passed maxLine: only head and size kept
	head     []byte // with dropping: the line's first MaxRaw bytes
	size     int    // with dropping: the line's length so far

	seq       int
	sessionID string
	model     string
	lastMsgID string            // to count an assistant message split over lines once
	pending   map[string]string // tool_use id → tool name, until its result
	sum       Summary
}

// NewParser returns a parser at the start of a stream.
func NewParser() *Parser {
	return &Parser{maxLine: MaxLine}
}

// Write takes the next chunk of output and returns the events of the lines
// it completes, in order. The chunk is not retained.
func (p *Parser) Write(chunk []byte) []Event {
	var out []Event
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			p.add(chunk)
			break
		}
		seg := chunk[:i]
		chunk = chunk[i+1:]
		if len(p.buf) == 0 && !p.dropping && len(seg) <= p.maxLine {
			out = p.line(out, seg) // whole line in this chunk: no copy
			continue
		}
		p.add(seg)
		out = p.endLine(out)
	}
	return out
}

// Flush ends the stream: a last line without "\n" is parsed. The parser
// can go on with a new line afterwards.
func (p *Parser) Flush() []Event {
	if len(p.buf) == 0 && !p.dropping {
		return nil
	}
	return p.endLine(nil)
}

// Summary returns the state of the run so far. The map is a copy.
func (p *Parser) Summary() Summary {
	s := p.sum
	s.ToolsUsed = maps.Clone(p.sum.ToolsUsed)
	if s.ToolsUsed == nil {
		s.ToolsUsed = map[string]int{}
	}
	return s
}

// add appends b to the current line, or only counts it once the line is
// too long, so memory stays bounded whatever the input.
func (p *Parser) add(b []byte) {
	if !p.dropping {
		need := len(p.buf) + len(b)
		if need <= p.maxLine {
			if need > cap(p.buf) {
				// Grow as append would, but never past the limit.
				nb := make([]byte, len(p.buf), min(max(need, 2*cap(p.buf), 512), p.maxLine))
				copy(nb, p.buf)
				p.buf = nb
			}
			p.buf = append(p.buf, b...)
			return
		}
		p.dropping = true
		p.size = len(p.buf)
		p.head = append(p.head[:0], p.buf[:min(len(p.buf), MaxRaw)]...)
		p.buf = nil
	}
	p.size += len(b)
	if len(p.head) < MaxRaw {
		p.head = append(p.head, b[:min(len(b), MaxRaw-len(p.head))]...)
	}
}

// endLine parses the buffered line and resets for the next one.
func (p *Parser) endLine(out []Event) []Event {
	if p.dropping {
		raw := p.head
		if len(raw) == p.size {
			raw = bytes.TrimRight(raw, "\r") // as for other lines, when whole
		}
		raw = bytes.Clone(raw)
		p.dropping, p.head = false, nil
		return append(out, p.event(Event{
			Kind: KindInvalid,
			Text: "line of " + strconv.Itoa(p.size) + " bytes dropped: longer than the limit of " +
				strconv.Itoa(p.maxLine) + " bytes",
			Raw: raw,
		}))
	}
	out = p.line(out, p.buf)
	if cap(p.buf) > keepBuf {
		p.buf = nil
	} else {
		p.buf = p.buf[:0]
	}
	return out
}

// event numbers e and fills in the session and model known so far.
func (p *Parser) event(e Event) Event {
	p.seq++
	e.Seq = p.seq
	if e.SessionID == "" {
		e.SessionID = p.sessionID
	}
	if e.Model == "" {
		e.Model = p.model
	}
	return e
}
