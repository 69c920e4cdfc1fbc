package agentd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1/sandboxv1connect"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// socketFS is a file system of one file that a read can send to a socket
// itself, as agentfs.Local's helper does; it counts which way was used.
type socketFS struct {
	data             []byte
	opened, openedTo atomic.Int32
}

var errNotHere = errors.New("not in this test")

func (f *socketFS) List(context.Context, string) (ports.FileListing, error) {
	return ports.FileListing{}, errNotHere
}

func (f *socketFS) Open(context.Context, string) (ports.FileReader, error) {
	f.opened.Add(1)
	return &sizedReader{Reader: bytes.NewReader(f.data), size: int64(len(f.data))}, nil
}

func (f *socketFS) OpenTo(_ context.Context, _ string, sock *os.File) (ports.FileReader, error) {
	return f.sendTo(sock, int64(len(f.data)))
}

// sendTo sends the bytes on sock as the helper does.
func (f *socketFS) sendTo(sock *os.File, size int64) (ports.FileReader, error) {
	f.openedTo.Add(1)
	c, err := net.FileConn(sock) // a copy of its own, as the helper's
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(f.data)
		_ = c.Close()
		done <- err
	}()
	return &sentReader{done: done, size: size}, nil
}

// The archive is the same bytes, of a size not known before.
func (f *socketFS) OpenArchive(context.Context, string) (ports.FileReader, error) {
	f.opened.Add(1)
	return &sizedReader{Reader: bytes.NewReader(f.data), size: -1}, nil
}

func (f *socketFS) OpenArchiveTo(_ context.Context, _ string, sock *os.File) (ports.FileReader, error) {
	return f.sendTo(sock, -1)
}

func (f *socketFS) Create(context.Context, string, fs.FileMode, int64) (ports.FileWriter, error) {
	return nil, errNotHere
}

func (f *socketFS) CreateArchive(context.Context, string, int64) (ports.FileWriter, error) {
	return nil, errNotHere
}
func (f *socketFS) Delete(context.Context, string, bool) error { return errNotHere }

type sizedReader struct {
	*bytes.Reader
	size int64
}

func (r *sizedReader) Close() error { return nil }
func (r *sizedReader) Size() int64  { return r.size }

// sentReader gives no bytes: its end is the send's.
type sentReader struct {
	done chan error
	size int64
}

func (r *sentReader) Read([]byte) (int, error) {
	if err := <-r.done; err != nil {
		return 0, err
	}
	return 0, io.EOF
}
func (r *sentReader) Close() error { return nil }
func (r *sentReader) Size() int64  { return r.size }

// dataCP is the fake control plane with the file routes: the Transfer
// streams and the data route, raw reads taken only when rawReads (a
// server from before them answers the upgrade 404).
type dataCP struct {
	*fakeCP
	rawReads  bool
	transfers chan *connect.BidiStream[sandboxv1.TransferRequest, sandboxv1.TransferResponse]
	bytes     chan []byte // what came on the data route, and how
	how       chan string
}

func (d *dataCP) Transfer(ctx context.Context, stream *connect.BidiStream[sandboxv1.TransferRequest, sandboxv1.TransferResponse]) error {
	d.transfers <- stream
	<-ctx.Done()
	return nil
}

func (d *dataCP) data(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		b, _ := io.ReadAll(r.Body)
		d.how <- "post"
		d.bytes <- b
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if !d.rawReads || r.Header.Get("Upgrade") != agentwire.DataRawProtocol {
		http.NotFound(w, r)
		return
	}
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	d.how <- "raw" // before the 101: the ready comes after it
	_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+agentwire.DataRawProtocol+"\r\n\r\n")
	b, _ := io.ReadAll(c)
	d.bytes <- b
}

func startDataCP(t *testing.T, rawReads bool) (*dataCP, string) {
	t.Helper()
	cp := &fakeCP{hbSecs: 5, sessions: make(chan *cpSession, 16), forwards: make(chan *cpForward, 16), raws: make(chan *cpRaw, 16),
		outputs: make(chan *cpOutput, 16), sessionRaws: make(chan *cpRaw, 16)}
	d := &dataCP{fakeCP: cp, rawReads: rawReads, transfers: make(chan *connect.BidiStream[sandboxv1.TransferRequest, sandboxv1.TransferResponse], 4),
		bytes: make(chan []byte, 4), how: make(chan string, 4)}
	mux := http.NewServeMux()
	mux.Handle(sandboxv1connect.NewAgentServiceHandler(d))
	mux.HandleFunc(agentwire.DataPath+"{id}", d.data)
	srv := httptest.NewUnstartedServer(mux)
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = p
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return d, srv.URL
}

// A data-plane read, of a file or of an archive, goes on a raw connection
// of the agent's own, opened before the ready, its bytes sent by the file
// system itself; a server from before raw reads answers the upgrade 404,
// and the read goes on the HTTP/2 data stream as before: the same bytes,
// the same clean end.
func TestAReadGoesRawOrFallsBackToTheDataStream(t *testing.T) {
	data := bytes.Repeat([]byte("raw read "), 100<<10)
	for _, c := range []struct {
		op   sandboxv1.FileOp
		raw  bool
		size int64
	}{
		{sandboxv1.FileOp_FILE_OP_READ, true, int64(len(data))},
		{sandboxv1.FileOp_FILE_OP_READ, false, int64(len(data))},
		{sandboxv1.FileOp_FILE_OP_READ_ARCHIVE, true, -1},
		{sandboxv1.FileOp_FILE_OP_READ_ARCHIVE, false, -1},
	} {
		raw := c.raw
		d, url := startDataCP(t, raw)
		files := &socketFS{data: data}
		_, _, s := agentOn(t, d.fakeCP, url, func(c *Config) { c.Files = files })
		s.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_FileRequest{FileRequest: &sandboxv1.FileRequest{
			Op: c.op, Path: "/f", TransferId: "t1", DataPlane: true,
		}}})
		stream := within(t, d.transfers, "the transfer stream")
		var got []string
		for {
			m, err := stream.Receive()
			if err != nil {
				t.Fatalf("raw server %v: the transfer: %v", raw, err)
			}
			if m.GetOpen() != nil {
				continue
			}
			if r := m.GetReady(); r != nil {
				got = append(got, "ready")
				if raw && len(d.how) == 0 {
					t.Errorf("the ready before the raw connection")
				}
				if r.GetSize() != c.size {
					t.Errorf("%v, raw server %v: ready with %d bytes, want %d", c.op, raw, r.GetSize(), c.size)
				}
				continue
			}
			if e := m.GetEnd(); e != nil {
				if e.GetError() != 0 {
					t.Errorf("raw server %v: the end: %v", raw, e)
				}
				break
			}
		}
		how := within(t, d.how, "the data route")
		if b := within(t, d.bytes, "the bytes"); !bytes.Equal(b, data) {
			t.Errorf("%v, raw server %v: %d bytes on the data route, want %d", c.op, raw, len(b), len(data))
		}
		want := map[bool]string{true: "raw", false: "post"}[raw]
		if how != want || files.openedTo.Load() != map[bool]int32{true: 1, false: 0}[raw] || files.opened.Load() != map[bool]int32{true: 0, false: 1}[raw] {
			t.Errorf("%v, raw server %v: bytes by %s, sent to a socket %d times, opened %d times; want %s", c.op, raw, how, files.openedTo.Load(), files.opened.Load(), want)
		}
		if len(got) != 1 {
			t.Errorf("raw server %v: %v, want one ready", raw, got)
		}
	}
}
