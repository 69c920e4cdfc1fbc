package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// changeStream reads GET /api/v1/changes: each event's kinds, in order.
type changeStream struct {
	events chan []string
	cancel func()
}

func watchChanges(t *testing.T, s *harness.Server, query string) *changeStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.RESTURL+"/api/v1/changes"+query, nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("changes: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	cs := &changeStream{events: make(chan []string, 1024), cancel: func() { cancel(); resp.Body.Close() }}
	t.Cleanup(cs.cancel)
	go func() {
		defer close(cs.events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var v struct{ Kinds []string }
				if json.Unmarshal([]byte(data), &v) != nil {
					return
				}
				cs.events <- v.Kinds
			}
		}
	}()
	return cs
}

// waitFor reads events until one names kind.
func (cs *changeStream) waitFor(t *testing.T, kind string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case kinds, ok := <-cs.events:
			if !ok {
				t.Fatalf("the change stream ended before %q", kind)
			}
			if slices.Contains(kinds, kind) {
				return
			}
		case <-deadline:
			t.Fatalf("no %q change within 20 s", kind)
		}
	}
}

// drain forgets what was said so far (after a quiet moment).
func (cs *changeStream) drain(quiet time.Duration) {
	for {
		select {
		case <-cs.events:
		case <-time.After(quiet):
			return
		}
	}
}

// Live views follow the server: GET /api/v1/changes names what changed
// when it changes, for agents, sessions and tasks, and needs the token.
func TestTheChangeStreamNamesWhatChanged(t *testing.T) {
	s := startServer(t, 1, "")
	resp, err := http.Get(s.RESTURL + "/api/v1/changes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a token: %d, want 401", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, s.RESTURL+"/api/v1/changes?interval_ms=5", nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("interval_ms=5: %d, want 400", resp.StatusCode)
	}

	cs := watchChanges(t, s, "?interval_ms=50")
	hello := <-cs.events
	for _, k := range []string{"agents", "environments", "sessions", "missions", "hitl", "tasks"} {
		if !slices.Contains(hello, k) {
			t.Fatalf("hello names %v, not %q", hello, k)
		}
	}
	// Heartbeats change agents all the time; a session is a change of
	// sessions that nothing else makes here.
	cs.drain(300 * time.Millisecond)
	bg := restapi.SessionType("background")
	sess := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &bg, Command: "sleep", Args: &[]string{"30"}})
	cs.waitFor(t, "sessions")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if r, err := s.Client().KillSessionWithResponse(ctx, sess.SessionId); err != nil || r.StatusCode() >= 300 {
		t.Fatalf("kill: %v %v", err, r)
	}
	cs.waitFor(t, "sessions")
	// A command is a change of the agent's running commands.
	execOK(t, s, "host-01", restapi.ExecRequest{Command: "true"})
	cs.waitFor(t, "agents")
	// An environment's steps are changes of environments.
	if r, err := s.Client().CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: "host", Name: "watched"}); err != nil || r.StatusCode() >= 300 {
		t.Fatalf("create environment: %v %v", err, r)
	}
	cs.waitFor(t, "environments")
	// A task is a change of tasks.
	e := &taskEnv{t: t, s: s}
	if code, body := e.submit("version: \"1\"\nkind: Task\ncommand: {argv: [\"true\"]}\nenvironment: {runtime: host}\n"); code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", code, body)
	}
	cs.waitFor(t, "tasks")
}
