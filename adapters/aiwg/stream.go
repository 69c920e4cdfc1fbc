package aiwg

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// readLimit bounds one inbound frame; aiwg serve sends small JSON frames.
const readLimit = 4 << 20

// stream is one open WebSocket whose reader runs in its own goroutine.
type stream struct {
	conn *websocket.Conn
	// done is closed when the reader stops; err says why.
	done chan struct{}
	err  error
}

// dial opens a WebSocket to rawURL (which carries a token: never log it
// unredacted). The TLS and proxy settings of the HTTP client are reused.
func (c *Client) dial(ctx context.Context, rawURL string) (*websocket.Conn, *http.Response, error) {
	d := websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: requestTimeout}
	if tr, ok := c.httpc.Transport.(*http.Transport); ok && tr != nil {
		d.TLSClientConfig = tr.TLSClientConfig.Clone()
		if tr.Proxy != nil {
			d.Proxy = tr.Proxy
		}
	}
	h := http.Header{}
	c.authHeader(h)
	conn, resp, err := d.DialContext(ctx, rawURL, h)
	if resp != nil && resp.Body != nil {
		// The handshake answer's body is never read: it may quote the token.
		resp.Body.Close()
	}
	return conn, resp, err
}

// readTimeout is how long a peer may stay silent (pongs included) before
// the stream is taken as dead: 2.5 ping intervals.
func (c *Client) readTimeout() time.Duration {
	return c.cfg.PingInterval * 5 / 2
}

// startReader runs the read loop of conn: text frames go to onText, pongs
// to onPong; every frame and pong extends the read deadline, so a dead
// peer is noticed. Pings are answered by the library's default handler.
func (c *Client) startReader(conn *websocket.Conn, onText func([]byte), onPong func(string)) *stream {
	s := &stream{conn: conn, done: make(chan struct{})}
	rt := c.readTimeout()
	conn.SetReadLimit(readLimit)
	conn.SetPongHandler(func(p string) error {
		_ = conn.SetReadDeadline(time.Now().Add(rt))
		if onPong != nil {
			onPong(p)
		}
		return nil
	})
	go func() {
		defer close(s.done)
		for {
			_ = conn.SetReadDeadline(time.Now().Add(rt))
			mt, data, err := conn.ReadMessage()
			if err != nil {
				s.err = err
				return
			}
			if mt == websocket.TextMessage && onText != nil {
				onText(data)
			}
		}
	}()
	return s
}

// close ends the stream, politely if the peer still listens, and waits
// for the reader so that no callback runs after it returns.
func (s *stream) close() {
	_ = s.conn.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseGoingAway, ""), time.Now().Add(closeTimeout))
	_ = s.conn.Close()
	<-s.done
}

// writeText writes one text frame within writeTimeout.
func (s *stream) writeText(b []byte) error {
	_ = s.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	return s.conn.WriteMessage(websocket.TextMessage, b)
}

// ping writes a ping carrying payload.
func (s *stream) ping(payload string) error {
	return s.conn.WriteControl(websocket.PingMessage, []byte(payload), time.Now().Add(writeTimeout))
}

// closeTimeout bounds the close frame, so that shutdown stays prompt even
// when the peer is gone.
const closeTimeout = 250 * time.Millisecond

// isAuthRejection reports whether a failed handshake was a token refusal.
func isAuthRejection(resp *http.Response) bool {
	return resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden)
}

// handshakeError describes a failed WebSocket dial without its URL.
func (c *Client) handshakeError(err error, resp *http.Response) string {
	if resp != nil {
		return "handshake: " + resp.Status
	}
	return strings.TrimPrefix(c.errText(err), "websocket: ")
}
