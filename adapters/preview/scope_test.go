package preview

import (
	"crypto/sha256"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
)

// A dashboard session signed in with a token whose label scope leaves an
// environment out cannot reach its previews: the path form answers as for
// an absent environment, and /preview-signin mints no code for its host.
// A public port stays public; the operator's session reaches everything.
func TestSessionOutOfScopeSeesNoPreview(t *testing.T) {
	r := newRig(t, false)
	r.signIns.WithTokens(func(id string) ([32]byte, bool) {
		return sha256.Sum256([]byte("pay-secret")), id == "tok_pay"
	})
	r.h.cfg.SessionMayReach = func(tokenID, agentID string) bool {
		return tokenID == signin.OperatorTokenID || agentID == "other"
	}
	v, exp, err := r.signIns.Mint("tok_pay", r.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	sess := signin.Cookie(v, exp, false)
	payCookie := sess.Name + "=" + sess.Value
	op := r.sessionCookie()
	opCookie := op.Name + "=" + op.Value
	c := r.client(nil, false)
	get := func(path, cookie string) (*http.Response, string) {
		return r.get(t, c, "GET", r.mainURL(path), hdr{"Cookie": cookie, "Sec-Fetch-Site": "none", "Accept": "application/json"})
	}

	resp, body := get("/preview/dev/5173/echo", payCookie)
	absent, absentBody := get("/preview/ghost/5173/echo", payCookie)
	if resp.StatusCode != 404 || !strings.Contains(body, "environment_not_found") || absent.StatusCode != 404 ||
		strings.ReplaceAll(body, "dev", "ghost") != absentBody {
		t.Fatalf("out of scope: %d %q; absent: %d %q", resp.StatusCode, body, absent.StatusCode, absentBody)
	}
	if d := r.dialer.dialed(); len(d) != 0 {
		t.Fatalf("dialed %v for a session out of scope", d)
	}
	if resp, body = get("/preview/dev/5173/echo", opCookie); resp.StatusCode != 200 {
		t.Fatalf("the operator's session: %d %q", resp.StatusCode, body)
	}

	// No code for a preview host out of scope; the operator's session gets one.
	signinURL := "/preview-signin?" + url.Values{"host": {r.host(5173, "dev")}, "next": {"/"}}.Encode()
	if resp, body = get(signinURL, payCookie); resp.StatusCode != 404 || strings.Contains(resp.Header.Get("Location"), "code=") {
		t.Fatalf("preview sign-in out of scope: %d %q %q", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	if resp, _ = get(signinURL, opCookie); resp.StatusCode != http.StatusFound || !strings.Contains(resp.Header.Get("Location"), "code=") {
		t.Fatalf("the operator's preview sign-in: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	// A public port is anyone's.
	if err := r.public.SetPublic("dev", 5173, r.clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if resp, body = get("/preview/dev/5173/echo", payCookie); resp.StatusCode != 200 {
		t.Fatalf("a public port out of scope: %d %q", resp.StatusCode, body)
	}
}
