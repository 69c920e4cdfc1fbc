// Package aiwg connects agentic-mgmt to an external `aiwg serve`: it
// registers the sandbox and the executor, keeps the sandbox stream and the
// executor stream open, delivers the mission events of the durable outbox on
// the executor stream (at-least-once, in order) and hands inbound HITL
// answers to the mission service. The two sides run independently, so a
// failure on one never stalls the other.
package aiwg

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Config is what the client needs to know.
type Config struct {
	// Endpoint is AIWG_SERVE_ENDPOINT, http(s)://host:port[/base]; "" turns
	// the integration off.
	Endpoint string
	// Name is AIWG_SERVE_NAME (default "agentic-sandbox"), the display name;
	// the executor registers as "agentic-sandbox-<Name>".
	Name string
	// InstanceID is this instance's UUIDv7, also the executor_id.
	InstanceID string
	Version    string
	// Advertised endpoints, e.g. http://host:8120, ws://host:8121, http://host:8122.
	GRPCEndpoint, WSEndpoint, RESTEndpoint string
	// Capabilities is evaluated at each registration, so it reflects what is
	// reachable at that moment.
	Capabilities func() []string
	Hub          ports.ExecutorHub
	Outbox       ports.EventOutbox
	Logger       *slog.Logger
	Clock        ports.Clock
	HTTPClient   *http.Client
	// Reconnect backoff, 1 s doubling to 30 s by default.
	BackoffMin, BackoffMax time.Duration
	// PingInterval is the WebSocket keepalive (default 15 s); a peer silent
	// for 2.5 intervals is taken as dead.
	PingInterval time.Duration
}

// DefaultName is AIWG_SERVE_NAME's default.
const DefaultName = "agentic-sandbox"

// SpecVersion is the executor contract version this client speaks.
const SpecVersion = "1.0.0"

const (
	// writeTimeout bounds one frame write, so a stuck peer is dropped.
	writeTimeout = 10 * time.Second
	// requestTimeout bounds one registration request.
	requestTimeout = 15 * time.Second
	// maxBody bounds what is read of a registration answer.
	maxBody = 1 << 20
	// confirmDelay is how long live events wait for the ping that has
	// them confirmed, so that one confirmation covers a burst.
	confirmDelay = 20 * time.Millisecond
)

// Client is the link to aiwg serve; it implements ports.ExecutorLink.
type Client struct {
	cfg   Config
	log   *slog.Logger
	base  *url.URL // nil when unconfigured or invalid
	bad   string   // why the endpoint is unusable
	httpc *http.Client

	// execKick and sbxKick carry Reconnect requests (capacity 1).
	execKick, sbxKick chan struct{}

	mu         sync.Mutex
	sandboxID  string
	execID     string // as acknowledged by aiwg serve
	execToken  string
	sbxToken   string // kept only so that it can be scrubbed from messages
	regErr     string
	connected  bool
	everTokens []string // every token issued so far, to scrub from messages
}

var _ ports.ExecutorLink = (*Client)(nil)

// New builds a client; Run starts it.
func New(cfg Config) *Client {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = time.Second
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 30 * time.Second
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = cfg.BackoffMin
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Wall{}
	}
	c := &Client{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "aiwg"),
		httpc:    cfg.HTTPClient,
		execKick: make(chan struct{}, 1),
		sbxKick:  make(chan struct{}, 1),
	}
	if c.httpc == nil {
		c.httpc = &http.Client{}
	}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		switch {
		case err != nil:
			c.bad = "invalid AIWG_SERVE_ENDPOINT"
		case u.Scheme != "http" && u.Scheme != "https":
			c.bad = "invalid AIWG_SERVE_ENDPOINT: scheme must be http or https"
		case u.Host == "":
			c.bad = "invalid AIWG_SERVE_ENDPOINT: no host"
		default:
			c.base = u
		}
	}
	return c
}

// ExecutorName is the name the executor registers under.
func (c *Client) ExecutorName() string { return "agentic-sandbox-" + c.cfg.Name }

// capabilities asks for the current capabilities; never null on the wire.
func (c *Client) capabilities() []string {
	var caps []string
	if c.cfg.Capabilities != nil {
		caps = c.cfg.Capabilities()
	}
	if caps == nil {
		caps = []string{}
	}
	return caps
}

// Run keeps both sides connected until ctx ends. With no endpoint it
// returns at once and contacts nothing.
func (c *Client) Run(ctx context.Context) {
	if !c.Configured() {
		return
	}
	if c.base == nil {
		c.log.Error("aiwg integration disabled", "reason", c.bad, "endpoint", redactURL(c.cfg.Endpoint))
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.sandboxLoop(ctx) })
	wg.Go(func() { c.executorLoop(ctx) })
	wg.Wait()
}

// side is one of the two registrations the client keeps, each with a
// stream of its own: the executor's and the sandbox's.
type side struct {
	name string // for the logs
	kick <-chan struct{}
	// register registers and records the outcome.
	register func(ctx context.Context) (id, token string, err error)
	// session holds one stream open; up reports whether it got through.
	session func(ctx context.Context, id, token string) (up bool, err error)
}

// keepConnected registers a side and holds its stream open until ctx ends.
// It registers before every connect, as the contract asks after every lost
// connection: that also renews a token aiwg serve may have forgotten (a
// restart of aiwg serve, a 401 on the stream).
func (c *Client) keepConnected(ctx context.Context, s side) {
	backoff := c.cfg.BackoffMin
	for ctx.Err() == nil {
		what := "registration failed"
		id, token, err := s.register(ctx)
		up := false
		if err == nil {
			what = "stream down"
			up, err = s.session(ctx, id, token)
		}
		if ctx.Err() != nil {
			return
		}
		if up {
			backoff = c.cfg.BackoffMin
		}
		if errors.Is(err, errKicked) {
			continue
		}
		wait := jitter(backoff)
		c.log.Warn("aiwg: "+s.name+" "+what, "err", c.scrub(err.Error()), "retry_in", wait.Round(time.Millisecond))
		if !sleep(ctx, wait, s.kick) {
			return
		}
		backoff = nextBackoff(backoff, c.cfg.BackoffMax)
	}
}

// Configured reports whether AIWG_SERVE_ENDPOINT is set.
func (c *Client) Configured() bool { return c.cfg.Endpoint != "" }

// Registered reports whether the executor registration holds a token.
func (c *Client) Registered() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.execToken != ""
}

// ExecutorID is the id aiwg serve acknowledged, or this instance's id
// (which is what the executor registers with) before that.
func (c *Client) ExecutorID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.execID != "" {
		return c.execID
	}
	return c.cfg.InstanceID
}

// VerifyToken compares a dispatch bearer token with the executor token.
// Both are hashed first so that the comparison leaks not even the length.
func (c *Client) VerifyToken(token string) bool {
	c.mu.Lock()
	want := c.execToken
	c.mu.Unlock()
	if token == "" || want == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// Status is what GET /api/v1/aiwg/status shows. Never a token.
func (c *Client) Status() ports.ExecutorStatus {
	if !c.Configured() {
		return ports.ExecutorStatus{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	regErr := c.regErr
	if c.base == nil {
		regErr = c.bad
	}
	return ports.ExecutorStatus{
		Configured:            true,
		Connected:             c.connected,
		Endpoint:              redactURL(c.cfg.Endpoint),
		SandboxID:             c.sandboxID,
		ExecutorID:            c.execID,
		ExecutorRegisterError: c.scrubLocked(regErr),
	}
}

// Reconnect skips the current backoff wait of both sides and, when the
// executor stream is up, drops it and reconnects now.
func (c *Client) Reconnect() {
	for _, ch := range []chan struct{}{c.execKick, c.sbxKick} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// flushPoll is how often Flush looks at the outbox; acks arrive on the
// stream's reader, which has no hook to wake Flush directly.
const flushPoll = 10 * time.Millisecond

// Flush waits until the outbox holds nothing beyond what aiwg serve has
// confirmed, or ctx ends. Unconfigured, there is nothing to flush to.
func (c *Client) Flush(ctx context.Context) error {
	if !c.Configured() || c.cfg.Outbox == nil {
		return nil
	}
	t := time.NewTicker(flushPoll)
	defer t.Stop()
	for {
		evs, err := c.cfg.Outbox.Pending(c.cfg.Outbox.Acked(), 1)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// rememberTokenLocked records a freshly issued token so that it is scrubbed
// from any message, even after it was replaced.
func (c *Client) rememberTokenLocked(tok string) {
	if tok == "" {
		return
	}
	for _, t := range c.everTokens {
		if t == tok {
			return
		}
	}
	// A handful is enough: older tokens are dead on the peer anyway.
	if len(c.everTokens) >= 8 {
		c.everTokens = c.everTokens[1:]
	}
	c.everTokens = append(c.everTokens, tok)
}

// scrub removes any token from a message meant for a log or a status.
func (c *Client) scrub(s string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scrubLocked(s)
}

func (c *Client) scrubLocked(s string) string {
	s = redactText(s)
	for _, t := range c.everTokens {
		s = strings.ReplaceAll(s, t, redacted)
	}
	return s
}

// errText is an error as it may be shown: url.Error's URL dropped (the
// operation is named by the caller) and tokens scrubbed.
func (c *Client) errText(err error) string {
	if err == nil {
		return ""
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return c.scrub(err.Error())
}

// sleep waits d, or less if kick fires; false when ctx ended.
func sleep(ctx context.Context, d time.Duration, kick <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-kick:
	}
	return true
}

// jitter spreads reconnects of many instances over the lower fifth of the
// wait, so the 30 s cap still holds.
func jitter(d time.Duration) time.Duration {
	return d - time.Duration(rand.Float64()*0.2*float64(d)) //nolint:gosec // jitter needs no unpredictability
}

func nextBackoff(cur, maxB time.Duration) time.Duration {
	return min(cur*2, maxB)
}
