package ports

import (
	"context"
	"errors"
	"io"
	"time"
)

// Errors of a connection into an environment.
var (
	// ErrPortNotListening: the agent dialed the port inside its
	// environment and nothing accepted (connection refused).
	ErrPortNotListening = errors.New("nothing listens on that port inside the environment")
	// ErrTooManyForwards: the environment holds as many forwarded
	// connections as it may (a preview or port-forward answers 503).
	ErrTooManyForwards = errors.New("too many connections into this environment")
	// ErrPortRefused: the port may not be reached this way (0, or one of
	// the server's own ports seen from a host agent).
	ErrPortRefused = errors.New("that port may not be reached through the agent")
)

// PortDialer opens TCP connections to ports inside an agent's environment,
// carried over the agent's link: the agent dials the port itself (on
// loopback, or the address the port listens on), so it works in an
// environment without a network device. Previews and port-forward use it.
type PortDialer interface {
	// DialPort returns a connection to port inside agentID's environment.
	// Errors: ErrAgentNotConnected, ErrPortNotListening,
	// ErrTooManyForwards, ErrPortRefused, or ctx's. Closing the connection
	// ends it inside too. A connection idle in both directions for the
	// dialer's idle time is closed.
	DialPort(ctx context.Context, agentID string, port uint16) (Conn, error)
}

// Conn is a connection into an environment: a byte stream both ways that
// can end its write side and keep reading (a *net.TCPConn is one, and the
// agent link's connections are net.Conns too).
type Conn interface {
	io.ReadWriteCloser
	HalfCloser
	// SetDeadline and its halves work as net.Conn's.
	SetDeadline(t time.Time) error
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
}

// HalfCloser is a connection that can end its write side and keep reading.
type HalfCloser interface {
	CloseWrite() error
}

// PublicPort is a port of an environment anyone may reach through its
// preview URL, without signing in, until Until.
type PublicPort struct {
	Environment string
	Port        uint16
	Until       time.Time
}

// MaxPublicFor is the longest a port may be public at once; DefaultPublicFor
// is how long when the caller does not say.
const (
	MaxPublicFor     = 30 * 24 * time.Hour
	DefaultPublicFor = time.Hour
)

// PublicPorts remembers which environment ports are public, across
// restarts of the server.
type PublicPorts interface {
	// SetPublic makes port public until until (replacing an earlier mark).
	SetPublic(env string, port uint16, until time.Time) error
	// SetPrivate removes a mark; removing none is not an error.
	SetPrivate(env string, port uint16) error
	// PublicUntil says until when port is public; ok is false for a port
	// that is not (never marked, removed, or expired at now).
	PublicUntil(env string, port uint16, now time.Time) (until time.Time, ok bool)
	// Public lists env's live marks at now, by port.
	Public(env string, now time.Time) []PublicPort
	// ForgetEnvironment removes every mark of env (it was deleted).
	ForgetEnvironment(env string) error
}
