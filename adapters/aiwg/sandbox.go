package aiwg

import (
	"context"
	"errors"
	"net/url"
	"time"
)

// sandboxLoop registers the sandbox and keeps its stream open, registering
// again after every lost connection, until ctx ends.
func (c *Client) sandboxLoop(ctx context.Context) {
	backoff := c.cfg.BackoffMin
	for ctx.Err() == nil {
		id, token, err := c.registerSandbox(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait := jitter(backoff)
			c.log.Warn("aiwg: sandbox registration failed", "err", err.Error(), "retry_in", wait.Round(time.Millisecond))
			if !sleep(ctx, wait, c.sbxKick) {
				return
			}
			backoff = nextBackoff(backoff, c.cfg.BackoffMax)
			continue
		}
		c.mu.Lock()
		c.sandboxID = id
		c.sbxToken = token
		c.rememberTokenLocked(token)
		c.mu.Unlock()
		c.log.Info("aiwg: sandbox registered", "sandbox_id", id)

		up, err := c.sandboxSession(ctx, id, token)
		if ctx.Err() != nil {
			return
		}
		if up {
			backoff = c.cfg.BackoffMin
		}
		wait := jitter(backoff)
		c.log.Warn("aiwg: sandbox stream down", "err", err.Error(), "retry_in", wait.Round(time.Millisecond))
		if !sleep(ctx, wait, c.sbxKick) {
			return
		}
		backoff = nextBackoff(backoff, c.cfg.BackoffMax)
	}
}

// sandboxSession holds one sandbox stream open until it breaks or ctx ends.
// Nothing is sent on it but keepalives; inbound frames are not ours to
// act on.
func (c *Client) sandboxSession(ctx context.Context, id, token string) (up bool, err error) {
	raw := c.streamURL(token, "ws", "sandbox", url.PathEscape(id))
	conn, resp, err := c.dial(ctx, raw)
	if err != nil {
		if isAuthRejection(resp) {
			return false, errors.New("sandbox stream token rejected")
		}
		return false, errors.New("sandbox stream " + c.handshakeError(err, resp))
	}
	c.log.Info("aiwg: sandbox stream connected", "url", redactURL(raw))
	s := c.startReader(conn, func(b []byte) {
		c.log.Debug("aiwg: sandbox stream frame ignored", "bytes", len(b))
	}, nil)
	defer s.close()
	t := time.NewTicker(c.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-s.done:
			return true, errors.New(c.errText(s.err))
		case <-c.sbxKick:
			// Already connected: nothing to skip.
		case <-t.C:
			if err := s.ping(""); err != nil {
				return true, errors.New(c.errText(err))
			}
		}
	}
}
