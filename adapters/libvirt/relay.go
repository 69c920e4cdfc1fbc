package libvirt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// h2Preface is how every agent connection starts (HTTP/2 with prior
// knowledge, h2c).
var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// relay carries one domain's agent channel to the management server's agent
// socket: it keeps a connection to the channel's unix socket (QEMU listens
// there), and when the guest's agent opens a connection (its first bytes are
// the HTTP/2 preface) it dials the server and copies bytes both ways. When
// either side ends, it closes both, pauses so the guest sees the port's host
// side go away (its reads return EOF, so the agent redials), and starts over.
//
// The virtio-serial port is one byte stream with no connection boundaries:
// the guest closing its end is invisible here. Bytes that do not start with
// the preface are the tail of a dead connection; the relay drops the channel
// connection instead of handing them to the server.
type relay struct {
	name    string
	channel string // the domain's channel socket
	server  string // the agent link's unix socket
	log     *slog.Logger
	// pause is how long the channel stays disconnected between two
	// connections; backoffMax bounds the wait after failures.
	pause, backoffMax time.Duration

	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	connected bool // a server connection is up

	unreachable bool // the last server dial failed (logged once per outage)
}

func newRelay(name, channel, server string, log *slog.Logger) *relay {
	return &relay{name: name, channel: channel, server: server, log: log.With("env", name),
		pause: 300 * time.Millisecond, backoffMax: 2 * time.Second, done: make(chan struct{})}
}

func (r *relay) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		r.run(ctx)
	}()
}

// stop ends the relay and waits for its goroutines.
func (r *relay) stop() {
	r.cancel()
	<-r.done
}

func (r *relay) setConnected(v bool) {
	r.mu.Lock()
	r.connected = v
	r.mu.Unlock()
}

// Connected reports whether the relay carries a live agent connection.
func (r *relay) Connected() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.connected
}

func (r *relay) run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	var d net.Dialer
	for ctx.Err() == nil {
		ok := r.once(ctx, &d)
		wait := r.pause
		if !ok {
			wait = backoff
			backoff = min(backoff*2, r.backoffMax)
		} else {
			backoff = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// once serves one agent connection; it reports false when it could not
// reach the channel or the server (so the caller backs off).
func (r *relay) once(ctx context.Context, d *net.Dialer) bool {
	ch, err := d.DialContext(ctx, "unix", r.channel)
	if err != nil {
		// The domain is not running (yet), or QEMU is gone.
		return false
	}
	stop := context.AfterFunc(ctx, func() { ch.Close() })
	defer stop()
	defer ch.Close()

	// Wait for the guest to speak.
	first := make([]byte, 32<<10)
	n, err := ch.Read(first)
	if err != nil {
		return errors.Is(err, io.EOF) && ctx.Err() == nil
	}
	first = first[:n]
	m := min(len(first), len(h2Preface))
	if !bytes.Equal(first[:m], h2Preface[:m]) {
		r.log.Debug("agent channel: dropping bytes of an earlier connection", "bytes", n)
		return true
	}
	srv, err := d.DialContext(ctx, "unix", r.server)
	if err != nil {
		if !r.unreachable {
			r.log.Warn("agent channel: cannot reach the agent socket; retrying", "socket", r.server, "err", err)
		}
		r.unreachable = true
		return false
	}
	if r.unreachable {
		r.log.Info("agent channel: the agent socket answers again", "socket", r.server)
		r.unreachable = false
	}
	stopSrv := context.AfterFunc(ctx, func() { srv.Close() })
	defer stopSrv()
	defer srv.Close()
	if _, err := srv.Write(first); err != nil {
		return false
	}
	r.setConnected(true)
	defer r.setConnected(false)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(srv, ch)
		// Either side ending ends the connection: the other one must not
		// linger half-open.
		srv.Close()
		ch.Close()
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(ch, srv)
		srv.Close()
		ch.Close()
	}()
	wg.Wait()
	return true
}
