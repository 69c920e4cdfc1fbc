package agentrpc

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// An agent's request for an injected secret reaches the handler signed in,
// without its credentials; a wrong secret or no handler is refused.
func TestInjectRouteSignsInTheAgent(t *testing.T) {
	h := newHarness(t)
	type call struct{ agent, secret, path, query, body string }
	calls := make(chan call, 4)
	send := func(id, secret string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, h.url+InjectPath+"ANTHROPIC_API_KEY/v1/messages?beta=true", strings.NewReader(`{"m":1}`))
		req.Header.Set(HeaderAgentID, id)
		req.Header.Set(HeaderAgentSecret, secret)
		resp, err := h.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := send("agent-a", secretPrefix+"agent-a"); code != http.StatusNotFound || !strings.Contains(body, "secret_unknown") {
		t.Fatalf("without a handler: %d %s", code, body)
	}
	h.svc.SetInject(func(w http.ResponseWriter, r *http.Request, agentID, secret, path string) {
		if r.Header.Get(HeaderAgentSecret) != "" || r.Header.Get(HeaderAgentID) != "" {
			t.Errorf("the agent's credentials went on: %v", r.Header)
		}
		b, _ := io.ReadAll(r.Body)
		calls <- call{agentID, secret, path, r.URL.RawQuery, string(b)}
		w.WriteHeader(http.StatusTeapot)
	})
	if code, _ := send("agent-a", secretPrefix+"agent-a"); code != http.StatusTeapot {
		t.Fatalf("signed in: %d", code)
	}
	if c := <-calls; c != (call{"agent-a", "ANTHROPIC_API_KEY", "/v1/messages", "beta=true", `{"m":1}`}) {
		t.Fatalf("handler got %+v", c)
	}
	for _, bad := range [][2]string{{"agent-a", "wrong"}, {"agent-a", secretPrefix + "agent-b"}, {"", ""}, {"nobody", "x"}} {
		if code, body := send(bad[0], bad[1]); code != http.StatusUnauthorized || !strings.Contains(body, "unauthorized") {
			t.Errorf("%v: %d %s", bad, code, body)
		}
	}
	if len(calls) != 0 {
		t.Fatal("a refused request reached the handler")
	}
}
