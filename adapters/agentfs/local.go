package agentfs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/runas"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Local is ports.FileSystem through helper processes.
type Local struct {
	exe  string
	cred *syscall.Credential
	dir  string
	env  []string
}

var _ ports.FileSystem = (*Local)(nil)

// New returns the file system of an agent whose binary is exe and whose
// commands run as runAs ("" for the agent's own user, in its own working
// directory).
func New(exe, runAs string) (*Local, error) {
	l := &Local{exe: exe}
	if runAs != "" {
		cred, u, err := runas.Credential(runAs)
		if err != nil {
			return nil, err
		}
		l.cred, l.dir = cred, runas.Dir(u)
		l.env = []string{"HOME=" + u.HomeDir}
	} else if wd, err := os.Getwd(); err == nil {
		l.dir = wd
	}
	// Where tarsafe spools an archive: the commands' temporary directory.
	if t := os.Getenv("TMPDIR"); t != "" {
		l.env = append(l.env, "TMPDIR="+t)
	}
	l.env = append(l.env, "PATH=/usr/bin:/bin")
	return l, nil
}

// Dir is the directory relative paths start from.
func (l *Local) Dir() string { return l.dir }

// helper is one running helper process.
type helper struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	status *bufio.Reader
	stderr io.ReadCloser

	waitOnce sync.Once
	waitErr  error
	stop     func() bool
}

// maxStatusLine bounds what is read of one status line: the helper runs as
// the workload's user, and what it says is not trusted.
const maxStatusLine = 64 << 10

func (l *Local) start(ctx context.Context, withStdin bool, args ...string) (*helper, error) {
	return l.startWith(ctx, withStdin, nil, args...)
}

// startWith starts a helper that gets extra as its descriptors 3 and on.
func (l *Local) startWith(ctx context.Context, withStdin bool, extra []*os.File, args ...string) (*helper, error) {
	cmd := exec.Command(l.exe, append([]string{HelperArg}, args...)...) //nolint:gosec // our own binary
	cmd.Dir = l.dir
	cmd.ExtraFiles = extra
	cmd.Env = l.env
	// SIGTERM when the agent dies: a helper writing a file ignores it and
	// ends on its input's end instead, removing its temporary file.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: l.cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	h := &helper{cmd: cmd}
	var err error
	if withStdin {
		if h.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	if h.stdout, err = cmd.StdoutPipe(); err != nil {
		return nil, err
	}
	if h.stderr, err = cmd.StderrPipe(); err != nil {
		return nil, err
	}
	h.status = bufio.NewReaderSize(h.stderr, 4096)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the file helper: %w", err)
	}
	h.stop = context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	return h, nil
}

// readStatus reads the next status line; a helper that ended without one
// failed (killed, or crashed).
func (h *helper) readStatus() status {
	line, err := readLine(h.status, maxStatusLine)
	if err != nil {
		werr := h.wait()
		return status{Error: codeFailed, Message: fmt.Sprintf("the file helper ended without an answer (%v)", werr)}
	}
	var st status
	if json.Unmarshal(line, &st) != nil || (!st.Ready && !st.Done && st.Error == "") {
		return status{Error: codeFailed, Message: "the file helper said: " + string(clip(line))}
	}
	return st
}

func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if err == nil {
			return bytes.TrimSpace(line), nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) || len(line) > max {
			return nil, err
		}
	}
}

func clip(b []byte) []byte {
	if len(b) > 500 {
		return b[:500]
	}
	return b
}

func (h *helper) wait() error {
	h.waitOnce.Do(func() {
		if h.stdin != nil {
			h.stdin.Close()
		}
		// Drain what the helper may still write, so Wait does not block on it.
		go func() { _, _ = io.Copy(io.Discard, h.stdout) }()
		_, _ = io.Copy(io.Discard, h.status)
		h.waitErr = h.cmd.Wait()
		h.stop()
	})
	return h.waitErr
}

func (h *helper) kill() {
	_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
	_ = h.wait()
}

// finish reads the final status and reaps the helper.
func (h *helper) finish() error {
	st := h.readStatus()
	_ = h.wait()
	return statusError(st)
}

// statusError turns a status into the port's error.
func statusError(st status) error {
	var base error
	switch st.Error {
	case "":
		return nil
	case codeNotFound:
		base = ports.ErrFileNotFound
	case codeDenied:
		base = ports.ErrPermissionDenied
	case codeInvalid:
		base = ports.ErrInvalidPath
	case codeTooLarge:
		base = ports.ErrFileTooLarge
	case codeNotEmpty:
		base = ports.ErrDirectoryNotEmpty
	default:
		return errors.New(st.Message)
	}
	return agentwire.WrapFileError(base, st.Message)
}

// List implements ports.FileSystem.
func (l *Local) List(ctx context.Context, path string) (ports.FileListing, error) {
	h, err := l.start(ctx, false, "list", path)
	if err != nil {
		return ports.FileListing{}, err
	}
	// A listing is at most MaxListedEntries entries of bounded size.
	body, rerr := io.ReadAll(io.LimitReader(h.stdout, 64<<20))
	if err := h.finish(); err != nil {
		return ports.FileListing{}, err
	}
	if rerr != nil {
		return ports.FileListing{}, rerr
	}
	var wl wireListing
	if err := json.Unmarshal(body, &wl); err != nil {
		return ports.FileListing{}, fmt.Errorf("the file helper's listing: %w", err)
	}
	out := ports.FileListing{Path: wl.Path, Truncated: wl.Truncated, Entries: make([]ports.FileEntry, 0, len(wl.Entries))}
	for _, e := range wl.Entries {
		out.Entries = append(out.Entries, ports.FileEntry{
			Name: e.Name, Type: ports.FileType(e.Type), Size: e.Size, Mode: fs.FileMode(e.Mode), ModTime: e.MTime, LinkTarget: e.Link,
		})
	}
	return out, nil
}

// Open implements ports.FileSystem.
func (l *Local) Open(ctx context.Context, path string) (ports.FileReader, error) {
	return l.open(ctx, "read", path)
}

// OpenArchive implements ports.FileSystem.
func (l *Local) OpenArchive(ctx context.Context, dir string) (ports.FileReader, error) {
	return l.open(ctx, "read-archive", dir)
}

// OpenTo is Open for a read whose bytes the helper sends to sock itself
// (files_socket.go); the caller closes its own copy of sock once this
// returns. The reader's Read gives no bytes: its end, once the helper is
// done, says whether all of the file went out unchanged.
func (l *Local) OpenTo(ctx context.Context, path string, sock *os.File) (ports.FileReader, error) {
	return l.openWith(ctx, []*os.File{sock}, "read", path, socketArg)
}

func (l *Local) open(ctx context.Context, op, path string) (ports.FileReader, error) {
	return l.openWith(ctx, nil, op, path)
}

func (l *Local) openWith(ctx context.Context, extra []*os.File, args ...string) (ports.FileReader, error) {
	h, err := l.startWith(ctx, false, extra, args...)
	if err != nil {
		return nil, err
	}
	st := h.readStatus()
	if !st.Ready {
		_ = h.wait()
		if err := statusError(st); err != nil {
			return nil, err
		}
		return nil, errors.New("the file helper did not open the file")
	}
	return &reader{h: h, size: st.Size}, nil
}

type reader struct {
	h    *helper
	size int64
	end  error
}

func (r *reader) Size() int64 { return r.size }

func (r *reader) Read(p []byte) (int, error) {
	if r.end != nil {
		return 0, r.end
	}
	n, err := r.h.stdout.Read(p)
	if errors.Is(err, io.EOF) {
		// The helper says whether that was all, or where it failed.
		r.end = io.EOF
		if ferr := r.h.finish(); ferr != nil {
			r.end = ferr
		}
		return n, r.end
	}
	return n, err
}

func (r *reader) Close() error {
	if r.end == nil {
		r.end = errors.New("closed")
		r.h.kill()
	}
	return nil
}

// Create implements ports.FileSystem.
func (l *Local) Create(ctx context.Context, path string, mode fs.FileMode, maxBytes int64) (ports.FileWriter, error) {
	return l.create(ctx, "write", path, "0o"+strconv.FormatUint(uint64(mode.Perm()), 8), strconv.FormatInt(maxBytes, 10))
}

// CreateArchive implements ports.FileSystem.
func (l *Local) CreateArchive(ctx context.Context, dir string, maxBytes int64) (ports.FileWriter, error) {
	return l.create(ctx, "write-archive", dir, strconv.FormatInt(maxBytes, 10))
}

func (l *Local) create(ctx context.Context, op string, args ...string) (ports.FileWriter, error) {
	h, err := l.start(ctx, true, append([]string{op}, args...)...)
	if err != nil {
		return nil, err
	}
	return &writer{h: h}, nil
}

type writer struct {
	h       *helper
	done    bool
	err     error
	failure error
}

func (w *writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, w.err
	}
	written := 0
	for len(p) > 0 {
		n := min(len(p), maxFrame)
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], uint32(n)) //nolint:gosec // n <= maxFrame
		if _, err := w.h.stdin.Write(hdr[:]); err != nil {
			return written, w.fail()
		}
		if _, err := w.h.stdin.Write(p[:n]); err != nil {
			return written, w.fail()
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// fail is a write the helper did not take: it ended, and says why.
func (w *writer) fail() error {
	w.done = true
	w.err = w.h.finish()
	if w.err == nil {
		w.err = errors.New("the file helper ended before the upload did")
	}
	return w.err
}

func (w *writer) Commit() error {
	if w.done {
		return w.err
	}
	w.done = true
	var end [4]byte
	if _, err := w.h.stdin.Write(end[:]); err != nil {
		w.err = w.h.finish()
		return w.err
	}
	w.h.stdin.Close()
	w.err = w.h.finish()
	return w.err
}

// Abort ends the helper's input without the end frame: it removes its
// temporary file and exits. A helper that does not is killed.
func (w *writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.err = errors.New("aborted")
	w.h.stdin.Close()
	t := time.AfterFunc(10*time.Second, func() { _ = syscall.Kill(-w.h.cmd.Process.Pid, syscall.SIGKILL) })
	st := w.h.readStatus()
	_ = w.h.wait()
	t.Stop()
	if st.Error != "" && st.Error != codeCutShort {
		w.failure = statusError(st)
	}
}

// Failure is why the helper of an aborted upload ended, when it failed on
// its own before the abort (an upload from a socket learns of it only
// so); nil when it ended because of the abort.
func (w *writer) Failure() error { return w.failure }

// Delete implements ports.FileSystem.
func (l *Local) Delete(ctx context.Context, path string, recursive bool) error {
	rec := "0"
	if recursive {
		rec = "1"
	}
	h, err := l.start(ctx, false, "delete", path, rec)
	if err != nil {
		return err
	}
	return h.finish()
}
