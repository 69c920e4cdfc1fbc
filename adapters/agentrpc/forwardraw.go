package agentrpc

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
)

// A forwarded connection's bytes need no framing of the link's: where the
// agent can open a connection of its own to this server (TCP, TLS, or a
// unix socket that takes more than one), it answers a PortDial with one,
// turned into raw bytes by an HTTP/1.1 upgrade on ForwardRawPath. No
// protobuf message, envelope or HTTP/2 frame per chunk, and each relay can
// hand the bytes on as they come (the agent splices between sockets). A
// serial link, which carries one connection only, keeps the Forward
// stream. Measured in docs/benchmarks.md (Previews).

// ForwardRawPath, ForwardRawProtocol and HeaderForwardID are the upgrade
// an agent sends on a connection of its own for a PortDial.
const (
	ForwardRawPath     = agentwire.ForwardRawPath
	ForwardRawProtocol = agentwire.ForwardRawProtocol
	HeaderForwardID    = agentwire.HeaderForwardID
)

// serveForwardRaw takes an agent's connection for one of its dials.
func (s *Service) serveForwardRaw(w http.ResponseWriter, r *http.Request) {
	id, ok := s.signedIn(w, r)
	if !ok || !upgradingTo(w, r, ForwardRawProtocol) {
		return
	}
	fwID := r.Header.Get(HeaderForwardID)
	if !s.forwards.waiting(fwID, id) {
		http.Error(w, "no such dial for this agent", http.StatusNotFound)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "cannot take the connection over", http.StatusInternalServerError)
		return
	}
	// The listener's header and idle bounds are for requests; the
	// connection's own idle bound applies from here.
	_ = conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+ForwardRawProtocol+"\r\n\r\n"); err != nil {
		_ = conn.Close()
		return
	}
	rc := newRawConn(conn, brw.Reader, s.cfg.Forwards.Idle)
	if !s.forwards.deliver(fwID, id, forwardResult{conn: rc}) {
		_ = rc.Close() // given up meanwhile
	}
}

// headerHas reports whether a comma-separated header lists token.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// waiting reports whether id is a dial of agentID that no connection has
// answered yet.
func (t *forwardTable) waiting(id, agentID string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.byID[id]
	return p != nil && p.agentID == agentID && !p.claimed
}

// rawConn is an agent's connection after the upgrade: bytes the server's
// reader took early are read first; an idle connection is closed.
type rawConn struct {
	net.Conn
	r     io.Reader
	idle  time.Duration
	timer *time.Timer

	slot forwardSlot
	once sync.Once
}

func newRawConn(c net.Conn, br *bufio.Reader, idle time.Duration) *rawConn {
	rc := &rawConn{Conn: c, r: c, idle: idle}
	if br != nil && br.Buffered() > 0 {
		early, _ := br.Peek(br.Buffered())
		rc.r = io.MultiReader(strings.NewReader(string(early)), c)
	}
	// Set before it can fire: the callback reads rc.timer.
	rc.timer = time.AfterFunc(time.Hour, func() { _ = rc.Close() })
	rc.timer.Reset(idle)
	return rc
}

func (rc *rawConn) Read(b []byte) (int, error) {
	n, err := rc.r.Read(b)
	if n > 0 {
		rc.timer.Reset(rc.idle)
	}
	return n, err
}

func (rc *rawConn) Write(b []byte) (int, error) {
	n, err := rc.Conn.Write(b)
	if n > 0 {
		rc.timer.Reset(rc.idle)
	}
	return n, err
}

// CloseWrite half-closes TCP, TLS and unix connections alike.
func (rc *rawConn) CloseWrite() error {
	if cw, ok := rc.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("this connection cannot half-close")
}

func (rc *rawConn) setRelease(release func()) { rc.slot.set(release) }

func (rc *rawConn) Close() error {
	err := os.ErrClosed
	rc.once.Do(func() {
		// The slot first: once the close is seen, a new connection may
		// take it.
		rc.slot.end()
		rc.timer.Stop()
		err = rc.Conn.Close()
	})
	return err
}
