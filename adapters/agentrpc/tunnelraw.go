package agentrpc

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
)

// An egress tunnel's bytes need no framing of the link's either: where the
// agent can open a connection of its own to this server (TCP, TLS, a unix
// socket that takes more than one), it opens each tunnel as one, upgraded
// to raw bytes on TunnelRawPath with the destination in HeaderTunnelTo.
// The destination is checked and dialed exactly as for a Tunnel stream
// (beginTunnel, dialEgress: the same policy, limit, record and log), and
// then the bytes go between the two sockets by io.Copy, which between two
// plain TCP or unix sockets is splice(2): no copy through user space.
// A serial link keeps the Tunnel stream. Measured in docs/benchmarks.md
// (Egress).

// TunnelRawPath, TunnelRawProtocol, HeaderTunnelTo and HeaderTunnelRefused
// are the upgrade an agent sends for a raw tunnel, and the refusal's kind.
const (
	TunnelRawPath       = agentwire.TunnelRawPath
	TunnelRawProtocol   = agentwire.TunnelRawProtocol
	HeaderTunnelTo      = agentwire.HeaderTunnelTo
	HeaderTunnelRefused = agentwire.HeaderTunnelRefused
)

// tunnelActiveEvery is how often a raw tunnel looks whether bytes moved,
// to tell Egress.Active (bytes spliced by the kernel are not seen one read
// at a time).
const tunnelActiveEvery = time.Second

// serveTunnelRaw takes an agent's connection for one egress tunnel: the
// agent is authenticated, the destination checked against its policy and
// dialed, and only then is the connection switched to raw bytes.
func (s *Service) serveTunnelRaw(w http.ResponseWriter, r *http.Request) {
	id, ok := s.signedIn(w, r)
	if !ok || !upgradingTo(w, r, TunnelRawProtocol) {
		return
	}
	host, port, ok := tunnelTarget(r.Header.Get(HeaderTunnelTo))
	if !ok {
		http.Error(w, HeaderTunnelTo+" must name a host and a port (host:port)", http.StatusBadRequest)
		return
	}
	rec, end, ok := s.beginTunnel(id, host, port, "raw")
	if !ok {
		http.Error(w, strconv.Itoa(s.cfg.Egress.MaxTunnels)+" tunnels open, the limit", http.StatusTooManyRequests)
		return
	}
	defer end()
	dst, rule, ref := s.dialEgress(r.Context(), rec)
	if ref != nil {
		status, kind := http.StatusBadGateway, "failed"
		if ref.denied {
			status, kind = http.StatusForbidden, "denied"
		}
		w.Header().Set(HeaderTunnelRefused, kind)
		http.Error(w, ref.reason, status)
		return
	}
	defer func() { _ = dst.Close() }()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "cannot take the connection over", http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	// The listener's header and idle bounds are for requests; a tunnel,
	// like a Tunnel stream, lasts as long as its two ends keep it.
	_ = conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+TunnelRawProtocol+"\r\n\r\n"); err != nil {
		rec.Reason = rule + "; " + err.Error()
		return
	}
	up, down, err := s.relayRaw(id, conn, brw.Reader, dst)
	rec.BytesUp, rec.BytesDown = up, down
	if err != nil {
		rec.Reason = rule + "; " + err.Error()
	}
}

// tunnelTarget reads HeaderTunnelTo: a host (a name or an address, at most
// 255 bytes) and a port 1..65535.
func tunnelTarget(v string) (host string, port int, ok bool) {
	h, p, err := net.SplitHostPort(v)
	if err != nil || h == "" || len(h) > 255 {
		return "", 0, false
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, false
	}
	return h, port, true
}

// relayRaw moves bytes between the agent's connection and the destination
// until both directions end: the end of one side's bytes half-closes the
// other's write side, an error ends both and is returned (the first one;
// what the closing itself causes is not). A server shutting down does not
// wait for it: the process's end closes both.
func (s *Service) relayRaw(id string, agent net.Conn, early *bufio.Reader, dst *net.TCPConn) (up, down int64, err error) {
	var (
		once     sync.Once
		closing  atomic.Bool
		firstErr error
		errMu    sync.Mutex
		wg       sync.WaitGroup
		moved    = make(chan struct{})
	)
	fail := func(e error) {
		if closing.Load() {
			return
		}
		errMu.Lock()
		if firstErr == nil {
			firstErr = e
		}
		errMu.Unlock()
		once.Do(func() {
			closing.Store(true)
			_ = agent.Close()
			_ = dst.Close()
		})
	}
	var upN, downN atomic.Int64
	base, _ := tcpBytesMoved(dst) // before a byte moves
	wg.Add(2)
	go func() { // agent → destination
		defer wg.Done()
		// What the server's reader took past the upgrade goes first; from
		// there the two sockets are spliced.
		if n := early.Buffered(); n > 0 {
			b, _ := early.Peek(n)
			w, err := dst.Write(b)
			upN.Add(int64(w))
			if err != nil {
				fail(err)
				return
			}
		}
		n, err := io.Copy(dst, agent)
		upN.Add(n)
		if err != nil {
			fail(err)
			return
		}
		if err := dst.CloseWrite(); err != nil {
			fail(err)
		}
	}()
	go func() { // destination → agent
		defer wg.Done()
		n, err := io.Copy(agent, dst)
		downN.Add(n)
		if err != nil {
			fail(err)
			return
		}
		if err := closeWrite(agent); err != nil {
			fail(err)
		}
	}()
	go func() { wg.Wait(); close(moved) }()
	s.watchActive(id, dst, base, moved)
	if closing.Load() {
		errMu.Lock()
		err = firstErr
		errMu.Unlock()
	}
	return upN.Load(), downN.Load(), err
}

// watchActive tells Egress.Active, at most once per tunnelActiveEvery,
// that bytes moved through dst (since it counted last), until done.
func (s *Service) watchActive(id string, dst *net.TCPConn, last uint64, done <-chan struct{}) {
	active := s.cfg.Egress.Active
	if active == nil {
		<-done
		return
	}
	t := time.NewTicker(tunnelActiveEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			if now, ok := tcpBytesMoved(dst); !ok || now != last {
				active(id)
			}
			return
		case <-t.C:
			now, ok := tcpBytesMoved(dst)
			if !ok || now != last {
				// (Where the kernel does not say, an open tunnel counts as
				// in use.)
				active(id)
			}
			last = now
		}
	}
}

// closeWrite half-closes TCP, TLS and unix connections alike.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("this connection cannot half-close")
}
