package agentwire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A PTY session's bytes on a connection of its own (Registration.session_raw):
// the agent upgrades a GET of OutputPath+id+"/pty" (HeaderOutputOffset,
// HeaderOutputConnection, signed in) to SessionRawProtocol. From there the
// agent's side carries the PTY output as raw bytes from that offset, as the
// POST body of the output data plane would, and ends it by half-closing;
// the server's side carries the session's input as frames:
//
//	'I' | epoch length (1 byte) | epoch | offset (8 bytes) | length (4 bytes) | data   input
//	'E' | the same                                                            input, then its end
//	'Z'                                                                       the server took the output's end
//
// offset and epoch are a StdinChunk's: the agent places the input exactly as
// one that came on the Connect stream, and acknowledges it there (StdinAck).
const SessionRawProtocol = "agentic-session"

// Session frame kinds.
const (
	SessionFrameInput    = 'I'
	SessionFrameInputEOF = 'E'
	SessionFrameEnd      = 'Z'
)

// maxSessionFrame bounds one input frame's data (a write beyond the
// window is refused before it is framed).
const maxSessionFrame = StdinWindow

// SessionInput is one input frame.
type SessionInput struct {
	Epoch  string
	Offset uint64
	Data   []byte
	EOF    bool
}

// AppendSessionInput appends in's frame to b.
func AppendSessionInput(b []byte, in SessionInput) []byte {
	kind := byte(SessionFrameInput)
	if in.EOF {
		kind = SessionFrameInputEOF
	}
	b = append(b, kind, byte(len(in.Epoch))) //nolint:gosec // an epoch is 24 characters (agentrpc newEpoch)
	b = append(b, in.Epoch...)
	b = binary.BigEndian.AppendUint64(b, in.Offset)
	b = binary.BigEndian.AppendUint32(b, uint32(len(in.Data))) //nolint:gosec // bounded by the window
	return append(b, in.Data...)
}

// ErrSessionFrame: the server's side of a session connection is not frames.
var ErrSessionFrame = errors.New("not a session frame")

// ReadSessionFrame reads the next frame: an input, or end (the server
// took the output's end).
func ReadSessionFrame(r *bufio.Reader) (in SessionInput, end bool, err error) {
	kind, err := r.ReadByte()
	if err != nil {
		return in, false, err
	}
	switch kind {
	case SessionFrameEnd:
		return in, true, nil
	case SessionFrameInput, SessionFrameInputEOF:
	default:
		return in, false, fmt.Errorf("%w: kind %q", ErrSessionFrame, kind)
	}
	in.EOF = kind == SessionFrameInputEOF
	n, err := r.ReadByte()
	if err != nil {
		return in, false, noEOF(err)
	}
	var head [255 + 12]byte
	if _, err := io.ReadFull(r, head[:int(n)+12]); err != nil {
		return in, false, noEOF(err)
	}
	in.Epoch = string(head[:n])
	in.Offset = binary.BigEndian.Uint64(head[n:])
	size := binary.BigEndian.Uint32(head[int(n)+8:])
	if size > maxSessionFrame {
		return in, false, fmt.Errorf("%w: %d bytes of input in one frame", ErrSessionFrame, size)
	}
	in.Data = make([]byte, size)
	if _, err := io.ReadFull(r, in.Data); err != nil {
		return in, false, noEOF(err)
	}
	return in, false, nil
}

// noEOF: a frame cut short is an error, not a clean end.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
