package rest

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/internal/credential"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// openChanges opens GET /api/v1/changes with the credentials auth sets and
// reads up to its hello event; the channel gets the stream's end.
func (e *env) openChanges(auth func(*http.Request)) <-chan error {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+"/api/v1/changes", nil)
	auth(req)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		e.t.Fatalf("the change stream: %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			e.t.Fatalf("before the hello event: %v", err)
		}
		if strings.HasPrefix(line, "event: hello") {
			break
		}
	}
	ch := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, br)
		ch <- err
	}()
	return ch
}

func withBearer(token string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
}

// TestRevokedOrExpiredTokenEndsOpenStreams: a change stream opened with a
// named token ends when DELETE /api/v1/tokens revokes it, as does its
// session output stream, and one opened
// with a token whose expires_at passes ends then; streams of another
// named token and of the operator token stay open.
func TestRevokedOrExpiredTokenEndsOpenStreams(t *testing.T) {
	watch := credential.NewWatchers()
	log := resttest.NewSessionLog(0)
	sessions := resttest.NewSessions(log)
	e := newEnv(t, func(d *Deps) {
		d.Tokens, d.Watch = portsfake.NewTokens(), watch
		d.Sessions, d.SessionLog = sessions, log
	})
	sessions.Add(session.Session{ID: "s9", AgentID: "a1", Name: "b", Type: ports.SessionBackground, Command: "sh", State: session.Running})
	sessions.Output("s9", "hello\n")
	gone := e.namedToken("gone", "viewer", "")
	stay := e.namedToken("stay", "viewer", "")
	soon := e.namedToken("soon", "viewer", fmt.Sprintf(`,"expires_at":%q`, e.clock.Now().Add(time.Second).UTC().Format(time.RFC3339)))
	goneStream := e.openChanges(withBearer(gone))
	stayStream := e.openChanges(withBearer(stay))
	opStream := e.openChanges(withBearer(testToken))
	soonStream := e.openChanges(withBearer(soon))
	// A session's output stream of the token to revoke.
	req, _ := http.NewRequest("GET", e.srv.URL+"/api/v1/sessions/s9/output?from=0", nil)
	withBearer(gone)(req)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the output stream: %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "id:") && !strings.HasPrefix(line, "event:") {
		t.Fatalf("the output stream's first line: %q %v", line, err)
	}
	goneOutput := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, br)
		goneOutput <- err
	}()

	start := time.Now()
	expect(t, e.call("DELETE", "/api/v1/tokens/gone", ""), 204, "")
	testkit.Receive(t, 15*time.Second, goneStream, "the end of the revoked token's stream")
	testkit.Receive(t, 15*time.Second, goneOutput, "the end of the revoked token's session output stream")
	t.Logf("the revoked token's stream ended %v after DELETE was sent", time.Since(start))
	testkit.Receive(t, 15*time.Second, soonStream, "the end of the expired token's stream")
	for name, ch := range map[string]<-chan error{"another token's": stayStream, "the operator token's": opStream} {
		select {
		case err := <-ch:
			t.Fatalf("%s stream ended: %v", name, err)
		default:
		}
	}
	// Released: only the other named token's stream is still watched.
	testkit.Eventually(t, 15*time.Second, "the ended streams' watches released", func() bool { return watch.Watching() == 1 })
}
