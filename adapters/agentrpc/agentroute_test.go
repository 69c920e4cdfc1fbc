package agentrpc

import (
	"errors"
	"net/http"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// unreadableCreds is a credential store that cannot be read.
type unreadableCreds struct{ ports.AgentCredentials }

func (unreadableCreds) Verify(string, string) (bool, error) {
	return false, errors.New("disk gone")
}

// Every agent-port HTTP route turns away a wrong secret with 401 and, while
// the credential store cannot be read, answers 503 so the agent tries again
// instead of taking its secret for wrong.
func TestAgentRoutesSignInAlike(t *testing.T) {
	routes := []struct{ method, path string }{
		{http.MethodGet, ForwardRawPath},
		{http.MethodGet, TunnelRawPath},
		{http.MethodGet, InjectPath + "some-secret/v1/x"},
		{http.MethodPost, OutputPath + "cmd-1/stdout"},
		{http.MethodGet, OutputPath + "cmd-1/pty"},
		{http.MethodGet, DataPath + "t-1"},
		{http.MethodPost, DataPath + "t-1"},
	}
	good := newHarness(t)
	broken := newHarness(t, func(c *Config) { c.Credentials = unreadableCreds{c.Credentials} })
	for _, rt := range routes {
		for _, tc := range []struct {
			name   string
			h      *harness
			secret string
			want   int
		}{
			{"wrong secret", good, "not-it", http.StatusUnauthorized},
			{"no secret", good, "", http.StatusUnauthorized},
			{"store unreadable", broken, secretPrefix + "agent-a", http.StatusServiceUnavailable},
		} {
			req, err := http.NewRequest(rt.method, tc.h.url+rt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(HeaderAgentID, "agent-a")
			if tc.secret != "" {
				req.Header.Set(HeaderAgentSecret, tc.secret)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			if res.StatusCode != tc.want {
				t.Errorf("%s %s, %s: status %d, want %d", rt.method, rt.path, tc.name, res.StatusCode, tc.want)
			}
		}
	}
}
