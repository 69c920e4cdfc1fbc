package rest

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestRing checks the ring against a plain slice holding everything.
func TestRing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, capacity := range []int{1, 3, 16, 1000, 5000} {
		r := ring{max: capacity}
		var all []byte
		for i := range 300 {
			n := rng.IntN(2 * capacity)
			if i%7 == 0 {
				n = rng.IntN(4)
			}
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(rng.IntN(256))
			}
			r.write(p)
			all = append(all, p...)
			held := min(len(all), capacity)
			if r.end != int64(len(all)) || r.start() != int64(len(all)-held) {
				t.Fatalf("max %d: end %d start %d, want %d %d", capacity, r.end, r.start(), len(all), len(all)-held)
			}
			from := rng.Int64N(int64(len(all)) + 2)
			limit := rng.IntN(capacity + 2)
			got, off := r.read(from, limit)
			wantOff := min(max(from, int64(len(all)-held)), int64(len(all)))
			want := all[wantOff:min(int64(len(all)), wantOff+int64(limit))]
			if off != wantOff || !bytes.Equal(got, want) {
				t.Fatalf("max %d read(%d, %d) = %d %x, want %d %x", capacity, from, limit, off, got, wantOff, want)
			}
		}
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]int{
		"INT": 2, "SIGINT": 2, "int": 2, "TERM": 15, "KILL": 9, "HUP": 1, "USR1": 10, "USR2": 12,
		"WINCH": 28, "QUIT": 3, "CONT": 18, "STOP": 19, "1": 1, "64": 64, "RTMIN": 34, "RTMAX": 64,
		"RTMIN+2": 36, "SIGRTMAX-1": 63,
	} {
		if got, ok := parseSignal(in); !ok || got != want {
			t.Errorf("parseSignal(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "0", "65", "-9", "SIGFOO", "RTMIN+31", "RTMAX+1", "RTMIN-1", "RTMIN+x", "SIG"} {
		if got, ok := parseSignal(in); ok {
			t.Errorf("parseSignal(%q) = %d, want an error", in, got)
		}
	}
}

func TestHoldBackPartialRune(t *testing.T) {
	for in, want := range map[string]string{
		"":                  "",
		"abc":               "abc",
		"caf\xc3":           "caf",
		"caf\xc3\xa9":       "caf\xc3\xa9",
		"\xe2\x82":          "\xe2\x82", // only a partial character: returned as is
		"x\xf0\x9f\x98":     "x",
		"x\xf0\x9f\x98\x80": "x\xf0\x9f\x98\x80",
		"\xff":              "\xff",
		"a\x80":             "a\x80",
	} {
		if got := string(holdBackPartialRune([]byte(in))); got != want {
			t.Errorf("holdBackPartialRune(%q) = %q, want %q", in, got, want)
		}
	}
}
