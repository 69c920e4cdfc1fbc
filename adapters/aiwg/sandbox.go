package aiwg

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"
)

// sandboxLoop keeps the sandbox registered and its stream open until ctx
// ends.
func (c *Client) sandboxLoop(ctx context.Context) {
	c.keepConnected(ctx, side{name: "sandbox", kick: c.sbxKick, register: c.registerSandbox, session: c.sandboxSession})
}

// sandboxRegistration is the body of POST /api/sandboxes/register.
type sandboxRegistration struct {
	Name         string   `json:"name"`
	InstanceID   string   `json:"instance_id"`
	GRPCEndpoint string   `json:"grpc_endpoint"`
	WSEndpoint   string   `json:"ws_endpoint"`
	HTTPEndpoint string   `json:"http_endpoint"`
	Capabilities []string `json:"capabilities"`
	Version      string   `json:"version"`
}

// registerSandbox makes the sandbox registration and records its outcome.
func (c *Client) registerSandbox(ctx context.Context) (id, token string, err error) {
	var a registrationAnswer
	err = c.postJSON(ctx, []string{"api", "sandboxes", "register"}, sandboxRegistration{
		Name:         c.cfg.Name,
		InstanceID:   c.cfg.InstanceID,
		GRPCEndpoint: c.cfg.GRPCEndpoint,
		WSEndpoint:   c.cfg.WSEndpoint,
		HTTPEndpoint: c.cfg.RESTEndpoint,
		Capabilities: c.capabilities(),
		Version:      c.cfg.Version,
	}, &a)
	if err == nil && (a.SandboxID == "" || a.Token == "") {
		err = errors.New("answer without sandbox_id or token")
	}
	if err != nil {
		return "", "", fmt.Errorf("sandbox registration: %s", c.errText(err))
	}
	c.mu.Lock()
	c.sandboxID = a.SandboxID
	c.sbxToken = a.Token
	c.rememberTokenLocked(a.Token)
	c.mu.Unlock()
	c.log.Info("aiwg: sandbox registered", "sandbox_id", a.SandboxID)
	return a.SandboxID, a.Token, nil
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
