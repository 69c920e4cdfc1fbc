package agentd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A data-plane read on a connection of the agent's own (agentrpc's
// files_raw_read.go), the mirror of writeRaw: where the agent can open
// plain connections to the server, it GETs the read's data route with the
// upgrade to agentwire.DataRawProtocol before it says ready, and hands
// that socket to the file helper, which sends the file on it with
// sendfile(2) and ends it. The Transfer stream keeps the control: ready
// with the size, then the end, clean only when the helper found the file
// unchanged once it had sent it. A server from before raw reads answers
// the upgrade 404 without claiming the route: the read goes on the HTTP/2
// data stream then, as before.

// socketReads is a file system that sends a read, or an archive, to a
// socket (agentfs.Local).
type socketReads interface {
	OpenTo(ctx context.Context, path string, sock *os.File) (ports.FileReader, error)
	OpenArchiveTo(ctx context.Context, dir string, sock *os.File) (ports.FileReader, error)
}

// openTo is how a raw read opens its path: OpenTo or OpenArchiveTo.
type openTo func(ctx context.Context, path string, sock *os.File) (ports.FileReader, error)

// rawReads reports whether reads go on plain connections of their own.
func (a *Agent) rawReads() (socketReads, bool) {
	sr, ok := a.cfg.Files.(socketReads)
	if !ok || !a.plainConnections() {
		return nil, false
	}
	return sr, true
}

// readRaw serves a data-plane READ or READ_ARCHIVE on a connection of its
// own, opened with open; handled is false when the server would not take
// one (nothing claimed: the caller reads as before). An archive's size is
// unknown (-1): the server reads the connection to its end, and the
// helper's clean end after the tar's own says it is whole.
func (a *Agent) readRaw(ctx context.Context, stream transferStream, req *sandboxv1.FileRequest, open openTo) (handled bool, err error) {
	conn, _, resp, err := a.rawUpgrade(ctx, agentwire.DataPath+url.PathEscape(req.GetTransferId()), agentwire.DataRawProtocol)
	if err != nil {
		return false, nil
	}
	defer func() { _ = conn.Close() }()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	case resp.StatusCode != http.StatusSwitchingProtocols:
		return true, fmt.Errorf("the server refused the data connection: %s", resp.Status)
	case !strings.EqualFold(resp.Header.Get("Upgrade"), agentwire.DataRawProtocol):
		return true, fmt.Errorf("the server switched to %q, not %s", resp.Header.Get("Upgrade"), agentwire.DataRawProtocol)
	}
	_ = conn.SetDeadline(time.Time{})
	fc, ok := conn.(interface{ File() (*os.File, error) })
	if !ok {
		return true, fmt.Errorf("a %T cannot be handed to the file helper", conn)
	}
	sock, err := fc.File()
	if err != nil {
		return true, err
	}
	r, err := open(ctx, req.GetPath(), sock)
	// The helper holds the socket now: its end is the connection's.
	_ = sock.Close()
	_ = conn.Close()
	if err != nil {
		return true, err
	}
	defer r.Close()
	if err := stream.Send(&sandboxv1.TransferRequest{Payload: &sandboxv1.TransferRequest_Ready{Ready: &sandboxv1.TransferReady{Size: r.Size()}}}); err != nil {
		return true, err
	}
	// No bytes come through here: the reader ends with the helper.
	_, err = io.Copy(io.Discard, r)
	return true, err
}
