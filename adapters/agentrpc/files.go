package agentrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// File transfers: the server asks for one with a FileRequest on the agent's
// Connect stream, and the agent opens a Transfer stream for it. Each
// transfer has an HTTP/2 stream, and so a flow-control window, of its own:
// a slow REST client stalls only its own transfer, and memory stays bounded
// by the windows whatever the file's size.

const (
	// maxTransfersPerAgent bounds one agent's transfers in flight; with
	// the 1 MiB stream windows it keeps stalled transfers from holding
	// more than a fraction of a connection's window.
	maxTransfersPerAgent = 8
	// transferChunk is the most bytes the server puts in one data message.
	transferChunk = 256 << 10
	// DefaultMaxFileBytes is the largest file or archive moved unless
	// configured (AGENTIC_FILE_MAX_BYTES).
	DefaultMaxFileBytes int64 = 16 << 30
	// transferOpenTimeout is how long an agent may take to open the stream
	// of a transfer it was asked for.
	transferOpenTimeout = 30 * time.Second
)

var _ ports.AgentFiles = (*Service)(nil)

// Flow-control windows of the agent link, on both ends (agentd has the
// same numbers): a transfer's stream may hold streamWindow unread, and the
// connection's window is large enough that maxTransfersPerAgent stalled
// transfers still leave most of it to the Connect stream (terminal
// output, results).
const (
	streamWindow     = 4 << 20
	connectionWindow = 64 << 20
)

// HTTP2Config is the agent port's HTTP/2 settings: keepalive pings and the
// windows above.
func HTTP2Config() *http.HTTP2Config {
	return &http.HTTP2Config{
		SendPingTimeout: 15 * time.Second, PingTimeout: 10 * time.Second,
		MaxReceiveBufferPerStream: streamWindow, MaxReceiveBufferPerConnection: connectionWindow,
		// Large frames: a tunnel or a transfer moves in fewer writes.
		MaxReadFrameSize: 1 << 20,
	}
}

type transferServerStream = *connect.BidiStream[sandboxv1.TransferRequest, sandboxv1.TransferResponse]

// transfer is one file operation waiting for, then using, its stream.
type transfer struct {
	id, agentID string
	opened      chan transferServerStream
	done        chan struct{}
	doneOnce    sync.Once
	claimed     bool
	// dataPlane: the bytes come on the data route (dataplane.go), POSTed
	// for a read (upload false) or fetched by GET for a write (upload
	// true); data hands its one stream to the transfer's user.
	dataPlane   bool
	upload      bool
	dataClaimed bool
	data        chan *dataConn
}

func (t *transfer) finish() { t.doneOnce.Do(func() { close(t.done) }) }

// transfers are the file transfers asked of agents, by transfer id, under
// a lock of their own.
type transfers struct {
	mu       sync.Mutex
	byID     map[string]*transfer
	perAgent agentCounts
}

// add takes t on unless its agent has maxTransfersPerAgent already.
func (ts *transfers) add(t *transfer) bool {
	if !ts.perAgent.take(t.agentID, maxTransfersPerAgent) {
		return false
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.byID == nil {
		ts.byID = map[string]*transfer{}
	}
	ts.byID[t.id] = t
	return true
}

func (ts *transfers) remove(t *transfer) {
	ts.mu.Lock()
	delete(ts.byID, t.id)
	ts.mu.Unlock()
	ts.perAgent.release(t.agentID)
}

// claim hands the transfer id to the agent opening its stream, once, and
// only to the agent it was asked of.
func (ts *transfers) claim(id, agentID string) *transfer {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.byID[id]
	if t == nil || t.agentID != agentID || t.claimed {
		return nil
	}
	t.claimed = true
	return t
}

// Transfer serves the stream an agent opens for a FileRequest.
func (s *Service) Transfer(_ context.Context, stream transferServerStream) error {
	id, first, err := opened(&s.auth, stream, "a transfer open")
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the first message must name the transfer"))
	}
	t := s.transfers.claim(open.GetTransferId(), id)
	if t == nil {
		// Another agent's transfer (or none): nothing to say about it.
		return connect.NewError(connect.CodeNotFound, errors.New("no such transfer for this agent"))
	}
	t.opened <- stream
	// Not before the transfer's user is done with the stream, even when
	// the agent has gone (ctx ended): a Send after the handler returned
	// would touch a finished response. A gone agent makes that user's next
	// Send or Receive fail, so it is never long.
	<-t.done
	return nil
}

// beginTransfer asks agentID for an operation and waits for its stream.
// release must be called when done with it.
func (s *Service) beginTransfer(ctx context.Context, agentID string, req *sandboxv1.FileRequest) (transferServerStream, *transfer, func(), error) {
	if s.isHeld(agentID) {
		return nil, nil, nil, fmt.Errorf("%w: %s", ports.ErrAgentHeld, agentID)
	}
	conn, err := s.liveConn(agentID)
	if err != nil {
		return nil, nil, nil, err
	}
	t := &transfer{id: s.cfg.IDs.NewID(), agentID: agentID, opened: make(chan transferServerStream, 1), done: make(chan struct{})}
	if conn.fileDataPlane && req.GetOp() != sandboxv1.FileOp_FILE_OP_LIST && req.GetOp() != sandboxv1.FileOp_FILE_OP_DELETE {
		// The id names a route an agent may call: unguessable as well as
		// unique, and good for this transfer only.
		t.id += "." + randomToken()
		t.dataPlane, t.data = true, make(chan *dataConn, 1)
		t.upload = req.GetOp() == sandboxv1.FileOp_FILE_OP_WRITE || req.GetOp() == sandboxv1.FileOp_FILE_OP_WRITE_ARCHIVE
		req.DataPlane = true
	}
	if !s.transfers.add(t) {
		return nil, nil, nil, fmt.Errorf("%w (at most %d)", ports.ErrTooManyTransfers, maxTransfersPerAgent)
	}
	req.TransferId = t.id
	ls := s.startTransferSpan(ctx, agentID, req)
	req.Traceparent = ls.traceparent()
	release := func() {
		t.finish()
		s.transfers.remove(t)
		ls.done(ports.CommandResult{})
	}
	if err := conn.send(ctx, &sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_FileRequest{FileRequest: req}}); err != nil {
		release()
		return nil, nil, nil, err
	}
	timer := time.NewTimer(transferOpenTimeout)
	defer timer.Stop()
	select {
	case stream := <-t.opened:
		return stream, t, release, nil
	case <-conn.closed:
		release()
		return nil, nil, nil, ports.ErrAgentGone
	case <-timer.C:
		release()
		return nil, nil, nil, fmt.Errorf("%w: the agent did not open the transfer within %v", ports.ErrAgentGone, transferOpenTimeout)
	case <-ctx.Done():
		release()
		return nil, nil, nil, ctx.Err()
	}
}

// receiveEnd reads the agent's messages up to its TransferEnd.
func receiveEnd(stream transferServerStream, onListing func(*sandboxv1.FileListing)) error {
	for {
		msg, err := stream.Receive()
		if err != nil {
			return agentGone(err)
		}
		switch p := msg.GetPayload().(type) {
		case *sandboxv1.TransferRequest_Listing:
			if onListing != nil {
				onListing(p.Listing)
			}
		case *sandboxv1.TransferRequest_End:
			return agentwire.FileErrorFromProto(p.End)
		}
	}
}

func agentGone(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: the transfer ended without an answer", ports.ErrAgentGone)
	}
	return fmt.Errorf("%w: %v", ports.ErrAgentGone, err)
}

// ListFiles implements ports.AgentFiles.
func (s *Service) ListFiles(ctx context.Context, agentID, path string) (ports.FileListing, error) {
	stream, _, release, err := s.beginTransfer(ctx, agentID, &sandboxv1.FileRequest{Op: sandboxv1.FileOp_FILE_OP_LIST, Path: path})
	if err != nil {
		return ports.FileListing{}, err
	}
	defer release()
	var l ports.FileListing
	err = receiveEnd(stream, func(m *sandboxv1.FileListing) {
		if len(l.Entries) < ports.MaxListedEntries {
			agentwire.AddListing(&l, m)
		}
	})
	if len(l.Entries) > ports.MaxListedEntries {
		l.Entries, l.Truncated = l.Entries[:ports.MaxListedEntries], true
	}
	if l.Entries == nil {
		l.Entries = []ports.FileEntry{}
	}
	return l, err
}

// DeleteFile implements ports.AgentFiles.
func (s *Service) DeleteFile(ctx context.Context, agentID, path string, recursive bool) error {
	stream, _, release, err := s.beginTransfer(ctx, agentID, &sandboxv1.FileRequest{Op: sandboxv1.FileOp_FILE_OP_DELETE, Path: path, Recursive: recursive})
	if err != nil {
		return err
	}
	defer release()
	return receiveEnd(stream, nil)
}

// ReadFile implements ports.AgentFiles.
func (s *Service) ReadFile(ctx context.Context, agentID, path string) (ports.FileReader, error) {
	return s.read(ctx, agentID, &sandboxv1.FileRequest{Op: sandboxv1.FileOp_FILE_OP_READ, Path: path})
}

// ReadArchive implements ports.AgentFiles.
func (s *Service) ReadArchive(ctx context.Context, agentID, dir string) (ports.FileReader, error) {
	return s.read(ctx, agentID, &sandboxv1.FileRequest{Op: sandboxv1.FileOp_FILE_OP_READ_ARCHIVE, Path: dir})
}

func (s *Service) read(ctx context.Context, agentID string, req *sandboxv1.FileRequest) (ports.FileReader, error) {
	stream, t, release, err := s.beginTransfer(ctx, agentID, req)
	if err != nil {
		return nil, err
	}
	msg, err := stream.Receive()
	if err != nil {
		release()
		return nil, agentGone(err)
	}
	switch p := msg.GetPayload().(type) {
	case *sandboxv1.TransferRequest_End:
		release()
		if err := agentwire.FileErrorFromProto(p.End); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: the agent ended the read before it began", ports.ErrAgentGone)
	case *sandboxv1.TransferRequest_Ready:
		size := p.Ready.GetSize()
		if size > s.cfg.MaxFileBytes {
			release()
			return nil, fmt.Errorf("%w: %d bytes, over the maximum of %d", ports.ErrFileTooLarge, size, s.cfg.MaxFileBytes)
		}
		if t.dataPlane {
			r := newDataReader(t, stream, release, size, s.cfg.MaxFileBytes)
			select {
			case d := <-t.data:
				// A raw connection, opened before the ready
				// (files_raw_read.go).
				r.d = d
			default:
			}
			return r, nil
		}
		return &transferReader{stream: stream, release: release, size: size, max: s.cfg.MaxFileBytes}, nil
	}
	release()
	return nil, fmt.Errorf("%w: the agent answered a read with %T", ports.ErrAgentGone, msg.GetPayload())
}

// transferReader reads the data of a transfer; what the agent sends beyond
// the file's announced size or the maximum cuts it.
type transferReader struct {
	stream  transferServerStream
	release func()
	size    int64
	max     int64
	got     int64
	pending []byte
	end     error
	once    sync.Once
}

func (r *transferReader) Size() int64 { return r.size }

func (r *transferReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		if r.end != nil {
			return 0, r.end
		}
		msg, err := r.stream.Receive()
		if err != nil {
			r.end = agentGone(err)
			continue
		}
		switch m := msg.GetPayload().(type) {
		case *sandboxv1.TransferRequest_Data:
			r.got += int64(len(m.Data))
			switch {
			case r.size >= 0 && r.got > r.size:
				r.end = fmt.Errorf("%w: the file grew while it was read", ports.ErrAgentGone)
			case r.got > r.max:
				r.end = fmt.Errorf("%w: over the maximum of %d bytes", ports.ErrFileTooLarge, r.max)
			default:
				r.pending = m.Data
			}
		case *sandboxv1.TransferRequest_End:
			r.end = agentwire.FileErrorFromProto(m.End)
			if r.end == nil {
				if r.size >= 0 && r.got != r.size {
					r.end = fmt.Errorf("%w: the file changed size while it was read (%d of %d bytes)", ports.ErrAgentGone, r.got, r.size)
				} else {
					r.end = io.EOF
				}
			}
		}
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

func (r *transferReader) Close() error {
	r.once.Do(r.release)
	return nil
}

// WriteFile implements ports.AgentFiles.
func (s *Service) WriteFile(ctx context.Context, agentID, path string, mode fs.FileMode, body io.Reader) error {
	return s.write(ctx, agentID, &sandboxv1.FileRequest{Op: sandboxv1.FileOp_FILE_OP_WRITE, Path: path, Mode: uint32(mode.Perm())}, body)
}

// WriteArchive implements ports.AgentFiles.
func (s *Service) WriteArchive(ctx context.Context, agentID, dir string, body io.Reader) error {
	return s.write(ctx, agentID, &sandboxv1.FileRequest{Op: sandboxv1.FileOp_FILE_OP_WRITE_ARCHIVE, Path: dir}, body)
}

// write sends body while watching for the agent's end: an agent that
// refuses early (no permission, a refused path) stops the upload at once.
func (s *Service) write(ctx context.Context, agentID string, req *sandboxv1.FileRequest, body io.Reader) error {
	req.MaxBytes = s.cfg.MaxFileBytes
	stream, t, release, err := s.beginTransfer(ctx, agentID, req)
	if err != nil {
		return err
	}
	defer release()
	ended := make(chan error, 1)
	go func() { ended <- receiveEnd(stream, nil) }()
	send := s.sendBody
	if t.dataPlane {
		send = func(stream transferServerStream, body io.Reader, ended <-chan error) (bool, error) {
			return s.sendData(ctx, t, stream, body, ended)
		}
	}
	agentEnded, sendErr := send(stream, body, ended)
	switch {
	case agentEnded:
		return sendErr
	case sendErr == nil:
		return <-ended
	}
	// Given up here: the agent discards what it has and ends. The stream
	// is not released before it does (or a while has passed), so that no
	// Receive outlives it.
	_ = stream.Send(&sandboxv1.TransferResponse{Payload: &sandboxv1.TransferResponse_Abort{Abort: true}})
	select {
	case err := <-ended:
		if err != nil && !errors.Is(err, ports.ErrAgentGone) && !errors.Is(sendErr, ports.ErrFileTooLarge) {
			return err // the agent's own reason is the better one
		}
	case <-time.After(abortGrace):
		s.log.WarnContext(ctx, "an agent did not end an aborted upload", "agent_id", agentID, "transfer_id", req.GetTransferId())
	}
	return sendErr
}

// fill reads body into buf until buf is full or the body ends: io.EOF
// only at its clean end. A body that breaks is an error, whatever it says,
// an io.ErrUnexpectedEOF of its own too (an HTTP body cut short of its
// Content-Length): io.ReadFull's would take that for the last chunk.
func fill(body io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := body.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// abortGrace is how long an agent may take to discard an aborted upload.
const abortGrace = 15 * time.Second

// sendBody sends body then eof; agentEnded says the error is the agent's
// end (it stopped the upload), received already.
func (s *Service) sendBody(stream transferServerStream, body io.Reader, ended <-chan error) (agentEnded bool, err error) {
	buf := make([]byte, transferChunk)
	var sent int64
	for {
		n, rerr := fill(body, buf)
		if n > 0 {
			if sent += int64(n); sent > s.cfg.MaxFileBytes {
				return false, fmt.Errorf("%w: over the maximum of %d bytes", ports.ErrFileTooLarge, s.cfg.MaxFileBytes)
			}
			select {
			case err := <-ended:
				if err == nil {
					err = fmt.Errorf("%w: the agent ended the upload early", ports.ErrAgentGone)
				}
				return true, err
			default:
			}
			if err := stream.Send(&sandboxv1.TransferResponse{Payload: &sandboxv1.TransferResponse_Data{Data: buf[:n]}}); err != nil {
				return false, agentGone(err)
			}
		}
		if rerr == io.EOF { //nolint:errorlint // fill says the end so
			break
		}
		if rerr != nil {
			return false, fmt.Errorf("reading the upload: %w", rerr)
		}
	}
	if err := stream.Send(&sandboxv1.TransferResponse{Payload: &sandboxv1.TransferResponse_Eof{Eof: true}}); err != nil {
		return false, agentGone(err)
	}
	return false, nil
}
