// Package hitl turns raw PTY output into what a person would read on the
// terminal, and decides from it when a session is waiting for a human: a
// prompt-looking last line followed by a quiet period.
//
// It is pure: no I/O, no goroutines, no clock. Callers pass time in and
// serialise access to a Tail or Detector.
package hitl

import "unicode/utf8"

// Limits of the terminal model. The width and height of the real terminal are
// unknown here, so these only bound memory and mimic a generous screen.
const (
	windowRows = 48   // rows that cursor movement can still reach and rewrite
	lineCap    = 1000 // runes per row before it wraps, as a terminal would at its width
	maxString  = 64 << 10
	maxParams  = 16
	maxParam   = 9999
)

type parseState uint8

const (
	stGround    parseState = iota
	stEsc                  // after ESC
	stEscInter             // ESC and intermediate bytes, waiting for the final byte
	stCSI                  // ESC [ parameters, waiting for the final byte
	stString               // OSC, DCS, SOS, PM, APC body, until BEL or ESC \
	stStringEsc            // ESC seen inside a string: ST if '\' follows
)

// screen is a small terminal model: printable text lands in rows at a cursor,
// controls and CSI sequences move the cursor or erase, everything else is
// dropped. It is fed byte by byte, so a sequence or a UTF-8 rune cut between
// two writes simply continues in the next one; the parser state is the
// carry-over.
//
// Rows above the window are flushed to out and can no longer change, which
// keeps memory bounded like a terminal's fixed height does.
type screen struct {
	out     []byte // flushed rows, each ending in '\n', trailing blanks trimmed
	limit   int    // > 0: out keeps only about its last limit bytes
	rows    [][]rune
	row     int
	col     int
	flushed int64 // rows moved to out so far: a row's identity is flushed+index

	savedRow int64
	savedCol int

	st      parseState
	utf     [utf8.UTFMax]byte
	nutf    int
	params  [maxParams]int
	nparams int
	private bool // CSI with a '<' '=' '>' '?' marker: a mode, never text
	inter   bool // CSI with intermediate bytes: not one we model
	strLen  int
}

func (s *screen) init() {
	if len(s.rows) == 0 {
		s.rows = [][]rune{nil}
		s.row, s.col = 0, 0
	}
}

func (s *screen) write(p []byte) {
	s.init()
	for _, c := range p {
		s.byte(c)
	}
}

func (s *screen) byte(c byte) {
	switch s.st {
	case stGround:
		s.ground(c)
	case stEsc:
		s.esc(c)
	case stEscInter:
		switch {
		case c >= 0x20 && c <= 0x2f:
		case c >= 0x30 && c <= 0x7e:
			s.st = stGround
		case c == 0x1b:
			s.st = stEsc
		default:
			s.st = stGround
			s.ground(c)
		}
	case stCSI:
		s.csiByte(c)
	case stString:
		switch c {
		case 0x07, 0x18, 0x1a: // BEL ends an OSC; CAN and SUB abort any string
			s.st = stGround
		case 0x1b:
			s.st = stStringEsc
		default:
			// A string that never ends would swallow all later output.
			s.strLen++
			if s.strLen > maxString {
				s.st = stGround
			}
		}
	case stStringEsc:
		if c == '\\' {
			s.st = stGround
			return
		}
		// ESC not followed by '\' aborts the string and starts a new sequence.
		s.st = stEsc
		s.esc(c)
	}
}

func (s *screen) ground(c byte) {
	if s.nutf > 0 {
		if c&0xc0 == 0x80 {
			s.utf[s.nutf] = c
			s.nutf++
			if utf8.FullRune(s.utf[:s.nutf]) {
				r, size := utf8.DecodeRune(s.utf[:s.nutf])
				ok := size == s.nutf
				s.nutf = 0
				if ok {
					s.rune(r)
				}
			}
			return
		}
		// A rune cut short by something else is invalid: drop it.
		s.nutf = 0
	}
	switch {
	case c == 0x1b:
		s.st = stEsc
	case c == '\n':
		s.newline()
	case c == '\r':
		s.col = 0
	case c == '\b':
		s.backspace()
	case c == '\t':
		s.put('\t')
	case c < 0x20 || c == 0x7f:
	case c < 0x80:
		s.put(rune(c))
	case c >= 0xc2 && c <= 0xf4:
		s.utf[0] = c
		s.nutf = 1
	}
}

func (s *screen) rune(r rune) {
	if r >= 0x80 && r < 0xa0 { // C1 controls encoded as UTF-8 are not text
		return
	}
	s.put(r)
}

func (s *screen) esc(c byte) {
	s.st = stGround
	switch {
	case c == '[':
		s.st = stCSI
		s.params = [maxParams]int{}
		s.nparams = 1
		s.private, s.inter = false, false
	case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
		s.st = stString
		s.strLen = 0
	case c >= 0x20 && c <= 0x2f:
		s.st = stEscInter
	case c == 'E': // NEL
		s.newline()
	case c == 'D': // IND: down one row, same column
		col := s.col
		s.newline()
		s.col = col
	case c == 'M': // RI
		s.up(1)
	case c == '7':
		s.save()
	case c == '8':
		s.restore()
	case c == 'c': // RIS
		s.clearScreen()
		s.col = 0
	case c >= 0x30 && c <= 0x7e:
		// Any other two-byte sequence (keypad modes, charsets…) shows nothing.
	case c == 0x1b:
		s.st = stEsc
	default:
		s.ground(c)
	}
}

func (s *screen) csiByte(c byte) {
	switch {
	case c >= '0' && c <= '9':
		p := &s.params[s.nparams-1]
		if *p < maxParam {
			*p = *p*10 + int(c-'0')
		}
	case c == ';' || c == ':':
		if s.nparams < maxParams {
			s.nparams++
		}
	case c >= '<' && c <= '?':
		s.private = true
	case c >= 0x20 && c <= 0x2f:
		s.inter = true
	case c >= 0x40 && c <= 0x7e:
		s.st = stGround
		if !s.private && !s.inter {
			s.csi(c)
		}
	case c == 0x1b:
		s.st = stEsc
	case c == 0x18 || c == 0x1a:
		s.st = stGround
	case c < 0x20:
		// Terminals execute controls found inside a CSI sequence.
		s.ground(c)
	case c == 0x7f:
	default:
		// Not part of any CSI: the sequence was malformed, show what follows.
		s.st = stGround
		s.ground(c)
	}
}

// param returns parameter i, with 0 or a missing one meaning def.
func (s *screen) param(i, def int) int {
	if i < s.nparams && s.params[i] > 0 {
		return s.params[i]
	}
	return def
}

func (s *screen) csi(final byte) {
	n := s.param(0, 1)
	switch final {
	case 'A':
		s.up(n)
	case 'B':
		s.down(n)
	case 'C':
		s.setCol(s.col + n)
	case 'D':
		s.setCol(s.col - n)
	case 'E':
		s.down(n)
		s.col = 0
	case 'F':
		s.up(n)
		s.col = 0
	case 'G', '`':
		s.setCol(n - 1)
	case 'H', 'f':
		s.home(s.param(1, 1) - 1)
	case 'd':
		s.home(s.col)
	case 'K':
		s.eraseLine(s.param(0, 0))
	case 'J':
		s.eraseScreen(s.param(0, 0))
	case 'P':
		s.deleteChars(n)
	case '@':
		s.insertChars(n)
	case 'X':
		s.eraseChars(n)
	case 'L':
		s.insertRows(n)
	case 'M':
		s.deleteRows(n)
	case 's':
		s.save()
	case 'u':
		s.restore()
	}
	// Everything else (SGR colours, modes, scroll regions, reports) shows nothing.
}

func (s *screen) setCol(c int) {
	s.col = max(0, min(c, lineCap))
}

func (s *screen) up(n int) {
	s.row = max(0, s.row-n)
}

// down stops at the last row, as a terminal stops at its bottom margin.
func (s *screen) down(n int) {
	s.row = min(len(s.rows)-1, s.row+min(n, windowRows))
}

// home handles absolute positioning (CUP, VPA). Without the terminal's height
// the target row cannot be found, so it goes to a fresh row at the bottom:
// full-screen redraws then read as a list of lines instead of a jumble.
func (s *screen) home(col int) {
	s.row = len(s.rows) - 1
	if len(s.rows[s.row]) > 0 {
		s.newline()
	}
	s.setCol(col)
}

func (s *screen) put(r rune) {
	if s.col >= lineCap {
		s.newline()
	}
	line := s.rows[s.row]
	if s.col < len(line) {
		line[s.col] = r
	} else {
		for len(line) < s.col {
			line = append(line, ' ')
		}
		line = append(line, r)
	}
	s.rows[s.row] = line
	s.col++
}

// backspace moves left; at the end of the line it also erases, so "ab\b"
// reads "a" the way "\b \b" from a line editor looks.
func (s *screen) backspace() {
	if s.col == 0 {
		return
	}
	s.col--
	if line := s.rows[s.row]; s.col == len(line)-1 {
		s.rows[s.row] = line[:s.col]
	}
}

func (s *screen) newline() {
	s.col = 0
	if s.row < len(s.rows)-1 {
		s.row++
		return
	}
	var next []rune
	if len(s.rows) >= windowRows {
		next = s.flushTop()[:0]
	}
	s.rows = append(s.rows, next)
	s.row++
}

// flushTop moves the top row to out and returns it for reuse.
func (s *screen) flushTop() []rune {
	top := s.rows[0]
	s.out = utf8AppendRunes(s.out, trimBlank(top))
	s.out = append(s.out, '\n')
	copy(s.rows, s.rows[1:])
	s.rows = s.rows[:len(s.rows)-1]
	s.row--
	s.flushed++
	s.trimOut()
	return top
}

func (s *screen) trimOut() {
	if s.limit > 0 && len(s.out) > 2*s.limit {
		s.out = append(s.out[:0], cutTail(s.out, s.limit)...)
	}
}

func (s *screen) eraseLine(mode int) {
	line := s.rows[s.row]
	switch mode {
	case 0:
		if s.col < len(line) {
			s.rows[s.row] = line[:s.col]
		}
	case 1:
		for i := 0; i <= s.col && i < len(line); i++ {
			line[i] = ' '
		}
	case 2:
		s.rows[s.row] = line[:0]
	}
}

func (s *screen) eraseScreen(mode int) {
	switch mode {
	case 0:
		s.eraseLine(0)
		s.rows = s.rows[:s.row+1]
	case 1:
		for i := 0; i < s.row; i++ {
			s.rows[i] = s.rows[i][:0]
		}
		s.eraseLine(1)
	case 2:
		s.clearScreen()
	}
	// Mode 3 clears the scrollback, which the tail keeps on purpose.
}

// clearScreen keeps what was shown as history, like a terminal's scrollback,
// and starts an empty window.
func (s *screen) clearScreen() {
	last := -1
	for i, r := range s.rows {
		if len(trimBlank(r)) > 0 {
			last = i
		}
	}
	for i := 0; i <= last; i++ {
		s.out = utf8AppendRunes(s.out, trimBlank(s.rows[i]))
		s.out = append(s.out, '\n')
	}
	s.trimOut()
	s.flushed += int64(len(s.rows))
	s.rows = append(s.rows[:0], nil)
	s.row = 0
}

func (s *screen) deleteChars(n int) {
	line := s.rows[s.row]
	if s.col >= len(line) {
		return
	}
	end := min(len(line), s.col+n)
	s.rows[s.row] = append(line[:s.col], line[end:]...)
}

func (s *screen) insertChars(n int) {
	line := s.rows[s.row]
	if s.col >= len(line) {
		return
	}
	n = min(n, lineCap-s.col)
	tail := append([]rune(nil), line[s.col:]...)
	line = line[:s.col]
	for range n {
		line = append(line, ' ')
	}
	line = append(line, tail...)
	s.rows[s.row] = line[:min(len(line), lineCap)]
}

func (s *screen) eraseChars(n int) {
	line := s.rows[s.row]
	for i := s.col; i < len(line) && i < s.col+n; i++ {
		line[i] = ' '
	}
}

func (s *screen) insertRows(n int) {
	n = min(n, windowRows)
	blank := make([][]rune, n)
	s.rows = append(s.rows[:s.row], append(blank, s.rows[s.row:]...)...)
	// Rows pushed past the bottom are lost, as on a terminal.
	if len(s.rows) > windowRows {
		s.rows = s.rows[:max(windowRows, s.row+1)]
	}
	s.col = 0
}

func (s *screen) deleteRows(n int) {
	end := min(len(s.rows), s.row+n)
	s.rows = append(s.rows[:s.row], s.rows[end:]...)
	if len(s.rows) == 0 {
		s.rows = append(s.rows, nil)
	}
	s.row = min(s.row, len(s.rows)-1)
	s.col = 0
}

func (s *screen) save() {
	s.savedRow, s.savedCol = s.flushed+int64(s.row), s.col
}

func (s *screen) restore() {
	r := s.savedRow - s.flushed
	s.row = int(max(0, min(r, int64(len(s.rows)-1))))
	s.col = s.savedCol
}

// render appends the whole text: flushed rows, then the window. Finished rows
// lose trailing blanks (cursor padding, erased cells); the last row keeps
// them, since more text may follow on it.
func (s *screen) render(dst []byte) []byte {
	dst = append(dst, s.out...)
	for i, r := range s.rows {
		if i == len(s.rows)-1 {
			dst = utf8AppendRunes(dst, r)
			break
		}
		dst = utf8AppendRunes(dst, trimBlank(r))
		dst = append(dst, '\n')
	}
	return dst
}

// absRow is the identity of window row i, stable while the row is rewritten
// in place and different for a row printed later.
func (s *screen) absRow(i int) int64 { return s.flushed + int64(i) }

func trimBlank(r []rune) []rune {
	for len(r) > 0 && (r[len(r)-1] == ' ' || r[len(r)-1] == '\t') {
		r = r[:len(r)-1]
	}
	return r
}

func utf8AppendRunes(dst []byte, rs []rune) []byte {
	for _, r := range rs {
		dst = utf8.AppendRune(dst, r)
	}
	return dst
}

// cutTail returns the last n bytes of b or fewer, never starting inside a rune.
func cutTail(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	i := len(b) - n
	for i < len(b) && !utf8.RuneStart(b[i]) {
		i++
	}
	return b[i:]
}

// StripANSI returns b as a terminal would show it, as plain text: escape
// sequences (CSI, OSC, DCS, two-byte ESC) are removed, "\r" returns to the
// line start so later text overwrites it ("50%\r100%" is "100%"), "\r\n" is a
// newline, backspace erases, erase-line and cursor moves within a line are
// applied, invalid UTF-8 and other control characters are dropped; "\n" and
// "\t" are kept. Finished lines lose trailing blanks.
//
// It starts from a fresh terminal each call, so for a stream cut into chunks
// use a Tail, which carries state between writes.
func StripANSI(b []byte) []byte {
	var s screen
	s.write(b)
	return s.render(make([]byte, 0, len(b)))
}
