package agentfs

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/agentic-sandbox/agentic-sandbox/internal/tarsafe"
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

// A download sent straight to a socket: the agent hands the helper the
// connection the file's bytes go out on (descriptor 3, after the read's
// arguments socketArg), and the helper sends them with sendfile(2), from
// the page cache to the socket: the bytes pass through neither the agent
// nor a pipe. It sends the size it announced and no more, then says
// whether that was the file (read's unchanged); the socket's end alone
// says nothing, so the server holds the last byte back until the agent's
// clean end (agentrpc's files_raw_read.go).

// downloadSocket is the socket on socketFD.
func downloadSocket() (net.Conn, error) {
	s := os.NewFile(socketFD, "download")
	if s == nil {
		return nil, errors.New("no download socket")
	}
	sock, err := net.FileConn(s)
	_ = s.Close() // FileConn holds a duplicate
	if err != nil {
		return nil, fmt.Errorf("the download socket: %w", err)
	}
	return sock, nil
}

// toSocket sends the first size bytes of f on the socket on socketFD.
func toSocket(f *os.File, size int64) error {
	sock, err := downloadSocket()
	if err != nil {
		return err
	}
	defer func() { _ = sock.Close() }()
	sc, ok := sock.(syscall.Conn)
	if !ok {
		return fmt.Errorf("a %T cannot take sendfile", sock)
	}
	sent, err := sendFile(sc, f, size)
	if err != nil {
		return fmt.Errorf("sending the file: %w", err)
	}
	if sent < size {
		return fmt.Errorf("%w: it ended at %d of %d bytes", errChanged, sent, size)
	}
	return nil
}

// sendFile sends up to n bytes of f, from its offset, to sock with
// sendfile(2), TCP or unix socket alike (net's ReadFrom does it for TCP
// only); fewer at the file's end.
func sendFile(sock syscall.Conn, f *os.File, n int64) (int64, error) {
	rc, err := sock.SyscallConn()
	if err != nil {
		return 0, err
	}
	src := int(f.Fd()) //nolint:gosec // a descriptor fits an int
	var (
		sent int64
		serr error
		eof  bool
	)
	for sent < n && serr == nil && !eof {
		werr := rc.Write(func(fd uintptr) bool {
			m, err := syscall.Sendfile(int(fd), src, nil, int(min(n-sent, 1<<30))) //nolint:gosec // a descriptor fits an int
			switch {
			case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
				return false // wait until the socket takes more
			case err != nil:
				serr = err
			case m == 0:
				eof = true
			default:
				sent += int64(m)
			}
			return true
		})
		if werr != nil && serr == nil {
			serr = werr
		}
	}
	return sent, serr
}

// An archive sent straight to a socket, the same way (after
// read-archive's arguments socketArg): the tar is written on it in large
// writes, with neither the agent nor the HTTP/2 stream's framing on the
// way. The socket's end says nothing: only the helper's clean end (after
// the tar's own end) makes the archive whole, so one that fails midway
// is cut short, never ended as complete.

// archiveWrite is the most the helper writes to the socket at once.
const archiveWrite = 256 << 10

// archiveToSocket writes dir as tar on the socket on socketFD.
func archiveToSocket(dir string) error {
	sock, err := downloadSocket()
	if err != nil {
		return err
	}
	defer func() { _ = sock.Close() }()
	bw := bufio.NewWriterSize(sock, archiveWrite)
	if err := tarsafe.Create(bw, dir); err != nil {
		return err
	}
	return bw.Flush()
}

// OpenArchiveTo is OpenArchive for an archive the helper writes to sock
// itself (see above), as OpenTo is Open's.
func (l *Local) OpenArchiveTo(ctx context.Context, dir string, sock *os.File) (ports.FileReader, error) {
	return l.openWith(ctx, []*os.File{sock}, "read-archive", dir, socketArg)
}
