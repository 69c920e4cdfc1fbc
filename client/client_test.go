package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/client"
)

// fake answers GET /agents with one agent to the token "tok", the API's
// 401 to any other, and the API's 404 for any agent.
func fake(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/agents", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"missing or invalid bearer token","code":"unauthorized"}`))
			return
		}
		w.Write([]byte(`{"agents":[{"id":"a1","hostname":"h","labels":{},"running_commands":0,"runtime":"host","status":"ready"}]}`))
	})
	mux.HandleFunc("GET /api/v1/agents/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":"agent \"` + r.PathValue("id") + `\" not found","code":"agent_not_found"}`))
	})
	mux.HandleFunc("GET /api/v1/environments", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		w.Write([]byte("<html>" + strings.Repeat("bad gateway ", 100) + "</html>"))
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func TestTokenAndBody(t *testing.T) {
	s := fake(t)
	c, err := client.New(s.URL, client.WithToken("tok"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.ListAgentsWithResponse(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.JSON200 == nil || len(r.JSON200.Agents) != 1 || r.JSON200.Agents[0].Id != "a1" || r.JSON200.Agents[0].Status != client.Ready {
		t.Fatalf("got %d %s", r.StatusCode(), r.Body)
	}
}

func TestAPIError(t *testing.T) {
	s := fake(t)
	for _, tc := range []struct {
		name, token, path string
		call              func(*client.ClientWithResponses) error
		status            int
		code, message     string
	}{
		{"wrong token", "nope", "/api/v1/agents", func(c *client.ClientWithResponses) error {
			_, err := c.ListAgentsWithResponse(context.Background(), nil)
			return err
		}, 401, "unauthorized", "missing or invalid bearer token"},
		{"not found", "tok", "/api/v1/agents/x1", func(c *client.ClientWithResponses) error {
			_, err := c.GetAgentWithResponse(context.Background(), "x1")
			return err
		}, 404, "agent_not_found", `agent "x1" not found`},
		{"raw call", "tok", "/api/v1/agents/x2", func(c *client.ClientWithResponses) error {
			resp, err := c.GetAgent(context.Background(), "x2")
			if err == nil {
				resp.Body.Close()
			}
			return err
		}, 404, "agent_not_found", `agent "x2" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(s.URL, client.WithToken(tc.token))
			if err != nil {
				t.Fatal(err)
			}
			err = tc.call(c)
			var e *client.APIError
			if !errors.As(err, &e) {
				t.Fatalf("want *APIError, got %T %v", err, err)
			}
			if e.StatusCode != tc.status || e.Code != tc.code || e.Message != tc.message || e.Method != "GET" || e.Path != tc.path {
				t.Fatalf("got %+v", e)
			}
			if client.ErrorCode(err) != tc.code {
				t.Fatalf("ErrorCode = %q", client.ErrorCode(err))
			}
			if msg := err.Error(); !strings.Contains(msg, tc.code) || !strings.Contains(msg, tc.message) || !strings.Contains(msg, tc.path) {
				t.Fatalf("message %q", msg)
			}
		})
	}
}

// A refusal that is not the API's (a proxy's page) is still an *APIError,
// with no code and the start of the body.
func TestForeignError(t *testing.T) {
	s := fake(t)
	c, err := client.New(s.URL, client.WithToken("tok"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ListEnvironmentsWithResponse(context.Background(), nil)
	var e *client.APIError
	if !errors.As(err, &e) {
		t.Fatalf("want *APIError, got %T %v", err, err)
	}
	if e.StatusCode != 502 || e.Code != "" || !strings.HasPrefix(e.Message, "<html>bad gateway") || len([]rune(e.Message)) != 201 {
		t.Fatalf("got %+v", e)
	}
	if !strings.Contains(e.Error(), "502 Bad Gateway") {
		t.Fatalf("message %q", e.Error())
	}
}

// No answer at all is the transport's error, not an *APIError.
func TestTransportError(t *testing.T) {
	s := httptest.NewServer(http.NotFoundHandler())
	url := s.URL
	s.Close()
	c, err := client.New(url, client.WithToken("tok"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ListAgentsWithResponse(context.Background(), nil)
	var e *client.APIError
	if err == nil || errors.As(err, &e) || client.ErrorCode(err) != "" {
		t.Fatalf("got %T %v", err, err)
	}
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		url, token string
	}{
		{"127.0.0.1:8122", "tok"},
		{"ftp://h", "tok"},
		{"http://", "tok"},
		{"http://h/?a=b", "tok"},
		{"http://h", ""},
		{"http://h", "  "},
	} {
		if _, err := client.New(tc.url, client.WithToken(tc.token)); err == nil {
			t.Errorf("New(%q, WithToken(%q)) accepted", tc.url, tc.token)
		}
	}
}
