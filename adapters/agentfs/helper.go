// Package agentfs is an agent's file work (ports.FileSystem): listing,
// reading, writing, deleting and moving trees as tar. Each operation runs in
// a helper process, the agent's own binary started with HelperArg as the
// user the agent's commands run as (AGENT_RUN_AS) and in the directory they
// start in, so a file operation can do exactly what a command could, and no
// more: the agent itself may be root in a container.
//
// The helper speaks over its standard streams: stdin carries upload data in
// frames (a 4-byte big-endian length, then the bytes; a zero length commits,
// and a stream that ends without it is an abort); stdout carries download
// data (or a listing as JSON); stderr carries status lines as JSON: an
// optional {"ready":true,"size":N} once a read has opened its file, then
// one final {"done":true} or {"error":code,"message":…}. A write may take
// its bytes from a socket instead (files_socket.go), stdin keeping the
// commit, and a read may send them to one.
package agentfs

import (
	"bufio"
	"compress/gzip"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/tarsafe"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// HelperArg is the first argument that makes the agent binary a file helper.
const HelperArg = "__agentic-files"

// maxFrame bounds one upload frame; the agent writes at most chunkSize.
const maxFrame = 4 << 20

// status is one line the helper writes to stderr.
type status struct {
	Ready   bool   `json:"ready,omitempty"`
	Size    int64  `json:"size,omitempty"`
	Done    bool   `json:"done,omitempty"`
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

// The error codes of status lines.
const (
	codeNotFound  = "not_found"
	codeDenied    = "permission_denied"
	codeInvalid   = "invalid_path"
	codeTooLarge  = "too_large"
	codeNotEmpty  = "not_empty"
	codeFailed    = "failed"
	codeCutShort  = "cut_short"
	exitHelperErr = 3
)

var (
	errInvalid  = ports.ErrInvalidPath
	errTooLarge = ports.ErrFileTooLarge
	errCutShort = errors.New("the upload ended before all of it arrived")
)

// Serve is the helper's main: args are what follows HelperArg.
func Serve(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	report := func(st status) {
		b, _ := json.Marshal(st)
		_, _ = stderr.Write(append(b, '\n'))
	}
	err := serve(args, stdin, stdout, func(size int64) { report(status{Ready: true, Size: size}) })
	if err != nil {
		report(status{Error: errorCode(err), Message: err.Error()})
		return exitHelperErr
	}
	report(status{Done: true})
	return 0
}

func serve(args []string, stdin io.Reader, stdout io.Writer, ready func(size int64)) error {
	if len(args) < 2 {
		return fmt.Errorf("%w: usage: %s OP PATH [ARGS]", errInvalid, HelperArg)
	}
	op, p := args[0], args[1]
	path, err := cleanPath(p)
	if err != nil {
		return err
	}
	intArg := func(i int) (int64, error) {
		if len(args) <= i {
			return 0, fmt.Errorf("%s: missing argument %d", op, i)
		}
		return strconv.ParseInt(args[i], 0, 64)
	}
	switch op {
	case "list":
		l, err := list(path)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(l)
	case "read":
		if len(args) > 2 && args[2] == socketArg {
			return read(path, ready, toSocket)
		}
		return read(path, ready, func(f *os.File, _ int64) error {
			_, err := io.Copy(stdout, f)
			return err
		})
	case "write":
		// An upload ends by its input (committed or cut short), never by
		// a signal that would leave its temporary file behind.
		signal.Ignore(syscall.SIGTERM)
		mode, err := intArg(2)
		if err != nil {
			return err
		}
		max, err := intArg(3)
		if err != nil {
			return err
		}
		perm := fs.FileMode(mode) & fs.ModePerm //nolint:gosec // permission bits only
		if len(args) > 4 && args[4] == socketArg {
			return write(path, perm, func(tmp *os.File) error { return fromSocket(tmp, stdin, max) })
		}
		return write(path, perm, func(tmp *os.File) error {
			_, err := io.Copy(tmp, limit(frames(stdin), max))
			return err
		})
	case "delete":
		rec, err := intArg(2)
		if err != nil {
			return err
		}
		return remove(path, rec != 0)
	case "read-archive":
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: %s is not a directory", errInvalid, path)
		}
		// What this user cannot read fails here, as a typed error before
		// ready: after ready the caller has answered 200, and an error can
		// only cut the archive short.
		if err := readableDir(path); err != nil {
			return err
		}
		ready(-1)
		if len(args) > 2 && args[2] == socketArg {
			return archiveToSocket(path)
		}
		return tarsafe.Create(stdout, path)
	case "write-archive":
		signal.Ignore(syscall.SIGTERM)
		max, err := intArg(2)
		if err != nil {
			return err
		}
		return writeArchive(path, max, frames(stdin))
	}
	return fmt.Errorf("%w: unknown operation %q", errInvalid, op)
}

// readableDir checks that dir can be archived by this user: it can be
// opened and listed (read permission) and what it holds looked at (search
// permission, tried on its first entry).
// The entry is looked at relative to dir, as tarsafe.Create walks: dir
// may be as long as PATH_MAX allows, and its entries' paths longer.
func readableDir(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	d, err := root.Open(".")
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	names, err := d.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if len(names) > 0 {
		if _, err := root.Lstat(names[0]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// cleanPath makes p absolute against the working directory.
func cleanPath(p string) (string, error) {
	if p == "" || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: empty or with a NUL byte", errInvalid)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errInvalid, err)
	}
	return abs, nil
}

// errorCode sorts an error into the codes a caller can act on.
func errorCode(err error) string {
	switch {
	case errors.Is(err, errCutShort):
		return codeCutShort
	case errors.Is(err, errTooLarge):
		return codeTooLarge
	case errors.Is(err, fs.ErrNotExist):
		return codeNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return codeDenied
	case errors.Is(err, syscall.ENOTEMPTY):
		return codeNotEmpty
	case errors.Is(err, errInvalid), errors.Is(err, tarsafe.ErrRefused), errors.Is(err, syscall.ENOTDIR),
		errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP):
		return codeInvalid
	}
	return codeFailed
}

// wireEntry is a FileEntry as the helper writes it.
type wireEntry struct {
	Name  string    `json:"name"`
	Type  string    `json:"type"`
	Size  int64     `json:"size"`
	Mode  uint32    `json:"mode"`
	MTime time.Time `json:"mtime"`
	Link  string    `json:"link,omitempty"`
}

type wireListing struct {
	Path      string      `json:"path"`
	Entries   []wireEntry `json:"entries"`
	Truncated bool        `json:"truncated,omitempty"`
}

// entryOf is the entry name in a directory; readlink reads a link there.
func entryOf(name string, fi fs.FileInfo, readlink func(string) (string, error)) wireEntry {
	e := wireEntry{Name: name, Size: fi.Size(), Mode: uint32(fi.Mode().Perm() | fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)), MTime: fi.ModTime().UTC()}
	switch m := fi.Mode(); {
	case m.IsRegular():
		e.Type = string(ports.FileTypeFile)
	case m.IsDir():
		e.Type = string(ports.FileTypeDir)
	case m&fs.ModeSymlink != 0:
		e.Type = string(ports.FileTypeSymlink)
		e.Link, _ = readlink(name)
	default:
		e.Type = string(ports.FileTypeOther)
	}
	return e
}

// list follows a symlink named by path itself, as ls does, but lists the
// entries inside a directory as they are.
func list(path string) (wireListing, error) {
	fi, err := os.Stat(path)
	if err != nil {
		lfi, lerr := os.Lstat(path)
		if lerr != nil {
			return wireListing{}, err
		}
		fi = lfi // a dangling symlink is listed as itself
	}
	if !fi.IsDir() {
		lfi, err := os.Lstat(path)
		if err != nil {
			return wireListing{}, err
		}
		readlink := func(string) (string, error) { return os.Readlink(path) }
		return wireListing{Path: path, Entries: []wireEntry{entryOf(filepath.Base(path), lfi, readlink)}}, nil
	}
	// The entries are looked at relative to the directory, never by a
	// path from /: an entry of a directory whose path is near PATH_MAX
	// has a longer one, and is listed all the same.
	root, err := os.OpenRoot(path)
	if err != nil {
		return wireListing{}, err
	}
	defer func() { _ = root.Close() }()
	d, err := root.Open(".")
	if err != nil {
		return wireListing{}, err
	}
	defer d.Close()
	l := wireListing{Path: path, Entries: []wireEntry{}}
	for {
		des, err := d.ReadDir(256)
		for _, de := range des {
			if len(l.Entries) == ports.MaxListedEntries {
				l.Truncated = true
				break
			}
			info, ierr := de.Info()
			if ierr != nil {
				continue // removed while listing
			}
			l.Entries = append(l.Entries, entryOf(de.Name(), info, root.Readlink))
		}
		if l.Truncated || errors.Is(err, io.EOF) || len(des) == 0 {
			break
		}
		if err != nil {
			return wireListing{}, err
		}
	}
	sort.Slice(l.Entries, func(i, j int) bool { return l.Entries[i].Name < l.Entries[j].Name })
	return l, nil
}

// read opens path, says its size, and has send move its bytes; a file
// that changed meanwhile (another size, another modification time) is an
// error, so that what was sent is never taken for the file.
func read(path string, ready func(int64), send func(f *os.File, size int64) error) error {
	// O_NONBLOCK: opening a FIFO must not hang the helper.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%w: %s is a directory (read it as an archive)", errInvalid, path)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", errInvalid, path)
	}
	ready(fi.Size())
	if err := send(f, fi.Size()); err != nil {
		return err
	}
	return unchanged(f, fi)
}

// errChanged is a file that changed while it was read.
var errChanged = errors.New("the file changed while it was read")

// unchanged checks that f, read up to here, is as it was when its read
// began (fi): nothing past this point, the same size and modification time.
func unchanged(f *os.File, fi fs.FileInfo) error {
	var b [1]byte
	if n, _ := f.Read(b[:]); n > 0 {
		return fmt.Errorf("%w: it grew past %d bytes", errChanged, fi.Size())
	}
	now, err := f.Stat()
	if err != nil {
		return err
	}
	if now.Size() != fi.Size() || !now.ModTime().Equal(fi.ModTime()) {
		return fmt.Errorf("%w: %d bytes modified %v, then %d bytes modified %v", errChanged,
			fi.Size(), fi.ModTime().UTC().Format(time.RFC3339Nano), now.Size(), now.ModTime().UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// write puts the bytes under a temporary name beside path and renames it
// over path once all have arrived (an existing symlink is replaced, not
// written through). The temporary file is made and renamed relative to
// the directory: its name is longer than path's, which may be as long as
// PATH_MAX allows.
func write(path string, mode fs.FileMode, fill func(tmp *os.File) error) error {
	if mode == 0 {
		mode = 0o644
	}
	dir, name := filepath.Split(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if fi, err := os.Lstat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%w: %s is a directory", errInvalid, path)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	// The temporary name holds at most 200 bytes of name: a name may be
	// as long as NAME_MAX (255 bytes) allows.
	prefix := name
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	var tmp *os.File
	var tmpName string
	for range 100 {
		tmpName = "." + prefix + ".upload-" + rand.Text()
		tmp, err = root.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			_ = root.Remove(tmpName)
		}
	}()
	if err := fill(tmp); err != nil {
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := root.Rename(tmpName, name); err != nil {
		return err
	}
	committed = true
	return nil
}

func remove(path string, recursive bool) error {
	if path == "/" {
		return fmt.Errorf("%w: refusing to delete /", errInvalid)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() && recursive {
		return os.RemoveAll(path)
	}
	err = os.Remove(path)
	if errors.Is(err, syscall.EEXIST) {
		err = syscall.ENOTEMPTY
	}
	return err
}

// writeArchive extracts a tar, gzipped or not, under dir; tarsafe checks
// every entry before it writes anything.
func writeArchive(dir string, max int64, in io.Reader) (err error) {
	// The directories made here are removed again if the archive is
	// refused: a refused archive leaves nothing behind.
	var made []string
	for p := dir; ; p = filepath.Dir(p) {
		if _, serr := os.Lstat(p); serr == nil || p == filepath.Dir(p) {
			break
		}
		made = append(made, p)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			for _, p := range made {
				_ = os.Remove(p)
			}
		}
	}()
	br := bufio.NewReaderSize(in, 64<<10)
	var r io.Reader = br
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%w: bad gzip: %v", tarsafe.ErrRefused, err)
		}
		r = zr
	}
	return tarsafe.Extract(limit(r, max), dir)
}

// frames reads the upload framing: a zero-length frame is the end; a
// stream that ends before it was cut short.
func frames(r io.Reader) io.Reader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// framesOn reads frames from br up to the next zero-length frame: br may
// go on with more after it.
func framesOn(br *bufio.Reader) io.Reader { return &frameReader{r: br} }

type frameReader struct {
	r    *bufio.Reader
	left uint32
	end  bool
}

func (f *frameReader) Read(p []byte) (int, error) {
	if f.end {
		return 0, io.EOF
	}
	for f.left == 0 {
		var hdr [4]byte
		if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
			return 0, errCutShort
		}
		f.left = binary.BigEndian.Uint32(hdr[:])
		if f.left == 0 {
			f.end = true
			return 0, io.EOF
		}
		if f.left > maxFrame {
			return 0, fmt.Errorf("%w: a frame of %d bytes", errCutShort, f.left)
		}
	}
	if int64(len(p)) > int64(f.left) {
		p = p[:f.left]
	}
	n, err := f.r.Read(p)
	f.left -= uint32(n) //nolint:gosec // n <= len(p) <= f.left
	if err != nil && !errors.Is(err, io.EOF) {
		return n, err
	}
	if err != nil && f.left > 0 {
		return n, errCutShort
	}
	return n, nil
}

// limit fails a read that goes past max bytes (max <= 0: no limit).
func limit(r io.Reader, max int64) io.Reader {
	if max <= 0 {
		return r
	}
	return &limitReader{r: r, left: max}
}

type limitReader struct {
	r    io.Reader
	left int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return n, errTooLarge
	}
	return n, err
}
