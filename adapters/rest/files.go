package rest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Files on an agent (the README's "Files on an agent"): every body streams
// through ports.AgentFiles, so memory does not grow with a file's size.

// The upload routes take bodies of any size (up to the file maximum) instead
// of MaxBodyBytes, and a read deadline that moves with the data. The
// server hands them to uploadBody once the caller is signed in; a file's
// download is among them for that hand-over only: uploadBody bounds its
// body as any other and notes whether its answer may be spliced
// (files_splice_download.go).
var uploadRoutes = map[string]bool{
	http.MethodPut + " /api/v1/agents/{agent_id}/files/content": true,
	http.MethodPut + " /api/v1/agents/{agent_id}/files/archive": true,
	readFileRoute: true,
}

// readFileRoute is a file's download.
const readFileRoute = http.MethodGet + " /api/v1/agents/{agent_id}/files/content"

// uploadIdle is how long an upload may go without a byte before it is cut.
const uploadIdle = time.Minute

const maxPathLen = 4096

var fileModePattern = regexp.MustCompile(`^0?[0-7]{3}$`)

// uploadBody is an upload's body: bounded by the file maximum, with a read
// deadline pushed back on every read, so a slow upload lives and a stalled
// one does not.
func (s *Server) uploadBody(w *statusWriter, r *http.Request) (io.ReadCloser, *apiError) {
	if r.Method != http.MethodPut {
		spliceDownload(w, r)
		return http.MaxBytesReader(w, r.Body, MaxBodyBytes), nil
	}
	if r.ContentLength > s.maxFileBytes() {
		return nil, tooLarge(r.ContentLength, s.maxFileBytes())
	}
	if b := s.spliceUpload(w, r); b != nil {
		return b, nil
	}
	rc := http.NewResponseController(w)
	body := http.MaxBytesReader(w, r.Body, s.maxFileBytes())
	return &deadlineBody{ReadCloser: body, push: func() { _ = rc.SetReadDeadline(time.Now().Add(uploadIdle)) }}, nil
}

type deadlineBody struct {
	io.ReadCloser
	push func()
	err  error // the body's own failure (the client's), first one
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	b.push()
	n, err := b.ReadCloser.Read(p)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		err = fmt.Errorf("%w: the upload is over the maximum of %d bytes", ports.ErrFileTooLarge, tooBig.Limit)
	case errors.Is(err, io.ErrUnexpectedEOF):
		// Cut short of its Content-Length: not an end of file.
		err = errUploadCut
	}
	if err != nil && !errors.Is(err, io.EOF) && b.err == nil {
		b.err = err
	}
	return n, err
}

func (b *deadlineBody) failure() error { return b.err }

// uploadFailed is the answer to an upload whose body failed on the
// client's side (cut short, idle too long): the client's fault explains
// the failure better than what it caused further on (a transfer given up).
func uploadFailed(body io.Reader) *apiError {
	f, ok := body.(interface{ failure() error })
	if !ok || f.failure() == nil {
		return nil
	}
	err := f.failure()
	if errors.Is(err, ports.ErrFileTooLarge) {
		return nil // fileError's, as the agent's
	}
	return badRequest("reading the upload: %v", err)
}

func (s *Server) maxFileBytes() int64 {
	if s.d.MaxFileBytes > 0 {
		return s.d.MaxFileBytes
	}
	return 16 << 30
}

func tooLarge(n, limit int64) *apiError {
	return newError(http.StatusRequestEntityTooLarge, "file_too_large", "%d bytes is over the maximum of %d (AGENTIC_FILE_MAX_BYTES)", n, limit)
}

// fileError maps an AgentFiles error; subject names the path.
func fileError(err error, agentID, path string) *apiError {
	subject := fmt.Sprintf("agent %q: %s", agentID, clip(path))
	switch {
	case errors.Is(err, ports.ErrFileNotFound):
		return newError(http.StatusNotFound, "file_not_found", "%s: %v", subject, err)
	case errors.Is(err, ports.ErrPermissionDenied):
		return newError(http.StatusForbidden, "permission_denied", "%s: %v", subject, err)
	case errors.Is(err, ports.ErrInvalidPath):
		return newError(http.StatusBadRequest, "invalid_path", "%s: %v", subject, err)
	case errors.Is(err, ports.ErrFileTooLarge):
		return newError(http.StatusRequestEntityTooLarge, "file_too_large", "%s: %v", subject, err)
	case errors.Is(err, ports.ErrDirectoryNotEmpty):
		return newError(http.StatusConflict, "directory_not_empty", "%s: %v (delete with recursive=true)", subject, err)
	case errors.Is(err, ports.ErrTooManyTransfers):
		return newError(http.StatusTooManyRequests, "too_many_transfers", "%s: %v", subject, err)
	case errors.Is(err, ports.ErrAgentGone):
		return newError(http.StatusBadGateway, "agent_gone", "%s: %v", subject, err)
	}
	return portError(err, fmt.Sprintf("agent %q", agentID))
}

// filesAt is the agents' files for a request about path, or the refusal:
// this server moves no files, or path is not one any agent could have.
func (s *Server) filesAt(path string) (ports.AgentFiles, error) {
	if s.d.Files == nil {
		return nil, newError(http.StatusConflict, "not_supported", "this server moves no files")
	}
	if path == "" || len(path) > maxPathLen || strings.ContainsRune(path, 0) {
		return nil, newError(http.StatusBadRequest, "invalid_path", "path must be 1 to %d bytes with no NUL", maxPathLen)
	}
	return s.d.Files, nil
}

// ListFiles implements restapi.StrictServerInterface.
func (s *Server) ListFiles(ctx context.Context, req restapi.ListFilesRequestObject) (restapi.ListFilesResponseObject, error) {
	f, err := s.filesAt(req.Params.Path)
	if err != nil {
		return nil, err
	}
	l, err := f.ListFiles(ctx, req.AgentId, req.Params.Path)
	if err != nil {
		return nil, fileError(err, req.AgentId, req.Params.Path)
	}
	out := restapi.ListFiles200JSONResponse{Path: l.Path, Entries: make([]restapi.FileEntry, 0, len(l.Entries))}
	if l.Truncated {
		out.Truncated = &l.Truncated
	}
	for _, e := range l.Entries {
		fe := restapi.FileEntry{
			Name: e.Name, Type: restapi.FileEntryType(e.Type), Size: e.Size,
			Mode: fmt.Sprintf("%04o", agentwire.UnixMode(e.Mode)), Mtime: e.ModTime.UTC(),
		}
		if e.LinkTarget != "" {
			fe.LinkTarget = &e.LinkTarget
		}
		out.Entries = append(out.Entries, fe)
	}
	return out, nil
}

// DeleteFile implements restapi.StrictServerInterface.
func (s *Server) DeleteFile(ctx context.Context, req restapi.DeleteFileRequestObject) (restapi.DeleteFileResponseObject, error) {
	f, err := s.filesAt(req.Params.Path)
	if err != nil {
		return nil, err
	}
	recursive := req.Params.Recursive != nil && *req.Params.Recursive
	if err := f.DeleteFile(ctx, req.AgentId, req.Params.Path, recursive); err != nil {
		return nil, fileError(err, req.AgentId, req.Params.Path)
	}
	return restapi.DeleteFile204Response{}, nil
}

// ReadFile implements restapi.StrictServerInterface.
func (s *Server) ReadFile(ctx context.Context, req restapi.ReadFileRequestObject) (restapi.ReadFileResponseObject, error) {
	f, err := s.filesAt(req.Params.Path)
	if err != nil {
		return nil, err
	}
	r, err := f.ReadFile(ctx, req.AgentId, req.Params.Path)
	if err != nil {
		return nil, fileError(err, req.AgentId, req.Params.Path)
	}
	return fileDownload{r: r, body: download(ctx, r)}, nil
}

// ReadArchive implements restapi.StrictServerInterface.
func (s *Server) ReadArchive(ctx context.Context, req restapi.ReadArchiveRequestObject) (restapi.ReadArchiveResponseObject, error) {
	f, err := s.filesAt(req.Params.Path)
	if err != nil {
		return nil, err
	}
	r, err := f.ReadArchive(ctx, req.AgentId, req.Params.Path)
	if err != nil {
		return nil, fileError(err, req.AgentId, req.Params.Path)
	}
	return restapi.ReadArchive200ApplicationxTarResponse{Body: download(ctx, r)}, nil
}

// download closes r when the request ends, and turns an error in the middle
// of the bytes into an aborted response (see responseError): ended normally,
// a cut archive would look complete.
func download(ctx context.Context, r ports.FileReader) io.Reader {
	context.AfterFunc(ctx, func() { _ = r.Close() })
	return &downloadBody{r: r}
}

// downloadBody holds the last byte of a file of known size back until
// the reader's clean end, so that a download the agent ends with an error
// after its bytes (the file changed meanwhile) is cut short of its
// Content-Length, not answered whole.
type downloadBody struct {
	r       ports.FileReader
	got     int64
	last    byte
	holding bool
}

func (d *downloadBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := d.r.Read(p)
	d.got += int64(n)
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		_ = d.r.Close()
		return 0, &streamBroken{err}
	case d.holding && n > 0:
		_ = d.r.Close()
		return 0, &streamBroken{fmt.Errorf("%w: more than the file's %d bytes", ports.ErrAgentGone, d.r.Size())}
	case err == nil && n > 0 && d.got == d.r.Size():
		d.last, d.holding = p[n-1], true
		return n - 1, nil
	case err != nil && d.holding:
		// The clean end: the file was whole.
		d.holding = false
		p[0] = d.last
		return 1, io.EOF
	}
	return n, err
}

// downloadChunk is the size of the writes WriteTo makes: io.Copy into the
// ResponseWriter would read 32 KiB at a time, each a read of the agent's
// stream and a chunk of the answer.
const downloadChunk = 256 << 10

var downloadBufs = sync.Pool{New: func() any { return new([downloadChunk]byte) }}

// WriteTo copies the download to w in large writes, through Read (so the
// last byte is held back the same way).
func (d *downloadBody) WriteTo(w io.Writer) (int64, error) {
	buf := downloadBufs.Get().(*[downloadChunk]byte)
	defer downloadBufs.Put(buf)
	var total int64
	for {
		n, err := d.Read(buf[:])
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				_ = d.r.Close()
				return total, werr
			}
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// streamBroken is an error after the answer's status went out: the only
// honest thing left is to abort the response.
type streamBroken struct{ err error }

func (e *streamBroken) Error() string { return "transfer cut short: " + e.err.Error() }
func (e *streamBroken) Unwrap() error { return e.err }

// WriteFile implements restapi.StrictServerInterface.
func (s *Server) WriteFile(ctx context.Context, req restapi.WriteFileRequestObject) (restapi.WriteFileResponseObject, error) {
	f, err := s.filesAt(req.Params.Path)
	if err != nil {
		return nil, err
	}
	mode := fs.FileMode(0o644)
	if req.Params.Mode != nil {
		if !fileModePattern.MatchString(*req.Params.Mode) {
			return nil, badRequest("parameter mode: want octal permission bits like 0644, got %q", clip(*req.Params.Mode))
		}
		m, _ := strconv.ParseUint(*req.Params.Mode, 8, 32)
		mode = fs.FileMode(m)
	}
	if err := f.WriteFile(ctx, req.AgentId, req.Params.Path, mode, req.Body); err != nil {
		if e := uploadFailed(req.Body); e != nil {
			return nil, e
		}
		return nil, fileError(err, req.AgentId, req.Params.Path)
	}
	return restapi.WriteFile204Response{}, nil
}

// WriteArchive implements restapi.StrictServerInterface.
func (s *Server) WriteArchive(ctx context.Context, req restapi.WriteArchiveRequestObject) (restapi.WriteArchiveResponseObject, error) {
	f, err := s.filesAt(req.Params.Path)
	if err != nil {
		return nil, err
	}
	if err := f.WriteArchive(ctx, req.AgentId, req.Params.Path, req.Body); err != nil {
		if e := uploadFailed(req.Body); e != nil {
			return nil, e
		}
		return nil, fileError(err, req.AgentId, req.Params.Path)
	}
	return restapi.WriteArchive204Response{}, nil
}
