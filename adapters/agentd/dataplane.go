package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The file data plane (agentrpc's dataplane.go): when the server asks for
// it (FileRequest.data_plane), a file's bytes are the raw body of one more
// HTTP/2 stream on the files' connection, agentwire.DataPath + the
// transfer id: POSTed for a read, fetched by GET for a write. The Transfer
// stream keeps the control.

// postFrom sends a read: ready with the size on the Transfer stream, then
// the bytes as a POST's body. A read error cuts the POST (a reset, which
// the server takes for an error, never an end) and is the transfer's end.
func (a *Agent) postFrom(ctx context.Context, stream transferStream, r ports.FileReader, id string) error {
	defer r.Close()
	if err := stream.Send(&sandboxv1.TransferRequest{Payload: &sandboxv1.TransferRequest_Ready{Ready: &sandboxv1.TransferReady{Size: r.Size()}}}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body := &readErr{r: r}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.serverBase+agentwire.DataPath+url.PathEscape(id), body)
	if err != nil {
		return err
	}
	// No length: a file that changes size while it is read is the
	// server's to notice, as on the Transfer stream.
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/octet-stream")
	a.signIn(req.Header)
	resp, err := a.serverHTTP.Do(req) //nolint:gosec // G704: the management server's data route only
	if body.err != nil {
		return body.err
	}
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("the server refused the data stream: %s", resp.Status)
	}
	return nil
}

// readErr remembers the error of the file's read, so that it, not the
// POST's, is the transfer's end.
type readErr struct {
	r   io.Reader
	err error
}

func (b *readErr) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.err = err
	}
	return n, err
}

// getInto receives a write: the bytes from a GET's body, then the
// server's eof on the Transfer stream, and only then commits. A body that
// breaks, or an abort, keeps nothing.
func (a *Agent) getInto(ctx context.Context, stream transferStream, w ports.FileWriter, id string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.serverBase+agentwire.DataPath+url.PathEscape(id), nil)
	if err != nil {
		w.Abort()
		return err
	}
	a.signIn(req.Header)
	resp, err := a.serverHTTP.Do(req) //nolint:gosec // G704: the management server's data route only
	if err != nil {
		w.Abort()
		return err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		w.Abort()
		return fmt.Errorf("the server refused the data stream: %s", resp.Status)
	}
	return receiveData(stream, w, resp.Body)
}

// writeErr remembers the error of the file's write.
type writeErr struct {
	w   io.Writer
	err error
}

func (d *writeErr) Write(p []byte) (int, error) {
	n, err := d.w.Write(p)
	if err != nil {
		d.err = err
	}
	return n, err
}
