package agentrpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The file data plane: for an agent that registered with file_data_plane,
// a read's or write's bytes do not travel in Transfer messages (a protobuf
// message, a Connect envelope and a copy each per 256 KiB) but as the raw
// body of one more HTTP/2 stream on the same connection: the agent POSTs a
// read's bytes to DataPath+transfer id, or GETs a write's bytes from it.
// The Transfer stream keeps the control: open, ready (with the size), the
// server's eof or abort of a write, and the agent's end with its typed
// error. HTTP/2 flow control paces the data stream per stream, as it paced
// the Transfer stream; a serial link multiplexes it like any other stream.
//
// The route serves only a transfer the server opened for the calling agent
// (its id and secret checked, then its agent id against the transfer's),
// named by an id with 128 random bits in it, once, in the direction of
// the operation; it is gone when the transfer ends. Its bytes count
// against the same bounds (the announced size, the maximum), a data
// stream that breaks is an error never an end of file, and a write is
// committed by the agent only after the clean end of the data stream AND
// the server's eof on the Transfer stream. An agent that can open plain
// connections of its own moves a write's or a read's bytes on one
// instead, raw (files_raw.go, files_raw_read.go).

// DataPath is the data route's prefix; the transfer id follows.
const DataPath = agentwire.DataPath

// dataChunk is the most bytes the server writes to a data stream at once.
const dataChunk = 256 << 10

// dataConn is a transfer's data stream, handed by its handler to the
// transfer's user while the handler waits.
type dataConn struct {
	body io.Reader           // a read's bytes: the agent's POST body, or its raw connection
	w    http.ResponseWriter // a write's bytes: the agent's GET response
	rc   *http.ResponseController
	raw  net.Conn    // or the bytes on a connection of its own (files_raw.go; a read's body then)
	ok   atomic.Bool // set before done: the stream ends cleanly; otherwise it is reset
	done chan struct{}
	once sync.Once
}

// finish lets the handler return: cleanly (ok) or by resetting the stream.
func (d *dataConn) finish(ok bool) {
	d.once.Do(func() {
		d.ok.Store(ok)
		close(d.done)
	})
}

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// claimData hands the data stream of transfer id to agentID: once, only
// for a data-plane transfer of that agent, only in its direction (either,
// for a raw connection, which goes the transfer's way).
func (ts *transfers) claimData(id, agentID string, upload, either bool) *transfer {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.byID[id]
	if t == nil || t.agentID != agentID || !t.dataPlane || (t.upload != upload && !either) || t.dataClaimed {
		return nil
	}
	t.dataClaimed = true
	return t
}

// serveData is the data route: an agent's POST of a read's bytes or GET
// of a write's.
func (s *Service) serveData(w http.ResponseWriter, r *http.Request) {
	id, ok := s.signedIn(w, r)
	if !ok {
		return
	}
	var upload bool
	switch r.Method {
	case http.MethodGet:
		upload = true
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "GET a write's bytes or POST a read's", http.StatusMethodNotAllowed)
		return
	}
	// A GET upgraded to a raw connection carries a write's bytes or a
	// read's (files_raw.go): a server from before raw reads answers a
	// read's 404 and leaves it unclaimed, so the agent falls back to a
	// POST.
	raw := upload && r.ProtoMajor == 1 && headerHas(r.Header, "Upgrade", DataRawProtocol)
	t := s.transfers.claimData(r.PathValue("id"), id, upload, raw)
	if t == nil {
		// Another agent's transfer, one gone, one served already, or none.
		http.Error(w, "no such transfer for this agent", http.StatusNotFound)
		return
	}
	if raw {
		serveDataRaw(w, t)
		return
	}
	d := &dataConn{body: r.Body, w: w, rc: http.NewResponseController(w), done: make(chan struct{})}
	if upload {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		if err := d.rc.Flush(); err != nil {
			return
		}
	}
	t.data <- d // room for one, and the route is claimed once
	select {
	case <-d.done:
	case <-t.done:
	}
	if !d.ok.Load() {
		// A reset, not an end: the agent must not take a cut stream for
		// the whole.
		panic(http.ErrAbortHandler)
	}
	if !upload {
		w.WriteHeader(http.StatusNoContent)
	}
}

// waitData waits for the agent's data stream of t, or its end (agentEnded),
// or a while.
func waitData(ctx context.Context, t *transfer, ended <-chan error) (d *dataConn, agentEnded bool, err error) {
	timer := time.NewTimer(transferOpenTimeout)
	defer timer.Stop()
	select {
	case d := <-t.data:
		return d, false, nil
	case err := <-ended:
		if err == nil {
			err = fmt.Errorf("%w: the agent ended the transfer without its data stream", ports.ErrAgentGone)
		}
		return nil, true, err
	case <-timer.C:
		return nil, false, fmt.Errorf("%w: the agent did not open the data stream within %v", ports.ErrAgentGone, transferOpenTimeout)
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// dataReader reads a transfer's bytes from its data stream; the agent's
// end on the Transfer stream says whether they were all.
type dataReader struct {
	t       *transfer
	release func()
	size    int64
	max     int64
	got     int64
	ended   chan error
	d       *dataConn
	end     error
	once    sync.Once
}

func newDataReader(t *transfer, stream transferServerStream, release func(), size, limit int64) *dataReader {
	r := &dataReader{t: t, release: release, size: size, max: limit, ended: make(chan error, 1)}
	go func() { r.ended <- receiveEnd(stream, nil) }()
	return r
}

func (r *dataReader) Size() int64 { return r.size }

func (r *dataReader) Read(p []byte) (int, error) {
	if r.end != nil {
		return 0, r.end
	}
	if r.d == nil {
		d, _, err := waitData(context.Background(), r.t, r.ended)
		if err != nil {
			r.end = err
			return 0, err
		}
		r.d = d
	}
	n, err := r.d.body.Read(p)
	r.got += int64(n)
	switch {
	case r.size >= 0 && r.got > r.size:
		r.fail(fmt.Errorf("%w: the file grew while it was read", ports.ErrAgentGone))
		return 0, r.end
	case r.got > r.max:
		r.fail(fmt.Errorf("%w: over the maximum of %d bytes", ports.ErrFileTooLarge, r.max))
		return 0, r.end
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		// All the agent sent; its end says whether that is the file.
		r.d.finish(true)
		r.end = r.agentEnd(nil)
		if r.end == nil {
			if r.size >= 0 && r.got != r.size {
				r.end = fmt.Errorf("%w: the file changed size while it was read (%d of %d bytes)", ports.ErrAgentGone, r.got, r.size)
			} else {
				r.end = io.EOF
			}
		}
	default:
		// Cut: the agent's own reason (a read error) when it gives one.
		r.d.finish(false)
		r.end = r.agentEnd(err)
		if r.end == nil {
			r.end = fmt.Errorf("%w: the data stream broke: %v", ports.ErrAgentGone, err)
		}
	}
	if n > 0 {
		return n, nil
	}
	return 0, r.end
}

// agentEnd is the agent's end on the Transfer stream, waited for a while;
// cut (the data stream's error) makes a clean end an error.
func (r *dataReader) agentEnd(cut error) error {
	timer := time.NewTimer(abortGrace)
	defer timer.Stop()
	select {
	case err := <-r.ended:
		if err == nil && cut != nil {
			return fmt.Errorf("%w: the data stream broke: %v", ports.ErrAgentGone, cut)
		}
		return err
	case <-timer.C:
		return fmt.Errorf("%w: the agent did not end the transfer", ports.ErrAgentGone)
	}
}

func (r *dataReader) fail(err error) {
	r.end = err
	r.d.finish(false)
}

func (r *dataReader) Close() error {
	r.once.Do(func() {
		if r.d != nil {
			r.d.finish(false) // no-op after a clean end
		}
		r.release()
	})
	return nil
}

// sendData writes a write's body to its data stream, then says eof on the
// Transfer stream; agentEnded as sendBody's.
func (s *Service) sendData(ctx context.Context, t *transfer, stream transferServerStream, body io.Reader, ended <-chan error) (agentEnded bool, err error) {
	d, agentEnded, err := waitData(ctx, t, ended)
	if err != nil {
		return agentEnded, err
	}
	if d.raw != nil {
		return s.sendRaw(ctx, d, stream, body, ended)
	}
	buf := make([]byte, dataChunk)
	var sent int64
	for {
		n, rerr := fill(body, buf)
		if n > 0 {
			if sent += int64(n); sent > s.cfg.MaxFileBytes {
				d.finish(false)
				return false, fmt.Errorf("%w: over the maximum of %d bytes", ports.ErrFileTooLarge, s.cfg.MaxFileBytes)
			}
			select {
			case err := <-ended:
				d.finish(false)
				if err == nil {
					err = fmt.Errorf("%w: the agent ended the upload early", ports.ErrAgentGone)
				}
				return true, err
			default:
			}
			if _, err := d.w.Write(buf[:n]); err != nil {
				d.finish(false)
				return false, fmt.Errorf("%w: the data stream broke: %v", ports.ErrAgentGone, err)
			}
			if err := d.rc.Flush(); err != nil {
				d.finish(false)
				return false, fmt.Errorf("%w: the data stream broke: %v", ports.ErrAgentGone, err)
			}
		}
		if rerr == io.EOF { //nolint:errorlint // fill says the end so
			break
		}
		if rerr != nil {
			d.finish(false)
			return false, fmt.Errorf("reading the upload: %w", rerr)
		}
	}
	d.finish(true)
	if err := stream.Send(&sandboxv1.TransferResponse{Payload: &sandboxv1.TransferResponse_Eof{Eof: true}}); err != nil {
		return false, agentGone(err)
	}
	return false, nil
}
