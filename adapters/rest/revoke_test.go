package rest

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/credential"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
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
// named token ends when DELETE /api/v1/tokens revokes it, and one opened
// with a token whose expires_at passes ends then; streams of another
// named token and of the operator token stay open.
func TestRevokedOrExpiredTokenEndsOpenStreams(t *testing.T) {
	watch := credential.NewWatchers()
	e := newEnv(t, func(d *Deps) { d.Tokens = portsfake.NewTokens(); d.Watch = watch })
	gone := e.namedToken("gone", "viewer", "")
	stay := e.namedToken("stay", "viewer", "")
	soon := e.namedToken("soon", "viewer", fmt.Sprintf(`,"expires_at":%q`, e.clock.Now().Add(time.Second).UTC().Format(time.RFC3339)))
	goneStream := e.openChanges(withBearer(gone))
	stayStream := e.openChanges(withBearer(stay))
	opStream := e.openChanges(withBearer(testToken))
	soonStream := e.openChanges(withBearer(soon))

	start := time.Now()
	expect(t, e.call("DELETE", "/api/v1/tokens/gone", ""), 204, "")
	testkit.Receive(t, 15*time.Second, goneStream, "the end of the revoked token's stream")
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
