package hitl

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var fuzzSeeds = []string{
	"",
	"50%\r100%\r\n",
	"\x1b[1;31mred\x1b[0m \x1b]0;title\x07ok\r\n",
	"\x1b]8;;https://x.dev\x1b\\link\x1b]8;;\x1b\\ 日本 🎉",
	"one\ntwo\x1b[1A\r\x1b[2KONE\x1b[1B\r\nProceed? [y/N] ",
	"\x1bP1$r0m\x1b\\a\x1b(Bb\x1b7c\x1b8d\x1b[5;1He\x1b[2Jf\x1b[3L\x1b[2M\x1b[4@\x1b[2P\x1b[3X",
	"abc\b\b\x1b[99C\x1b[99Dx\xe2\x9c",
	"\xff\xfe\xc3\x28\xed\xa0\x80\xf4\x90\x80\x80",
	"│ ❯ 1. Yes │\r\n│   2. No  │\r\n╰─────────╯\r\nEsc to cancel",
}

func FuzzStripANSI(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out := StripANSI(in)
		if !utf8.Valid(out) {
			t.Fatalf("invalid UTF-8: %q", out)
		}
		if i := strings.IndexFunc(string(out), func(r rune) bool {
			return (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0)
		}); i >= 0 {
			t.Fatalf("control character at %d: %q", i, out)
		}
		if again := StripANSI(out); string(again) != string(out) {
			t.Fatalf("not idempotent:\n%q\n%q", out, again)
		}
		_ = LooksLikePrompt(string(in))
	})
}

func FuzzTail(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), uint16(64), uint8(3), uint8(7))
	}
	f.Fuzz(func(t *testing.T, in []byte, max uint16, cut1, cut2 uint8) {
		n := int(max%4096) + 1
		a := min(int(cut1), len(in))
		b := min(a+int(cut2), len(in))
		tl := NewTail(n)
		d := NewDetector(0)
		for i, chunk := range [][]byte{in[:a], in[a:b], in[b:]} {
			tl.Write(chunk)
			now := t0.Add(time.Duration(i) * time.Second)
			d.Output(chunk, now)
			if next := d.NextCheck(); !next.IsZero() {
				if _, ok := d.Check(next); !ok {
					t.Fatalf("Check at NextCheck %v did not report", next)
				}
			}
		}
		s := tl.String()
		if len(s) > n || !utf8.ValidString(s) {
			t.Fatalf("String: %d bytes (max %d), valid %v", len(s), n, utf8.ValidString(s))
		}
		if want := string(cutTail(StripANSI(in), n)); s != want {
			t.Fatalf("split writes differ from one StripANSI:\n%q\n%q", s, want)
		}
		for _, l := range []string{tl.LastLine(), tl.CurrentLine()} {
			if !utf8.ValidString(l) || strings.Contains(l, "\n") {
				t.Fatalf("line %q", l)
			}
		}
	})
}
