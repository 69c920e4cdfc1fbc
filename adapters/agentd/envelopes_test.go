package agentd

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

func envelope(msg string) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// writesReader returns one write per Read, as an io.Pipe does.
type writesReader struct{ writes [][]byte }

func (w *writesReader) Read(p []byte) (int, error) {
	if len(w.writes) == 0 {
		return 0, io.EOF
	}
	n := copy(p, w.writes[0])
	if w.writes[0] = w.writes[0][n:]; len(w.writes[0]) == 0 {
		w.writes = w.writes[1:]
	}
	return n, nil
}

func (w *writesReader) Close() error { return nil }

// connect's two writes per message (prefix, then message) come out as one
// read per whole message; a small read buffer still gets every byte in
// order; an empty message is a message.
func TestEnvelopeBodyReadsWholeMessages(t *testing.T) {
	msgs := []string{"hello", "", "a longer message of output", "x"}
	var writes [][]byte
	var all []byte
	for _, m := range msgs {
		e := envelope(m)
		writes = append(writes, e[:5], e[5:])
		all = append(all, e...)
	}
	body := &envelopeBody{body: &writesReader{writes: writes}}
	buf := make([]byte, 1024)
	for i, m := range msgs {
		n, err := body.Read(buf)
		if err != nil || !bytes.Equal(buf[:n], envelope(m)) {
			t.Fatalf("read %d: %q, %v; want the whole envelope of %q", i, buf[:n], err, m)
		}
	}
	if n, err := body.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after the last: %d, %v", n, err)
	}

	// Three bytes at a time: nothing lost or reordered.
	body = &envelopeBody{body: &writesReader{writes: [][]byte{all}}}
	var got []byte
	small := make([]byte, 3)
	for {
		n, err := body.Read(small)
		got = append(got, small[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, all) {
		t.Fatalf("got %q, want %q", got, all)
	}
}
