package agentrpc

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A write's bytes on a connection of the agent's own: an agent that can
// open plain connections to this server GETs DataPath + the transfer id
// with an HTTP/1.1 upgrade to DataRawProtocol, and after the 101 the
// connection carries the bytes raw, up to the server's half-close. The
// server copies the upload's body into it with io.Copy: when the body is
// the REST client's socket (adapters/rest's spliced uploads), that is
// splice(2) from socket to socket, and on the agent's side the file
// helper splices the connection into the file. The route's checks are the
// data route's (the agent's id and secret, the transfer's agent, its
// direction, once); the Transfer stream keeps the control: eof after the
// half-close commits, an abort or a connection closed early keeps
// nothing.

// DataRawProtocol is the upgrade of a write's or a read's data connection
// (a read's: files_raw_read.go).
const DataRawProtocol = agentwire.DataRawProtocol

// serveDataRaw takes over an agent's connection for the write or read t,
// which it has claimed, and keeps it until the transfer is done with it.
func serveDataRaw(w http.ResponseWriter, t *transfer) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "cannot take the connection over", http.StatusInternalServerError)
		return
	}
	defer func() { _ = conn.Close() }()
	if brw.Reader.Buffered() > 0 {
		// Bytes before the 101: not an agent of ours.
		_, _ = io.WriteString(conn, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
		return
	}
	// The listener's header and idle bounds are for requests; the upload
	// is bounded by its client's and the transfer's.
	_ = conn.SetDeadline(time.Time{})
	const switched = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + DataRawProtocol + "\r\n\r\n"
	d := &dataConn{raw: conn, done: make(chan struct{})}
	if t.upload {
		// The 101 first: the write's bytes follow it.
		if _, err := io.WriteString(conn, switched); err != nil {
			return
		}
		t.data <- d // room for one, and the route is claimed once
	} else {
		// A read: the agent says ready only after the 101, and by then
		// the connection waits in t.data, where read looks for it.
		d.body = conn
		t.data <- d
		if _, err := io.WriteString(conn, switched); err != nil {
			d.finish(false)
		}
	}
	select {
	case <-d.done:
	case <-t.done:
	}
	if d.ok.Load() && t.upload {
		// Half-closed after the last byte: open until the agent has
		// read them all and ended the transfer.
		<-t.done
	}
}

// sendRaw copies a write's body into its data connection, half-closes
// it, then says eof on the Transfer stream; agentEnded as sendBody's.
// The agent's end, or ctx's, while the bytes move closes the connection
// and the body, which ends the copy.
func (s *Service) sendRaw(ctx context.Context, d *dataConn, stream transferServerStream, body io.Reader, ended <-chan error) (agentEnded bool, err error) {
	stop := make(chan struct{})
	var (
		watched  sync.WaitGroup
		endedErr error
		gotEnd   bool
	)
	watched.Add(1)
	go func() {
		defer watched.Done()
		select {
		case endedErr = <-ended:
			gotEnd = true
		case <-ctx.Done():
		case <-stop:
			return
		}
		d.finish(false)
		if c, ok := body.(io.Closer); ok {
			_ = c.Close()
		}
	}()
	n, cerr := io.Copy(d.raw, body)
	close(stop)
	watched.Wait()
	switch {
	case gotEnd:
		if endedErr == nil {
			endedErr = fmt.Errorf("%w: the agent ended the upload early", ports.ErrAgentGone)
		}
		return true, endedErr
	case ctx.Err() != nil:
		return false, ctx.Err()
	case cerr != nil:
		d.finish(false)
		return false, fmt.Errorf("%w: the data connection broke: %v", ports.ErrAgentGone, cerr)
	case n > s.cfg.MaxFileBytes:
		d.finish(false)
		return false, fmt.Errorf("%w: over the maximum of %d bytes", ports.ErrFileTooLarge, s.cfg.MaxFileBytes)
	}
	if err := closeWrite(d.raw); err != nil {
		d.finish(false)
		return false, fmt.Errorf("%w: the data connection broke: %v", ports.ErrAgentGone, err)
	}
	d.finish(true)
	if err := stream.Send(&sandboxv1.TransferResponse{Payload: &sandboxv1.TransferResponse_Eof{Eof: true}}); err != nil {
		return false, agentGone(err)
	}
	return false, nil
}
