package hitl

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStripANSI(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "hello world", "hello world"},
		{"newlines and tabs kept", "a\tb\nc\n", "a\tb\nc\n"},
		{"crlf is a newline", "line1\r\nline2\r\n", "line1\nline2\n"},
		{"colour", "\x1b[1;31mred\x1b[0m and \x1b[38;5;208morange\x1b[m", "red and orange"},
		{"truecolour with colons", "\x1b[38:2:255:0:0mx\x1b[0m", "x"},
		{"private modes", "\x1b[?25l\x1b[?2004hq\x1b[?25h", "q"},
		{"osc title with BEL", "\x1b]0;my title\x07text", "text"},
		{"osc title with ST", "\x1b]2;title\x1b\\text", "text"},
		{"osc hyperlink", "\x1b]8;;https://x.dev\x1b\\link\x1b]8;;\x1b\\", "link"},
		{"dcs", "\x1bP1$r0m\x1b\\ok", "ok"},
		{"two-byte escapes", "\x1b=\x1b>\x1b(Bab", "ab"},
		{"cr overwrites the line start", "50%\r100%", "100%"},
		{"cr overwrites only what it covers", "100%\r50%", "50%%"},
		{"cr then erase line", "Downloading 10%\r\x1b[KDone", "Done"},
		{"erase whole line then cr", "spinner\x1b[2K\rok", "ok"},
		{"erase to line start", "abcdef\x1b[3D\x1b[1K", "    ef"},
		{"trailing cr", "text\r", "text"},
		{"backspace erases", "abc\b\bX", "aX"},
		{"backspace-space-backspace", "abc\b \b", "ab"},
		{"backspace at line start", "\bx", "x"},
		{"cursor forward is a gap", "do\x1b[1Cyou\x1b[2Cwant", "do you  want"},
		{"cursor back then overwrite", "abcd\x1b[2Dxy", "abxy"},
		{"cursor column", "abcdef\x1b[3Gx", "abxdef"},
		{"delete chars", "abcdef\x1b[3D\x1b[2P", "abcf"},
		{"erase chars", "abcdef\x1b[1G\x1b[2X", "  cdef"},
		{"insert chars", "abef\x1b[2D\x1b[2@cd", "abcdef"},
		{"cursor up rewrites a line", "one\ntwo\nthree\x1b[1A\r\x1b[2KTWO\x1b[1B", "one\nTWO\nthree"},
		{"ink style redraw", "frame 1\nfoot\n" + "\x1b[2K\x1b[1A\x1b[2K\x1b[1A\x1b[2K\x1b[G" + "frame 2\nfoot\n", "frame 2\nfoot\n"},
		{"cursor up stops at the top", "a\x1b[99Ab", "ab"},
		{"cursor down stops at the last row", "a\nb\x1b[1A\x1b[99Bc", "a\nbc"},
		{"erase below", "a\nb\nc\x1b[2A\x1b[J", "a"},
		{"clear screen keeps history", "old\n\x1b[2J\x1b[Hnew", "old\nnew"},
		{"absolute position starts a row", "top\x1b[5;1Hbottom", "top\nbottom"},
		{"save and restore cursor", "ab\x1b7\r\nxy\x1b8c", "abc\nxy"},
		{"nel", "a\x1bEb", "a\nb"},
		{"control chars dropped", "a\x00b\x07c\x7fd\x0ee", "abcde"},
		{"utf-8 kept", "héllo ✓ 日本 🎉", "héllo ✓ 日本 🎉"},
		{"utf-8 overwrite by runes", "日本語\r中", "中本語"},
		{"invalid utf-8 dropped", "a\xffb\xc3c\xed\xa0\x80d", "abcd"},
		{"c1 control as utf-8 dropped", "a\u0085b", "ab"},
		{"replacement char kept", "a\uFFFDb", "a\uFFFDb"},
		{"8-bit csi byte dropped", "a\x9b31mb", "a31mb"},
		{"esc cut at end", "abc\x1b", "abc"},
		{"csi cut at end", "abc\x1b[31", "abc"},
		{"osc cut at end", "abc\x1b]0;tit", "abc"},
		{"rune cut at end", "abc\xe2\x9c", "abc"},
		{"esc esc", "a\x1b\x1b[31mb", "ab"},
		{"csi broken by utf-8", "a\x1b[3é", "aé"},
		{"trailing blanks of finished lines trimmed", "a  \nb  ", "a\nb  "},
		{"index keeps the column", "ab\x1bDc", "ab\n  c"},
		{"reverse index", "a\nb\x1bMX", "aX\nb"},
		{"full reset keeps history", "old\x1bcnew", "old\nnew"},
		{"previous and next line", "a\nb\x1b[1Fc\x1b[1Ed", "c\nd"},
		{"line position absolute starts a row", "top\x1b[3dx", "top\n   x"},
		{"csi save and restore", "ab\x1b[s\r\nxy\x1b[uc", "abc\nxy"},
		{"erase above", "a\nb\nc\x1b[1J", "\n\n "},
		{"erase scrollback is ignored", "a\x1b[3Jb", "ab"},
		{"insert and delete rows", "a\nb\x1b[1A\x1b[1Lx\x1b[1B\x1b[1M", "x\nb"},
		{"cancel aborts a sequence", "a\x1b[31\x18b", "ab"},
		{"controls inside csi run", "a\x1b[3\r1mb", "b"},
		{"esc then a control", "a\x1b\nb", "a\nb"},
		{"esc with intermediates", "a\x1b#8b\x1b%Gc\x1b(\x1b[1mX", "abcX"},
		{"string aborted by a new sequence", "a\x1b]0;t\x1b[31mb", "ab"},
		{"unterminated string ends after a bound", "a\x1b]0;" + strings.Repeat("x", maxString-1) + "after", "aafter"},
		{"long line wraps", strings.Repeat("x", lineCap+5), strings.Repeat("x", lineCap) + "\nxxxxx"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(StripANSI([]byte(tc.in))); got != tc.want {
				t.Fatalf("StripANSI(%.300q) = %.300q, want %.300q", tc.in, got, tc.want)
			}
		})
	}
}

// Any split of the input across writes gives the same text as one write.
func TestTailSplitWrites(t *testing.T) {
	inputs := []string{
		"\x1b[1;31mred\x1b[0m \x1b]0;title\x07ok\r\n",
		"\x1b]8;;https://x.dev\x1b\\link\x1b]8;;\x1b\\ 日本 🎉\r50%\r100%\r\n",
		"one\ntwo\x1b[1A\r\x1b[2KONE\x1b[1B\r\nProceed? [y/N] ",
		"\x1bP1$r0m\x1b\\a\x1b(Bb\x1b7c\x1b8d",
	}
	for _, in := range inputs {
		want := string(StripANSI([]byte(in)))
		for cut := 0; cut <= len(in); cut++ {
			for cut2 := cut; cut2 <= len(in); cut2++ {
				tl := NewTail(4096)
				tl.Write([]byte(in[:cut]))
				tl.Write([]byte(in[cut:cut2]))
				tl.Write([]byte(in[cut2:]))
				if got := tl.String(); got != want {
					t.Fatalf("split %d,%d of %q: %q, want %q", cut, cut2, in, got, want)
				}
			}
		}
		// Byte by byte.
		tl := NewTail(4096)
		for i := range len(in) {
			tl.Write([]byte{in[i]})
		}
		if got := tl.String(); got != want {
			t.Fatalf("byte by byte %q: %q, want %q", in, got, want)
		}
	}
}

func TestTail(t *testing.T) {
	tests := []struct {
		name               string
		max                int
		chunks             []string
		str, last, current string
	}{
		{"empty", 100, nil, "", "", ""},
		{"prompt without newline", 100, []string{"build ok\r\n", "Proceed? [y/N] "}, "build ok\nProceed? [y/N] ", "Proceed? [y/N]", "Proceed? [y/N] "},
		{"last line skips blank lines", 100, []string{"result: 3\r\n\r\n   \r\n"}, "result: 3\n\n\n", "result: 3", ""},
		{"split csi", 100, []string{"\x1b[3", "2mgreen\x1b", "[0m"}, "green", "green", "green"},
		{"split osc", 100, []string{"\x1b]0;ti", "tle\x1b", "\\x"}, "x", "x", "x"},
		{"split rune", 100, []string{"\xe2", "\x9c", "\x93 done"}, "✓ done", "✓ done", "✓ done"},
		{"cr across chunks", 100, []string{"50%\r", "100%\r", "\n"}, "100%\n", "100%", ""},
		{"bounded", 10, []string{"0123456789abcdef"}, "6789abcdef", "0123456789abcdef", "0123456789abcdef"},
		{"bounded at a rune start", 5, []string{"aé日本"}, "本", "aé日本", "aé日本"},
		{"zero max means 2048", 0, []string{strings.Repeat("y\n", 2000)}, strings.Repeat("y\n", 1024), "y", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tl := NewTail(tc.max)
			for _, c := range tc.chunks {
				if n, err := tl.Write([]byte(c)); n != len(c) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := tl.String(); got != tc.str {
				t.Errorf("String = %q, want %q", got, tc.str)
			}
			if got := tl.LastLine(); got != tc.last {
				t.Errorf("LastLine = %q, want %q", got, tc.last)
			}
			if got := tl.CurrentLine(); got != tc.current {
				t.Errorf("CurrentLine = %q, want %q", got, tc.current)
			}
		})
	}
}

func TestTailLongOutput(t *testing.T) {
	tl := NewTail(SummaryBytes)
	var all strings.Builder
	for i := range 20000 {
		line := "\x1b[32mline\x1b[0m " + strings.Repeat("é", i%7) + " " + string(rune('a'+i%26)) + "\r\n"
		all.WriteString(line)
		tl.Write([]byte(line))
	}
	got := tl.String()
	if len(got) > SummaryBytes || !utf8.ValidString(got) {
		t.Fatalf("String: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	want := string(cutTail(StripANSI([]byte(all.String())), SummaryBytes))
	if got != want {
		t.Fatalf("tail differs from the end of StripANSI:\n%q\n%q", got, want)
	}
	if cap(tl.s.out) > 8*SummaryBytes {
		t.Fatalf("out grew to %d", cap(tl.s.out))
	}
	// The last line is found in history when the window holds none.
	tl.Write([]byte("\x1b[2J"))
	if got := tl.LastLine(); got != "line "+strings.Repeat("é", 19999%7)+" "+string(rune('a'+19999%26)) {
		t.Fatalf("LastLine after clear = %q", got)
	}
}
