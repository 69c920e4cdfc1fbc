package e2e

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// TestNamedTokensEndToEnd: with the real binaries, the operator (the first
// admin) makes a viewer token with agenticctl; the viewer reads the agents
// and is refused a write with 403 forbidden; after a restart the token
// still works (kept as a hash in tokens.json); revoked, it is refused with
// 401 at once.
func TestNamedTokensEndToEnd(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir)
	ctl := func(token string, args ...string) (string, string, error) {
		cmd := exec.Command(bins.Ctl, append([]string{"--server", s.RESTURL, "--token", token}, args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	out, errOut, err := ctl(s.Token, "token", "create", "viewer-1", "--role", "viewer", "--expires", "24h")
	if err != nil {
		t.Fatalf("token create: %v\n%s%s", err, out, errOut)
	}
	secret := strings.TrimSpace(out)
	if !regexp.MustCompile(`^ast_[A-Za-z0-9_-]{43}$`).MatchString(secret) {
		t.Fatalf("token create printed %q", out)
	}

	call := func(token, method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, s.RESTURL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	viewerReadsAndIsRefusedWrites := func() {
		t.Helper()
		if out, errOut, err := ctl(secret, "agents", "list"); err != nil || !strings.Contains(out, "host-01") {
			t.Fatalf("the viewer's agents list: %v\n%s%s", err, out, errOut)
		}
		if st, body := call(secret, "POST", "/api/v1/environments", `{"name":"nope","runtime":"host"}`); st != 403 || !strings.Contains(body, `"code":"forbidden"`) || !strings.Contains(body, "createEnvironment") {
			t.Fatalf("the viewer's create: %d %s", st, body)
		}
		if _, errOut, err := ctl(secret, "exec", "host-01", "--", "true"); err == nil || !strings.Contains(errOut, "forbidden, HTTP 403") {
			t.Fatalf("the viewer's exec: %v %s", err, errOut)
		}
	}
	viewerReadsAndIsRefusedWrites()

	// The list has no secret, and neither has the data dir or the log.
	out, _, err = ctl(s.Token, "token", "list", "--json")
	if err != nil || !strings.Contains(out, `"viewer-1"`) || strings.Contains(out, secret) {
		t.Fatalf("token list: %v %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "tokens.json"))
	if err != nil || strings.Contains(string(b), secret) || !strings.Contains(string(b), "viewer-1") {
		t.Fatalf("tokens.json: %v\n%s", err, b)
	}
	if strings.Contains(s.Log(), secret) {
		t.Fatal("the token's secret is in the server's log")
	}

	// A restart keeps it.
	stop(t, s)
	s = restart(t, s)
	waitAgents(t, s, "host-01")
	viewerReadsAndIsRefusedWrites()

	if out, errOut, err := ctl(s.Token, "token", "revoke", "viewer-1"); err != nil || out != "token viewer-1 revoked\n" {
		t.Fatalf("token revoke: %v %q %s", err, out, errOut)
	}
	if st, body := call(secret, "GET", "/api/v1/agents", ""); st != 401 || !strings.Contains(body, `"code":"unauthorized"`) {
		t.Fatalf("the revoked token read: %d %s", st, body)
	}
	if _, errOut, err := ctl(secret, "agents", "list"); err == nil || !strings.Contains(errOut, "unauthorized, HTTP 401") {
		t.Fatalf("the revoked token's agents list: %v %s", err, errOut)
	}
	var list restapi.TokenList
	resp, err := s.Client().ListTokensWithResponse(t.Context())
	if err != nil || resp.JSON200 == nil {
		t.Fatalf("list: %v", err)
	}
	list = *resp.JSON200
	if len(list.Tokens) != 0 {
		t.Fatalf("tokens after the revoke: %+v", list.Tokens)
	}
}
