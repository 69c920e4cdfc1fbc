package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/chromedp/chromedp"
)

// Issue 31, environments: an environment created over REST with an
// injected ANTHROPIC_API_KEY. Every command on its agent (exec, sessions)
// holds the placeholder and the endpoint; the fake API gets the real key;
// a restarted server serves the same placeholder again; deleting the
// environment ends it.
func TestInjectedSecretOfAnEnvironmentOnTheHostRuntime(t *testing.T) {
	api := newFakeModelAPI(t)
	client, err := os.ReadFile(filepath.Join(injectClientRepo(t), "injectclient"))
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	// Workloads run as users of their own (as the server does by default
	// as root).
	s := startServer(t, 0, data, "AGENTIC_RUNTIMES=host", "AGENTIC_HOST_USER=", "SSL_CERT_FILE="+api.caFile,
		"AGENTIC_TEST_RESOLVE=api.anthropic.com=127.0.0.1", "INJECT_REAL_KEY="+injectRealKey)
	secret := restapi.EnvironmentSecret{Name: "ANTHROPIC_API_KEY", Source: restapi.SecretSourceEnv, Key: ptr("INJECT_REAL_KEY"),
		Inject: &restapi.SecretInject{Host: "api.anthropic.com:" + api.port, Header: "x-api-key"}}
	create := func(name string, secrets []restapi.EnvironmentSecret) *restapi.CreateEnvironmentResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		r, err := s.Client().CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: "host", Name: name, Secrets: &secrets})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// run uploads injectclient into a directory the environment's commands
	// may write and runs it there; it returns results.txt and seen.txt.
	run := func(env string, args ...string) (results, seen string) {
		t.Helper()
		dir := strings.TrimSpace(execOK(t, s, env, restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "d=$(mktemp -d) && chmod 777 $d && echo $d"})}).Stdout)
		putFile(t, s, env, dir+"/injectclient", client, "0755")
		r := execOK(t, s, env, restapi.ExecRequest{Command: "./injectclient", Args: &args, WorkingDir: &dir})
		if r.ExitCode != 0 {
			t.Fatalf("injectclient %v in %s: exit %d %s %s", args, env, r.ExitCode, r.Stdout, r.Stderr)
		}
		read := func(name string) string {
			st, b := fileDo(t, s, http.MethodGet, s.RESTURL+"/api/v1/agents/"+env+"/files/content?path="+dir+"/"+name, nil)
			if st != http.StatusOK {
				t.Fatalf("%s of %s: %d %s", name, env, st, b)
			}
			return string(b)
		}
		return read("results.txt"), read("seen.txt")
	}

	// Refused at create, leaving nothing: a secret without inject, a value
	// the server cannot read (named, never a value).
	if r := create("inj-bad", []restapi.EnvironmentSecret{{Name: "PLAIN", Source: restapi.SecretSourceEnv}}); r.StatusCode() != http.StatusBadRequest ||
		!strings.Contains(string(r.Body), "invalid_request") || !strings.Contains(string(r.Body), "no inject") {
		t.Fatalf("a plain secret: %d %s", r.StatusCode(), r.Body)
	}
	missing := secret
	missing.Key = ptr("NO_SUCH_VARIABLE")
	if r := create("inj-bad", []restapi.EnvironmentSecret{missing}); r.StatusCode() != http.StatusBadRequest ||
		!strings.Contains(string(r.Body), "secret_unresolved") || !strings.Contains(string(r.Body), "NO_SUCH_VARIABLE") {
		t.Fatalf("an unresolvable secret: %d %s", r.StatusCode(), r.Body)
	}

	r := create("inj-a", []restapi.EnvironmentSecret{secret})
	if r.JSON202 == nil {
		t.Fatalf("create: %d %s", r.StatusCode(), r.Body)
	}
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", "inj-a") })
	if got := r.JSON202.Secrets; got == nil || len(*got) != 1 || (*got)[0].Name != "ANTHROPIC_API_KEY" || (*got)[0].Host != "api.anthropic.com:"+api.port {
		t.Fatalf("the environment's secrets: %s", r.Body)
	}
	waitEnvReady(t, s, "inj-a", patience)

	// A streamed request through the agent's endpoint: the API got the
	// real key, the command the events one by one.
	results, seen := run("inj-a", "stream")
	if want := "stream 200 text/event-stream\nevent message_start\nack 200 \nevent message_delta\nevent message_stop\n"; results != want {
		t.Errorf("the stream as the command saw it:\n%s\nwant:\n%s", results, want)
	}
	if keys, unacked := api.seen(); unacked || len(keys) != 2 || keys[0] != injectRealKey || keys[1] != injectRealKey {
		t.Errorf("the API saw keys %q (unacked %v), want the real key twice", keys, unacked)
	}
	if strings.Contains(seen, injectRealKey) {
		t.Errorf("the command could read the real key:\n%s", seen)
	}
	placeholder, baseURL := seenVariables(seen)
	if !strings.HasPrefix(placeholder, "agentic-placeholder-") || !strings.HasPrefix(baseURL, "http://127.0.0.1:") {
		t.Fatalf("the command's ANTHROPIC_API_KEY %q and ANTHROPIC_BASE_URL %q", placeholder, baseURL)
	}
	// A command's own variable of the same name is overridden; a session
	// gets the same.
	own := execOK(t, s, "inj-a", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "echo $ANTHROPIC_API_KEY"}),
		Env: &map[string]string{"ANTHROPIC_API_KEY": "mine"}})
	if strings.TrimSpace(own.Stdout) != placeholder {
		t.Errorf("a command naming its own ANTHROPIC_API_KEY holds %q, want the placeholder", own.Stdout)
	}
	bg := restapi.SessionBackground
	sess := createSession(t, s, "inj-a", restapi.CreateSessionRequest{Type: &bg, Name: ptr("injected"), Command: "sh",
		Args: ptr([]string{"-c", "echo session-$ANTHROPIC_API_KEY"})})
	eventually(t, patience, "the session's output", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		resp, err := s.Client().GetSessionOutput(ctx, sess.SessionId, nil)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "session-"+placeholder)
	})
	// Neither the environment's answer nor the server's log holds the key
	// or the placeholder.
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	g, err := s.Client().GetEnvironmentWithResponse(ctx, "inj-a")
	if err != nil || g.JSON200 == nil || g.JSON200.Secrets == nil || strings.Contains(string(g.Body), placeholder) || strings.Contains(string(g.Body), injectRealKey) {
		t.Fatalf("GET the environment: %v %s", err, g.Body)
	}
	// Its usage: the stream's tokens (11 in, 22 out) priced, and the ack's
	// request, as the run of a task shows them.
	if u := g.JSON200.Usage; u == nil || u.Requests < 1 || u.InputTokens != 11 || u.OutputTokens != 22 || u.CostUsd <= 0 || u.BytesReceived == 0 {
		t.Errorf("the environment's usage after the stream: %s", g.Body)
	}
	// The dashboard's environment page shows its secret and usage (a
	// screenshot, inject-env-usage, goes to the test's artifacts).
	p := newBrowser(t).newPage()
	signInAs(p, s.RESTURL+"/", s.Token, "")
	p.do("the environment's page", chromedp.Navigate(s.RESTURL+"/#/environment/inj-a"), chromedp.WaitVisible(testid("env-usage")))
	p.waitJS("its secret and usage", `(() => { const u = document.querySelector('[data-testid="env-usage"]').innerText;
		return /\b[1-9]\d* requests\b/.test(u) && /11 input, 22 output tokens/.test(u) && /cost \$0\.\d{4}/.test(u) &&
			document.querySelector('[data-testid="env-secrets"]').innerText.includes("ANTHROPIC_API_KEY") })()`)
	p.shot("inject-env-usage")

	// A restarted server reads the value again: the environment's commands
	// hold the same placeholder, and it works.
	stop(t, s)
	s = restart(t, s)
	waitEnvReady(t, s, "inj-a", patience)
	results, seen = run("inj-a", "replay", placeholder)
	if results != "replay 200 \n" || !strings.Contains(seen, "env ANTHROPIC_API_KEY="+placeholder+"\n") {
		t.Errorf("after a restart, the environment's own placeholder:\n%s", results)
	}
	if keys, _ := api.seen(); len(keys) != 3 || keys[2] != injectRealKey {
		t.Errorf("after a restart the API saw keys %q, want the real key a third time", keys)
	}

	// Deleted: its placeholder, replayed from another environment, is gone.
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "rm", "inj-a"); code != 0 {
		t.Fatalf("delete: %d %q %q", code, out, errOut)
	}
	if r := create("inj-b", []restapi.EnvironmentSecret{secret}); r.JSON202 == nil {
		t.Fatalf("create inj-b: %d %s", r.StatusCode(), r.Body)
	}
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", "inj-b") })
	waitEnvReady(t, s, "inj-b", patience)
	if results, _ := run("inj-b", "replay", placeholder); results != "replay 403 placeholder_gone\n" {
		t.Errorf("the deleted environment's placeholder replayed:\n%s", results)
	}
	if keys, _ := api.seen(); len(keys) != 3 {
		t.Errorf("the refused request reached the API: %d requests", len(keys))
	}
	assertNoKey(t, s, data)
}

// assertNoKey: nothing the server wrote holds the real key (its log, its
// data directory).
func assertNoKey(t *testing.T, s *harness.Server, data string) {
	t.Helper()
	if strings.Contains(s.Log(), injectRealKey) {
		t.Error("the server's log holds the real key")
	}
	_ = filepath.WalkDir(data, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), injectRealKey) {
			t.Errorf("%s holds the real key", p)
		}
		return nil
	})
}
