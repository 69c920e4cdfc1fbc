package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// New returns a client of the server whose REST API is at baseURL (for
// example "http://127.0.0.1:8122", or https behind a proxy; a path prefix is
// kept). Options set the token ([WithToken]), the *http.Client
// ([WithHTTPClient]; the default has no timeout, so bound calls with their
// context) and per-request editors ([WithRequestEditorFn]).
//
// Every call of the result returns an [*APIError] when the server answers
// with a status of 400 or more.
func New(baseURL string, opts ...ClientOption) (*ClientWithResponses, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http:// or https:// and a host", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: base URL %q: no query or fragment", baseURL)
	}
	c, err := NewClient(baseURL, opts...)
	if err != nil {
		return nil, err
	}
	c.Client = statusErrors{next: c.Client}
	return &ClientWithResponses{ClientInterface: c}, nil
}

// WithToken sends token as "Authorization: Bearer <token>" on every request.
// The operator's token reaches every operation; an executor's only those
// the API grants it.
func WithToken(token string) ClientOption {
	return func(c *Client) error {
		token = strings.TrimSpace(token)
		if token == "" {
			return errors.New("client: empty token")
		}
		c.RequestEditors = append(c.RequestEditors, func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+token)
			return nil
		})
		return nil
	}
}

// APIError is the server's answer to a request it refused or failed: the
// HTTP status and the body's {"error", "code"}.
type APIError struct {
	// StatusCode is the HTTP status, 400 or more.
	StatusCode int
	// Code is the body's stable snake_case "code" (agent_not_found,
	// unauthorized, ...), for programs. Empty when the body was not the
	// API's error (a proxy's page, say).
	Code string
	// Message is the body's "error", for people; when the body was not the
	// API's error, its start.
	Message string
	// Method and Path are the request's, for the message.
	Method, Path string
}

func (e *APIError) Error() string {
	code := e.Code
	if code == "" {
		code = http.StatusText(e.StatusCode)
	}
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.StatusCode, code, e.Message)
}

// ErrorCode returns the code of the [*APIError] in err's chain, or "" when
// there is none (a transport error, say).
func ErrorCode(err error) string {
	var e *APIError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Ptr returns a pointer to v, for the API's optional fields:
// ExecRequest{Command: "ls", Args: client.Ptr([]string{"-l"})}.
func Ptr[T any](v T) *T { return &v }

// maxErrorBody bounds what is read of an error's body.
const maxErrorBody = 64 << 10

// statusErrors turns a response of status 400 or more into an *APIError.
type statusErrors struct{ next HttpRequestDoer }

func (d statusErrors) Do(req *http.Request) (*http.Response, error) {
	resp, err := d.next.Do(req)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &APIError{StatusCode: resp.StatusCode, Method: req.Method, Path: req.URL.Path}
	var wire struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if json.Unmarshal(body, &wire) == nil && wire.Code != "" {
		e.Code, e.Message = wire.Code, wire.Error
	} else {
		msg := []rune(strings.TrimSpace(string(body)))
		if len(msg) > 200 {
			msg = append(msg[:200], '…')
		}
		e.Message = string(msg)
	}
	return nil, e
}
