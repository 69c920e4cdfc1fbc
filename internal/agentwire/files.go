package agentwire

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var fileErrors = []struct {
	err  error
	code sandboxv1.FileError
}{
	{ports.ErrFileNotFound, sandboxv1.FileError_FILE_ERROR_NOT_FOUND},
	{ports.ErrPermissionDenied, sandboxv1.FileError_FILE_ERROR_PERMISSION_DENIED},
	{ports.ErrInvalidPath, sandboxv1.FileError_FILE_ERROR_INVALID_PATH},
	{ports.ErrFileTooLarge, sandboxv1.FileError_FILE_ERROR_TOO_LARGE},
	{ports.ErrDirectoryNotEmpty, sandboxv1.FileError_FILE_ERROR_NOT_EMPTY},
}

// FileErrorToProto is the code of a file operation's error (FAILED for one
// that is none of the typed ones).
func FileErrorToProto(err error) sandboxv1.FileError {
	for _, fe := range fileErrors {
		if errors.Is(err, fe.err) {
			return fe.code
		}
	}
	return sandboxv1.FileError_FILE_ERROR_FAILED
}

// FileErrorFromProto is the error of a TransferEnd; nil for success.
func FileErrorFromProto(end *sandboxv1.TransferEnd) error {
	if end.GetError() == sandboxv1.FileError_FILE_ERROR_UNSPECIFIED {
		return nil
	}
	msg := clipMessage(end.GetMessage())
	for _, fe := range fileErrors {
		if fe.code == end.GetError() {
			return WrapFileError(fe.err, msg)
		}
	}
	return errors.New(msg)
}

// WrapFileError is base with the words of whoever reported it, said once
// ("file not found: open /x: no such file", not "file not found: file not
// found: …").
func WrapFileError(base error, msg string) error {
	if rest, ok := strings.CutPrefix(msg, base.Error()); ok {
		return fmt.Errorf("%w%s", base, rest)
	}
	return fmt.Errorf("%w: %s", base, msg)
}

// clipMessage bounds what an agent's words may add to an error.
func clipMessage(s string) string {
	const n = 1000
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

var fileTypes = map[ports.FileType]sandboxv1.FileType{
	ports.FileTypeFile:    sandboxv1.FileType_FILE_TYPE_FILE,
	ports.FileTypeDir:     sandboxv1.FileType_FILE_TYPE_DIR,
	ports.FileTypeSymlink: sandboxv1.FileType_FILE_TYPE_SYMLINK,
	ports.FileTypeOther:   sandboxv1.FileType_FILE_TYPE_OTHER,
}

// ListingToProto splits a listing into messages of at most batch entries
// (always at least one message).
func ListingToProto(l ports.FileListing, batch int) []*sandboxv1.FileListing {
	var out []*sandboxv1.FileListing
	cur := &sandboxv1.FileListing{Path: l.Path, Truncated: l.Truncated}
	for _, e := range l.Entries {
		if len(cur.Entries) == batch {
			out = append(out, cur)
			cur = &sandboxv1.FileListing{Path: l.Path, Truncated: l.Truncated}
		}
		cur.Entries = append(cur.Entries, &sandboxv1.FileEntry{
			Name: e.Name, Type: fileTypes[e.Type], Size: e.Size, Mode: UnixMode(e.Mode),
			Mtime: timestamppb.New(e.ModTime), LinkTarget: e.LinkTarget,
		})
	}
	return append(out, cur)
}

// AddListing adds one listing message to l.
func AddListing(l *ports.FileListing, m *sandboxv1.FileListing) {
	l.Path = m.GetPath()
	l.Truncated = l.Truncated || m.GetTruncated()
	for _, e := range m.GetEntries() {
		l.Entries = append(l.Entries, ports.FileEntry{
			Name: e.GetName(), Type: keyOf(fileTypes, e.GetType(), ports.FileTypeOther), Size: e.GetSize(),
			Mode:    FromUnixMode(e.GetMode()),
			ModTime: e.GetMtime().AsTime(), LinkTarget: e.GetLinkTarget(),
		})
	}
}

// The special bits as Unix numbers them, and as Go does.
var specialBits = []struct {
	unix uint32
	mode fs.FileMode
}{{0o4000, fs.ModeSetuid}, {0o2000, fs.ModeSetgid}, {0o1000, fs.ModeSticky}}

// UnixMode is m's permission and special bits as Unix numbers them (04755).
func UnixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	for _, b := range specialBits {
		if m&b.mode != 0 {
			u |= b.unix
		}
	}
	return u
}

// FromUnixMode reverses UnixMode, keeping nothing but those bits.
func FromUnixMode(u uint32) fs.FileMode {
	m := fs.FileMode(u) & fs.ModePerm
	for _, b := range specialBits {
		if u&b.unix != 0 {
			m |= b.mode
		}
	}
	return m
}
