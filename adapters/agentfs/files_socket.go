package agentfs

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strconv"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// An upload taken straight from a socket: the agent hands the helper the
// connection the file's bytes arrive on (descriptor 3), and the helper
// moves them into the file with os.File.ReadFrom, which between a TCP or
// unix socket and a file is splice(2): the bytes pass through neither the
// agent nor a pipe of framed writes. Stdin keeps the control, in frames:
// first what the agent read of the bytes before it handed the socket over
// (usually nothing), ended by a zero-length frame; after the socket's end
// of file, a zero-length frame commits, and stdin's end without it is an
// abort (the socket's end alone never commits: a cut connection looks the
// same).

// socketArg, after a write's arguments, says the bytes come on socketFD.
const socketArg = "socket"

// socketFD is the helper's descriptor of the upload's socket (the first
// of exec.Cmd's ExtraFiles).
const socketFD = 3

// fromSocket fills tmp from the socket on socketFD as above.
func fromSocket(tmp *os.File, stdin io.Reader, max int64) error {
	f := os.NewFile(socketFD, "upload")
	if f == nil {
		return fmt.Errorf("%w: no upload socket", errCutShort)
	}
	sock, err := net.FileConn(f)
	_ = f.Close() // FileConn holds a duplicate
	if err != nil {
		return fmt.Errorf("the upload socket: %w", err)
	}
	defer func() { _ = sock.Close() }()
	ctl := bufio.NewReaderSize(stdin, 64<<10)
	early, err := io.Copy(tmp, limit(framesOn(ctl), max))
	if err != nil {
		return err
	}
	// One byte past the maximum tells a file over it.
	room := int64(1<<63 - 1)
	if max > 0 {
		room = max - early + 1
	}
	rest, err := tmp.ReadFrom(&io.LimitedReader{R: sock, N: room})
	if err != nil {
		return err
	}
	if max > 0 && early+rest > max {
		return errTooLarge
	}
	var hdr [4]byte
	if _, err := io.ReadFull(ctl, hdr[:]); err != nil || binary.BigEndian.Uint32(hdr[:]) != 0 {
		return errCutShort
	}
	return nil
}

// CreateFrom is Create for an upload whose bytes arrive on sock, after the
// early ones the caller read from it already. The helper takes sock (the
// caller closes its own copy once this returns); the writer's Commit and
// Abort end the upload as Create's do, and Write is not for it.
func (l *Local) CreateFrom(ctx context.Context, path string, mode fs.FileMode, maxBytes int64, early []byte, sock *os.File) (ports.FileWriter, error) {
	h, err := l.startWith(ctx, true, []*os.File{sock}, "write", path, "0o"+strconv.FormatUint(uint64(mode.Perm()), 8), strconv.FormatInt(maxBytes, 10), socketArg)
	if err != nil {
		return nil, err
	}
	w := &writer{h: h}
	if len(early) > 0 {
		if _, err := w.Write(early); err != nil {
			return w, nil // the helper ended: Commit or Abort says why
		}
	}
	var end [4]byte
	if _, err := h.stdin.Write(end[:]); err != nil {
		_ = w.fail()
	}
	return w, nil
}
