package claudefeed

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func FuzzParser(f *testing.F) {
	data := session(f)
	f.Add(data, uint64(1))
	f.Add([]byte(strings.ReplaceAll(string(data), "\n", "\r\n")), uint64(2))
	f.Add([]byte("\x1b[0m{\"type\":\"user\",\"message\":{\"content\":[{\"type\":\"tool_result\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}]}}\r\nnot json\n{\"type\":\"x\"}"), uint64(3))
	f.Add([]byte(`{"type":"result","subtype":"error_max_turns","is_error":true,"errors":["e"],"num_turns":1e3}`+"\n\n[1]\nnull\n"), uint64(4))
	f.Add([]byte(`{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"Bash","input":{"command":"ls"}},{"type":"thinking","thinking":"é"}]}}`+"\n"), uint64(5))
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		// A small line limit too, so fuzzing reaches the too-long path.
		for _, maxLine := range []int{MaxLine, 64} {
			whole := run(maxLine, in, nil)
			for i, e := range whole {
				if e.Seq != i+1 {
					t.Fatalf("event %d has Seq %d", i, e.Seq)
				}
				if len(e.Text) > MaxText || len(e.Result) > MaxText || len(e.Raw) > MaxRaw || len(e.ToolInput) > MaxToolInput {
					t.Fatalf("event %d over its bounds", i)
				}
			}
			rng := rand.New(rand.NewPCG(seed, uint64(len(in))))
			var cuts []int
			for range rng.IntN(8) {
				cuts = append(cuts, rng.IntN(len(in)+1))
			}
			if split := run(maxLine, in, cuts); !reflect.DeepEqual(split, whole) {
				t.Fatalf("maxLine %d, cuts %v: events differ\nwhole %+v\nsplit %+v", maxLine, cuts, whole, split)
			}
		}
	})
}

// run parses in, cut at the given positions (any order), then flushes.
func run(maxLine int, in []byte, cuts []int) []Event {
	p := NewParser()
	p.maxLine = maxLine
	var evs []Event
	prev := 0
	for _, c := range cuts {
		if c < prev {
			continue
		}
		evs = append(evs, p.Write(in[prev:c])...)
		prev = c
	}
	evs = append(evs, p.Write(in[prev:])...)
	return append(evs, p.Flush()...)
}
