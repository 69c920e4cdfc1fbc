package aiwg

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
)

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

// registrationAnswer is aiwg serve's answer to either registration: the
// sandbox's has a sandbox_id, the executor's an executor_id.
type registrationAnswer struct {
	SandboxID  string `json:"sandbox_id"`
	ExecutorID string `json:"executor_id"`
	Token      string `json:"token"`
}

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
