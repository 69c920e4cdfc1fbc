package agentrpc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A read's bytes on a connection of the agent's own: an agent that can
// open plain connections to this server GETs DataPath + the transfer id
// with the upgrade to DataRawProtocol before it says ready, and its file
// helper sends the file on that connection with sendfile(2), the size it
// announced and no more, then the connection ends. serveDataRaw has put
// the connection in the transfer's data channel before its 101, so read
// finds it beside the ready. Such a reader can hand the bytes to a socket
// itself (SpliceTo): when that is the REST client's TCP connection
// (adapters/rest's spliced downloads), io.CopyN between the two sockets
// is splice(2), and the file goes from the agent's page cache to the
// client with no copy through user space on the way.
//
// All but the last byte are spliced as they come; the last is read, held
// back, and written only once the connection has ended there and the
// agent has ended the transfer cleanly (its helper found the file
// unchanged). Anything else closes the client's connection short of the
// answer's Content-Length, the one honest signal left once the status is
// out. An old agent POSTs on the HTTP/2 data stream as before.

// Spliceable says the bytes arrive on a raw connection of their own and
// the size is known, so SpliceTo can move them.
func (r *dataReader) Spliceable() bool {
	return r.d != nil && r.d.raw != nil && r.size >= 0 && r.end == nil && r.got == 0
}

// SpliceTo writes the file to dst (see above): all of it and a nil error,
// or an error and dst short of the size. idle bounds how long the bytes
// may stand still, on either side: each move pushes it back, so a slow
// client or agent is not cut while bytes still move (files_raw_splice_linux.go).
func (r *dataReader) SpliceTo(dst net.Conn, idle time.Duration) (int64, error) {
	if !r.Spliceable() {
		return 0, errors.New("this read has no raw connection to splice")
	}
	raw := r.d.raw
	// The agent's end, watched while the bytes move: an error (the file
	// unreadable, the agent gone) stops the copy at once.
	var (
		stopped atomic.Bool
		watched sync.WaitGroup
	)
	endc := make(chan error, 1)
	quit := make(chan struct{})
	watched.Add(1)
	go func() {
		defer watched.Done()
		select {
		case err := <-r.ended:
			endc <- err
			if err != nil {
				stopped.Store(true)
				_ = raw.SetReadDeadline(time.Unix(1, 0))
				_ = dst.SetWriteDeadline(time.Unix(1, 0))
			}
		case <-quit:
		}
	}()
	push := func() {
		now := time.Now()
		_ = dst.SetWriteDeadline(now.Add(idle))
		_ = raw.SetReadDeadline(now.Add(idle))
		if stopped.Load() {
			_ = raw.SetReadDeadline(time.Unix(1, 0))
			_ = dst.SetWriteDeadline(time.Unix(1, 0))
		}
	}
	held := min(r.size, 1)
	var last []byte
	written, handled, cerr := spliceConns(dst, raw, r.size-held, idle, &stopped)
	if !handled {
		push()
		// Copied, each write pushing the bounds back.
		written, cerr = io.CopyBuffer(progressWriter{dst, push}, io.LimitReader(raw, r.size-held), make([]byte, 256<<10))
		if cerr == nil && written < r.size-held {
			cerr = io.ErrUnexpectedEOF
		}
	}
	if cerr == nil {
		push()
		last, cerr = readToEnd(raw, held+1)
		if cerr == nil && int64(len(last)) != held {
			cerr = fmt.Errorf("the data connection ended at %d of %d bytes", written+int64(len(last)), r.size)
		}
	}
	r.got = written + int64(len(last))
	if cerr != nil {
		// Closes the connection: the helper's send fails, the agent ends.
		r.d.finish(false)
	}
	close(quit)
	watched.Wait()
	var end error
	select {
	case end = <-endc:
		if end == nil && cerr != nil {
			end = fmt.Errorf("%w: the data connection broke: %v", ports.ErrAgentGone, cerr)
		}
	default:
		end = r.agentEnd(cerr)
	}
	if end != nil {
		r.fail(end)
		return written, end
	}
	if held > 0 {
		push()
		if _, err := dst.Write(last); err != nil {
			r.fail(err)
			return written, err
		}
		written += held
	}
	r.d.finish(true)
	r.end = io.EOF
	return written, nil
}

// readToEnd reads c up to its end, at most max bytes: max bytes and no
// error when it goes on past them.
func readToEnd(c io.Reader, max int64) ([]byte, error) {
	buf := make([]byte, max)
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if errors.Is(err, io.EOF) {
			return buf[:n], nil
		}
		if err != nil {
			return buf[:n], err
		}
	}
	return buf, nil
}

// progressWriter calls moved after each write that moved bytes.
type progressWriter struct {
	w     io.Writer
	moved func()
}

func (p progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if n > 0 {
		p.moved()
	}
	return n, err
}
