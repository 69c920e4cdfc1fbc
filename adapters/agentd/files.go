package agentd

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"time"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/telemetry/spanwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// transferChunk is the most bytes of one data message: well under the
// server's message limit, large enough that framing costs nothing.
const transferChunk = 256 << 10

// listingBatch is the most entries of one listing message.
const listingBatch = 1000

type transferStream = *connect.BidiStreamForClient[sandboxv1.TransferRequest, sandboxv1.TransferResponse]

// transfer serves one FileRequest on a Transfer stream of its own, whose
// HTTP/2 flow control paces the bytes both ways.
func (a *Agent) transfer(ctx context.Context, req *sandboxv1.FileRequest) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	span := spanwire.StartRemote(req.GetTraceparent(), "agentd.File", time.Now())
	span.SetAttr("agentic.transfer_id", req.GetTransferId())
	span.SetAttr("agentic.file_op", req.GetOp().String())
	defer func() {
		if f, ok := span.Finished(); ok {
			a.out.pushNow(agentwire.SpanReport([]spanwire.RemoteSpan{f}))
		}
	}()
	stream := a.files.Transfer(ctx)
	a.signIn(stream.RequestHeader())
	if err := stream.Send(&sandboxv1.TransferRequest{Payload: &sandboxv1.TransferRequest_Open{Open: &sandboxv1.TransferOpen{TransferId: req.GetTransferId()}}}); err != nil {
		a.log.Warn("file transfer not opened", "transfer_id", req.GetTransferId(), "err", err)
		return
	}
	err := a.fileOp(ctx, stream, req)
	if err != nil {
		span.End(time.Now(), err.Error())
	} else {
		span.End(time.Now(), "")
	}
	end := &sandboxv1.TransferEnd{}
	if err != nil {
		end.Error, end.Message = agentwire.FileErrorToProto(err), err.Error()
		if end.Error == sandboxv1.FileError_FILE_ERROR_FAILED {
			a.log.Warn("file operation failed", "transfer_id", req.GetTransferId(), "op", req.GetOp().String(), "err", err)
		}
	}
	if err := stream.Send(&sandboxv1.TransferRequest{Payload: &sandboxv1.TransferRequest_End{End: end}}); err == nil {
		_ = stream.CloseRequest()
		// The server ends the stream once it has the end.
		for {
			if _, err := stream.Receive(); err != nil {
				break
			}
		}
	}
	_ = stream.CloseResponse()
}

func (a *Agent) fileOp(ctx context.Context, stream transferStream, req *sandboxv1.FileRequest) error {
	files := a.cfg.Files
	if files == nil {
		return errors.New("this agent does no file work")
	}
	switch req.GetOp() {
	case sandboxv1.FileOp_FILE_OP_LIST:
		l, err := files.List(ctx, req.GetPath())
		if err != nil {
			return err
		}
		msgs := agentwire.ListingToProto(l, listingBatch)
		for _, m := range msgs {
			if err := stream.Send(&sandboxv1.TransferRequest{Payload: &sandboxv1.TransferRequest_Listing{Listing: m}}); err != nil {
				return err
			}
		}
		return nil
	case sandboxv1.FileOp_FILE_OP_READ:
		if sr, ok := a.rawReads(); ok && req.GetDataPlane() {
			if handled, err := a.readRaw(ctx, stream, req, sr.OpenTo); handled {
				return err
			}
		}
		r, err := files.Open(ctx, req.GetPath())
		if err != nil {
			return err
		}
		if req.GetDataPlane() {
			return a.postFrom(ctx, stream, r, req.GetTransferId())
		}
		return sendFrom(stream, r)
	case sandboxv1.FileOp_FILE_OP_READ_ARCHIVE:
		if sr, ok := a.rawReads(); ok && req.GetDataPlane() {
			if handled, err := a.readRaw(ctx, stream, req, sr.OpenArchiveTo); handled {
				return err
			}
		}
		r, err := files.OpenArchive(ctx, req.GetPath())
		if err != nil {
			return err
		}
		if req.GetDataPlane() {
			return a.postFrom(ctx, stream, r, req.GetTransferId())
		}
		return sendFrom(stream, r)
	case sandboxv1.FileOp_FILE_OP_WRITE:
		if sf, ok := a.rawWrites(); ok && req.GetDataPlane() {
			return a.writeRaw(ctx, stream, req, sf)
		}
		w, err := files.Create(ctx, req.GetPath(), fs.FileMode(req.GetMode()).Perm(), req.GetMaxBytes())
		if err != nil {
			return err
		}
		if req.GetDataPlane() {
			return a.getInto(ctx, stream, w, req.GetTransferId())
		}
		return receiveInto(stream, w)
	case sandboxv1.FileOp_FILE_OP_WRITE_ARCHIVE:
		w, err := files.CreateArchive(ctx, req.GetPath(), req.GetMaxBytes())
		if err != nil {
			return err
		}
		if req.GetDataPlane() {
			return a.getInto(ctx, stream, w, req.GetTransferId())
		}
		return receiveInto(stream, w)
	case sandboxv1.FileOp_FILE_OP_DELETE:
		return files.Delete(ctx, req.GetPath(), req.GetRecursive())
	}
	return errors.New("unknown file operation " + req.GetOp().String())
}

func sendFrom(stream transferStream, r ports.FileReader) error {
	defer r.Close()
	if err := stream.Send(&sandboxv1.TransferRequest{Payload: &sandboxv1.TransferRequest_Ready{Ready: &sandboxv1.TransferReady{Size: r.Size()}}}); err != nil {
		return err
	}
	buf := make([]byte, transferChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			// Send keeps no reference once it returns: buf is reused.
			if serr := stream.Send(&sandboxv1.TransferRequest{Payload: &sandboxv1.TransferRequest_Data{Data: buf[:n]}}); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// receiveInto writes the server's bytes until its eof, then commits; a
// stream that breaks first aborts, and nothing is kept.
func receiveInto(stream transferStream, w ports.FileWriter) error {
	for {
		msg, err := stream.Receive()
		if err != nil {
			w.Abort()
			return err
		}
		switch p := msg.GetPayload().(type) {
		case *sandboxv1.TransferResponse_Data:
			if _, err := w.Write(p.Data); err != nil {
				w.Abort()
				return err
			}
		case *sandboxv1.TransferResponse_Eof:
			return w.Commit()
		case *sandboxv1.TransferResponse_Abort:
			w.Abort()
			return errors.New("the server gave up the upload")
		}
	}
}
