package agentwire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

// Every frame a server writes reads back as written, and a stream cut in
// the middle of a frame is an error, never a clean end.
func TestSessionFramesReadBackAsWritten(t *testing.T) {
	ins := []SessionInput{
		{Epoch: "e1", Offset: 0, Data: []byte("ls\r")},
		{Epoch: "", Offset: 1 << 40, Data: nil},
		{Epoch: "epoch-of-twenty-four-ch", Offset: 7, Data: bytes.Repeat([]byte{0xff}, 300), EOF: true},
	}
	var wire []byte
	for _, in := range ins {
		wire = AppendSessionInput(wire, in)
	}
	wire = append(wire, SessionFrameEnd)
	r := bufio.NewReader(bytes.NewReader(wire))
	for i, want := range ins {
		got, end, err := ReadSessionFrame(r)
		if err != nil || end || got.Epoch != want.Epoch || got.Offset != want.Offset || got.EOF != want.EOF || !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("frame %d: %+v end=%v err=%v; want %+v", i, got, end, err, want)
		}
	}
	if _, end, err := ReadSessionFrame(r); !end || err != nil {
		t.Fatalf("the end frame: end=%v err=%v", end, err)
	}
	for cut := 1; cut < len(wire)-1; cut++ {
		r := bufio.NewReader(bytes.NewReader(wire[:cut]))
		for {
			_, end, err := ReadSessionFrame(r)
			if end {
				t.Fatalf("cut at %d: read an end that was not sent", cut)
			}
			if err != nil {
				if errors.Is(err, io.EOF) && !atFrameStart(wire, cut) {
					t.Fatalf("cut at %d, inside a frame: a clean EOF", cut)
				}
				break
			}
		}
	}
	if _, _, err := ReadSessionFrame(bufio.NewReader(bytes.NewReader([]byte("X")))); !errors.Is(err, ErrSessionFrame) {
		t.Fatalf("an unknown kind: %v", err)
	}
	big := AppendSessionInput(nil, SessionInput{Data: make([]byte, maxSessionFrame+1)})
	if _, _, err := ReadSessionFrame(bufio.NewReader(bytes.NewReader(big))); !errors.Is(err, ErrSessionFrame) {
		t.Fatalf("a frame over the bound: %v", err)
	}
}

// atFrameStart reports whether offset cut of wire falls between frames.
func atFrameStart(wire []byte, cut int) bool {
	r := bufio.NewReader(bytes.NewReader(wire))
	pos := 0
	for pos < cut {
		in, end, err := ReadSessionFrame(r)
		if err != nil || end {
			return false
		}
		pos += len(AppendSessionInput(nil, in))
	}
	return pos == cut
}

// Whatever the bytes, reading frames neither panics nor takes more than a
// frame's bound, and what it reads is exactly the bytes it consumed.
func FuzzReadSessionFrame(f *testing.F) {
	f.Add(AppendSessionInput(nil, SessionInput{Epoch: "e", Offset: 3, Data: []byte("a")}))
	f.Add([]byte{SessionFrameEnd})
	f.Add([]byte{SessionFrameInput, 255})
	f.Add([]byte{SessionFrameInputEOF, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, wire []byte) {
		r := bufio.NewReader(bytes.NewReader(wire))
		consumed := 0
		for {
			in, end, err := ReadSessionFrame(r)
			if err != nil {
				return
			}
			if end {
				consumed++
				if wire[consumed-1] != SessionFrameEnd {
					t.Fatalf("an end read from %q", wire[consumed-1])
				}
				continue
			}
			frame := AppendSessionInput(nil, in)
			if !bytes.Equal(frame, wire[consumed:consumed+len(frame)]) {
				t.Fatalf("frame %+v re-encodes to %x, read from %x", in, frame, wire[consumed:consumed+len(frame)])
			}
			consumed += len(frame)
		}
	})
}
