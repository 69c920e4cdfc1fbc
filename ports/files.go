package ports

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"time"
)

// Errors of file operations on an agent; each is wrapped with the agent's
// own words (which file, what the system said).
var (
	ErrFileNotFound      = errors.New("file not found")
	ErrPermissionDenied  = errors.New("permission denied")
	ErrInvalidPath       = errors.New("invalid path")
	ErrFileTooLarge      = errors.New("file too large")
	ErrDirectoryNotEmpty = errors.New("directory not empty")
	ErrTooManyTransfers  = errors.New("too many file transfers in flight for this agent")
)

// FileType is what a directory entry is.
type FileType string

// The types of directory entries; FileTypeOther is a device node, FIFO or socket.
const (
	FileTypeFile    FileType = "file"
	FileTypeDir     FileType = "dir"
	FileTypeSymlink FileType = "symlink"
	FileTypeOther   FileType = "other"
)

// FileEntry is one entry of a listing.
type FileEntry struct {
	Name string
	Type FileType
	Size int64
	// Mode holds the permission bits and setuid, setgid and sticky.
	Mode       fs.FileMode
	ModTime    time.Time
	LinkTarget string
}

// FileListing is a directory's entries, or the one entry of anything else.
type FileListing struct {
	// Path is the absolute path listed.
	Path      string
	Entries   []FileEntry
	Truncated bool
}

// MaxListedEntries bounds one listing, so that a directory of millions of
// files answers with a bounded message.
const MaxListedEntries = 10000

// FileReader streams a file or an archive. Read returns the error that
// ended a transfer early (never a clean io.EOF for a cut transfer); Close
// ends the transfer, finished or not.
type FileReader interface {
	io.ReadCloser
	// Size is a regular file's size when the read began; -1 for an archive.
	Size() int64
}

// AgentFiles moves files to and from the filesystem where a connected agent
// runs, as the user its commands run as. A relative path is relative to the
// directory the agent's commands start in. Errors are the ones above, or
// ErrAgentNotFound, ErrAgentNotConnected and ErrAgentGone.
type AgentFiles interface {
	ListFiles(ctx context.Context, agentID, path string) (FileListing, error)
	// ReadFile answers once the agent has opened the file (so a missing file
	// is an error here, not in the middle of the bytes).
	ReadFile(ctx context.Context, agentID, path string) (FileReader, error)
	// WriteFile streams r to path; the file appears under its name only when
	// every byte has arrived.
	WriteFile(ctx context.Context, agentID, path string, mode fs.FileMode, r io.Reader) error
	DeleteFile(ctx context.Context, agentID, path string, recursive bool) error
	// ReadArchive streams the tree at dir as tar.
	ReadArchive(ctx context.Context, agentID, dir string) (FileReader, error)
	// WriteArchive extracts the tar (or gzipped tar) r under dir; a refused
	// entry refuses all and nothing is written.
	WriteArchive(ctx context.Context, agentID, dir string, r io.Reader) error
}

// FileSystem is an agent's side of AgentFiles: the files where it runs,
// reached as the user its commands run as.
type FileSystem interface {
	List(ctx context.Context, path string) (FileListing, error)
	// Open opens a regular file for reading.
	Open(ctx context.Context, path string) (FileReader, error)
	// Create starts writing path; nothing appears under its name before Commit.
	Create(ctx context.Context, path string, mode fs.FileMode, maxBytes int64) (FileWriter, error)
	Delete(ctx context.Context, path string, recursive bool) error
	OpenArchive(ctx context.Context, dir string) (FileReader, error)
	// CreateArchive starts receiving a tar to extract under dir at Commit.
	CreateArchive(ctx context.Context, dir string, maxBytes int64) (FileWriter, error)
}

// FileWriter receives the bytes of a file or an archive.
type FileWriter interface {
	io.Writer
	// Commit says every byte has been written and returns the outcome.
	Commit() error
	// Abort discards what was written; nothing is left under the final name.
	Abort()
}
