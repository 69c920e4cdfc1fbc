package aiwg

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// wireEvent is one event frame. Seq stays local: it orders the outbox,
// aiwg serve has no use for it.
type wireEvent struct {
	Event      ports.EventType `json:"event"`
	ExecutorID string          `json:"executor_id"`
	MissionID  string          `json:"mission_id,omitempty"`
	TS         string          `json:"ts"`
	Data       map[string]any  `json:"data"`
}

// encodeEvent renders ev as an executor stream frame.
func encodeEvent(ev ports.Event, executorID string, now time.Time) ([]byte, error) {
	ts := ev.TS
	if ts.IsZero() {
		ts = now
	}
	data := ev.Data
	if data == nil {
		data = map[string]any{}
	}
	w := wireEvent{Event: ev.Type, ExecutorID: executorID, MissionID: ev.MissionID, TS: ports.FormatTimestamp(ts), Data: data}
	if ev.Type == ports.EventResync { // the first frame on every connect; it has no mission
		w.MissionID = ""
	}
	return json.Marshal(w)
}

// inboundFrame is what aiwg serve sends on the executor stream.
type inboundFrame struct {
	Event ports.EventType `json:"event"`
	Data  json.RawMessage `json:"data"`
}

type hitlResponded struct {
	HITLID *string `json:"hitl_id"`
	Text   *string `json:"text"`
}

// hubCallTimeout bounds a hub call made for an inbound frame, so that the
// reader gets back to reading (and answering pings) soon.
const hubCallTimeout = 10 * time.Second

// handleInbound acts on one inbound text frame. Nothing it is given may
// break the connection: bad frames are logged and dropped. Frame contents
// are not logged, since a HITL answer may be sensitive.
func (c *Client) handleInbound(ctx context.Context, raw []byte) {
	var f inboundFrame
	if err := json.Unmarshal(raw, &f); err != nil {
		c.log.Warn("aiwg: malformed frame on executor stream ignored", "bytes", len(raw), "err", c.scrub(err.Error()))
		return
	}
	switch f.Event {
	case ports.EventHITLResponded:
		var d hitlResponded
		if len(f.Data) == 0 || json.Unmarshal(f.Data, &d) != nil || d.HITLID == nil || *d.HITLID == "" || d.Text == nil {
			c.log.Warn("aiwg: mission.hitl_responded without hitl_id and text ignored")
			return
		}
		if c.cfg.Hub == nil {
			return
		}
		hctx, cancel := context.WithTimeout(ctx, hubCallTimeout)
		defer cancel()
		if err := c.cfg.Hub.HITLResponded(hctx, *d.HITLID, *d.Text); err != nil {
			c.log.Warn("aiwg: HITL answer not applied", "hitl_id", *d.HITLID, "err", c.scrub(err.Error()))
		}
	case "":
		c.log.Warn("aiwg: frame without event ignored", "bytes", len(raw))
	default:
		c.log.Debug("aiwg: unknown event on executor stream ignored", "event", truncate(string(f.Event), 64))
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// endpointURL joins escaped path segments to the base endpoint, with the
// userinfo moved out (it goes into an Authorization header instead).
func (c *Client) endpointURL(segments ...string) *url.URL {
	u := *c.base
	u.User = nil
	u.Fragment, u.RawFragment = "", ""
	return u.JoinPath(segments...)
}

// streamURL is the ws(s) URL of a stream, the token in its query.
func (c *Client) streamURL(token string, segments ...string) string {
	u := c.endpointURL(segments...)
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	q := u.Query()
	q.Set("token", token)
	u.RawQuery = q.Encode()
	return u.String()
}

// authHeader carries the endpoint's userinfo, if any, as basic auth.
func (c *Client) authHeader(h http.Header) {
	if c.base.User == nil {
		return
	}
	pw, _ := c.base.User.Password()
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(c.base.User.Username()+":"+pw)))
}

// statusError is a registration answered with an HTTP error.
type statusError struct{ status string }

func (e *statusError) Error() string { return e.status }

// postJSON posts body and decodes a 2xx answer into out. Error messages
// name only the status: answers may carry tokens, so no body is quoted.
func (c *Client) postJSON(ctx context.Context, segments []string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpointURL(segments...).String(), bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	c.authHeader(req.Header)
	resp, err := c.httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
		return &statusError{status: resp.Status}
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(out); err != nil {
		return errors.New("malformed answer")
	}
	return nil
}

type sandboxRegistration struct {
	Name         string   `json:"name"`
	InstanceID   string   `json:"instance_id"`
	GRPCEndpoint string   `json:"grpc_endpoint"`
	WSEndpoint   string   `json:"ws_endpoint"`
	HTTPEndpoint string   `json:"http_endpoint"`
	Capabilities []string `json:"capabilities"`
	Version      string   `json:"version"`
}

type sandboxAnswer struct {
	SandboxID string `json:"sandbox_id"`
	Token     string `json:"token"`
}

type transportEndpoints struct {
	REST string `json:"rest"`
	WS   string `json:"ws"`
}

type executorRegistration struct {
	ExecutorID         string             `json:"executor_id"`
	Name               string             `json:"name"`
	Version            string             `json:"version"`
	SpecVersion        string             `json:"spec_version"`
	TransportEndpoints transportEndpoints `json:"transport_endpoints"`
	Capabilities       []string           `json:"capabilities"`
}

type executorAnswer struct {
	ExecutorID string `json:"executor_id"`
	Token      string `json:"token"`
}

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

// registerSandbox makes the sandbox registration.
func (c *Client) registerSandbox(ctx context.Context) (id, token string, err error) {
	var a sandboxAnswer
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
	return a.SandboxID, a.Token, nil
}

// registerExecutor makes the executor registration.
func (c *Client) registerExecutor(ctx context.Context) (id, token string, err error) {
	var a executorAnswer
	err = c.postJSON(ctx, []string{"api", "v1", "executors", "register"}, executorRegistration{
		ExecutorID:  c.cfg.InstanceID,
		Name:        c.ExecutorName(),
		Version:     c.cfg.Version,
		SpecVersion: SpecVersion,
		TransportEndpoints: transportEndpoints{
			REST: c.cfg.RESTEndpoint,
			WS:   c.cfg.WSEndpoint,
		},
		Capabilities: c.capabilities(),
	}, &a)
	if err == nil && a.Token == "" {
		err = errors.New("answer without token")
	}
	if err != nil {
		return "", "", fmt.Errorf("executor registration: %s", c.errText(err))
	}
	id = a.ExecutorID
	if id == "" {
		id = c.cfg.InstanceID
	}
	return id, a.Token, nil
}

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
