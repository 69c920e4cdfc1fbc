package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A data-plane write on a connection of the agent's own (agentrpc's
// files_raw.go): where the agent can open plain connections to the server
// (http://, or a unix socket that takes more than one), it GETs the
// write's bytes with an HTTP/1.1 upgrade to agentwire.DataRawProtocol, and
// hands that socket to the file helper, which splices it into the file.
// The server splices the REST client's socket into it: from the client to
// the file, no user-space copy on the way. The Transfer stream keeps the
// control as for an HTTP/2 data stream: the server's eof commits, its
// abort or a broken stream keeps nothing. TLS (the bytes must be
// decrypted), a serial link (one connection) and a file system that
// cannot take a socket keep the HTTP/2 data stream.

// socketFiles is a file system that writes an upload from a socket
// (agentfs.Local).
type socketFiles interface {
	CreateFrom(ctx context.Context, path string, mode fs.FileMode, maxBytes int64, early []byte, sock *os.File) (ports.FileWriter, error)
}

// rawWrites reports whether writes go on plain connections of their own.
func (a *Agent) rawWrites() (socketFiles, bool) {
	sf, ok := a.cfg.Files.(socketFiles)
	if !ok || !a.plainConnections() {
		return nil, false
	}
	return sf, true
}

// plainConnections reports whether the agent can open plain connections of
// its own to the server, which a file helper can take: http://, or a unix
// socket that takes more than one (not TLS, whose bytes must be
// decrypted here, nor a serial link).
func (a *Agent) plainConnections() bool {
	if a.rawDial == nil {
		return false
	}
	u, err := url.Parse(a.cfg.ServerURL)
	return err == nil && (u.Scheme == "http" || u.Scheme == "unix")
}

// writeRaw serves a data-plane WRITE on a connection of its own.
func (a *Agent) writeRaw(ctx context.Context, stream transferStream, req *sandboxv1.FileRequest, sf socketFiles) error {
	mode, limit := fs.FileMode(req.GetMode()).Perm(), req.GetMaxBytes()
	conn, br, resp, err := a.rawUpgrade(ctx, agentwire.DataPath+url.PathEscape(req.GetTransferId()), agentwire.DataRawProtocol,
		"Accept", "application/octet-stream")
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	switch {
	case resp.StatusCode == http.StatusOK:
		// A server from before raw writes answered the GET itself: its
		// body is the bytes, as on the HTTP/2 data stream.
		_ = conn.SetDeadline(time.Time{})
		w, err := a.cfg.Files.Create(ctx, req.GetPath(), mode, limit)
		if err != nil {
			return err
		}
		return receiveData(stream, w, resp.Body)
	case resp.StatusCode != http.StatusSwitchingProtocols:
		_ = resp.Body.Close()
		return fmt.Errorf("the server refused the data connection: %s", resp.Status)
	case !strings.EqualFold(resp.Header.Get("Upgrade"), agentwire.DataRawProtocol):
		return fmt.Errorf("the server switched to %q, not %s", resp.Header.Get("Upgrade"), agentwire.DataRawProtocol)
	}
	_ = conn.SetDeadline(time.Time{})
	// What the answer's reader took past the 101 is the file's first bytes.
	var early []byte
	if n := br.Buffered(); n > 0 {
		early, _ = br.Peek(n)
	}
	fc, ok := conn.(interface{ File() (*os.File, error) })
	if !ok {
		return fmt.Errorf("a %T cannot be handed to the file helper", conn)
	}
	sock, err := fc.File()
	if err != nil {
		return err
	}
	w, err := sf.CreateFrom(ctx, req.GetPath(), mode, limit, early, sock)
	// The helper holds the socket now: when it ends, the server's copy
	// into it fails at once.
	_ = sock.Close()
	_ = conn.Close()
	if err != nil {
		return err
	}
	return awaitEnd(stream, w)
}

// receiveData copies a write's bytes from body, then awaits the server's
// end of it.
func receiveData(stream transferStream, w ports.FileWriter, body io.ReadCloser) error {
	defer body.Close()
	dst := &writeErr{w: w}
	// The file's writer hands each Write to the file helper (a pipe write
	// and its wake-up): the chunks of the Transfer messages, not io.Copy's
	// 32 KiB.
	if _, err := io.CopyBuffer(dst, body, make([]byte, transferChunk)); err != nil {
		w.Abort()
		if dst.err != nil {
			return dst.err // the file's own error: too large, no space
		}
		return err
	}
	return awaitEnd(stream, w)
}

// awaitEnd commits w on the server's eof; its abort, or a stream that
// breaks, keeps nothing.
func awaitEnd(stream transferStream, w ports.FileWriter) error {
	msg, err := stream.Receive()
	if err != nil {
		w.Abort()
		return err
	}
	switch msg.GetPayload().(type) {
	case *sandboxv1.TransferResponse_Eof:
		return w.Commit()
	case *sandboxv1.TransferResponse_Abort:
		w.Abort()
		// A helper that failed (a path it may not write) closed the
		// socket, which is why the server gave up: its reason is the
		// answer.
		if f, ok := w.(interface{ Failure() error }); ok && f.Failure() != nil {
			return f.Failure()
		}
		return errors.New("the server gave up the upload")
	}
	w.Abort()
	return fmt.Errorf("the server answered a data-plane write with %T", msg.GetPayload())
}
