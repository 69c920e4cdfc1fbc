package libvirt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
)

// eagerRetry spaces an eager relay's dials of a channel not there yet.
const eagerRetry = 10 * time.Millisecond

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

	// eager, set before start, dials the channel every eagerRetry until it
	// answers once (a domain being restored: its QEMU listens any moment
	// now, and a guest woken from hibernation waits for this side);
	// reached records that it did.
	eager, reached bool

	// identity is the answer to the guest's identity hello (a clone of a
	// saved template asks who it is), given once: nil before and after.
	identity func() ([]byte, error)
}

// offerIdentity sets the answer the guest's next identity hello gets (made
// when asked: it carries the host's clock).
func (r *relay) offerIdentity(answer func() ([]byte, error)) {
	r.mu.Lock()
	r.identity = answer
	r.mu.Unlock()
}

func (r *relay) takeIdentity() func() ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := r.identity
	r.identity = nil
	return line
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
		if !ok && r.eager && !r.reached {
			wait = eagerRetry
		} else if !ok {
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
	r.reached = true
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
	if first, err = r.answerHello(ch, first); err != nil {
		r.log.Warn("agent channel: " + err.Error())
		return true
	}
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

// answerHello answers a guest that asks who it is (agentwire.LinkIdentityHello)
// with the identity offered for it, once, and returns the bytes that follow
// (the start of its HTTP/2 connection). Bytes that are not a hello come
// back unchanged.
func (r *relay) answerHello(ch net.Conn, first []byte) ([]byte, error) {
	hello := []byte(agentwire.LinkIdentityHello)
	for len(first) < len(hello) && bytes.HasPrefix(hello, first) {
		buf := make([]byte, 32<<10)
		n, err := ch.Read(buf)
		if err != nil {
			return nil, fmt.Errorf("reading a hello: %w", err)
		}
		first = append(first, buf[:n]...)
	}
	if !bytes.HasPrefix(first, hello) {
		return first, nil
	}
	answer := r.takeIdentity()
	if answer == nil {
		// Asked again after its answer, or after a restart of the server,
		// which keeps no secret to give: the guest waits for nothing.
		return nil, errors.New("the guest asks for an identity this relay has none to give for; an environment restart boots it with its own")
	}
	line, err := answer()
	if err != nil {
		return nil, fmt.Errorf("answering a hello: %w", err)
	}
	if _, err := ch.Write(line); err != nil {
		r.offerIdentity(answer)
		return nil, fmt.Errorf("answering a hello: %w", err)
	}
	r.log.Info("agent channel: the guest got its identity")
	rest := first[len(hello):]
	if len(rest) > 0 {
		return rest, nil
	}
	buf := make([]byte, 32<<10)
	n, err := ch.Read(buf)
	if err != nil {
		return nil, fmt.Errorf("after the hello: %w", err)
	}
	return buf[:n], nil
}
