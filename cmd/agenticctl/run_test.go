package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

const token = "operator-token-for-tests"

type fixture struct {
	link *resttest.Link
	url  string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	link := resttest.NewLink()
	link.AddAgent(ports.AgentInfo{ID: "host-01", Status: "ready", Runtime: "host", Hostname: "alpha",
		LastHeartbeat: time.Date(2026, 5, 9, 7, 13, 22, 0, time.UTC), RunningCommands: 2})
	link.AddAgent(ports.AgentInfo{ID: "vm-01", Status: "disconnected", Runtime: "vm", Hostname: "be\x1b[31mta"})
	srv := httptest.NewServer(rest.New(rest.Deps{Link: link, Agents: link, Token: token, Version: "test"}).Handler())
	t.Cleanup(srv.Close)
	return &fixture{link: link, url: srv.URL}
}

type result struct {
	code           int
	stdout, stderr string
}

// envOf makes an env func from pairs; nothing else leaks in from the
// machine running the tests.
func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func (f *fixture) run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runWith(t, envOf("AGENTIC_SERVER", f.url, "AGENTIC_OPERATOR_TOKEN", token), stdin, args...)
}

func runWith(t *testing.T, env func(string) string, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb, env)
	return result{code, out.String(), errb.String()}
}

func TestAgentsList(t *testing.T) {
	f := newFixture(t)
	r := f.run(t, "", "agents", "list")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("table:\n%s", r.stdout)
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "ID STATUS RUNTIME HOSTNAME RUNNING LAST-HEARTBEAT" {
		t.Errorf("header %q", lines[0])
	}
	if got := strings.Join(strings.Fields(lines[1]), " "); got != "host-01 ready host alpha 2 2026-05-09T07:13:22Z" {
		t.Errorf("row %q", got)
	}
	if got := strings.Join(strings.Fields(lines[2]), " "); got != "vm-01 disconnected vm be?[31mta 0 -" {
		t.Errorf("row %q (control characters must be neutralised)", got)
	}

	r = f.run(t, "", "agents", "list", "--json")
	var list struct{ Agents []map[string]any }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Agents) != 2 {
		t.Fatalf("--json: %d %s %s", r.code, r.stdout, r.stderr)
	}
}

func TestAgentsGet(t *testing.T) {
	f := newFixture(t)
	r := f.run(t, "", "agents", "get", "host-01")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var a map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil || a["id"] != "host-01" {
		t.Fatalf("output %s (%v)", r.stdout, err)
	}
	if !strings.Contains(r.stdout, "\n  \"hostname\": \"alpha\"") {
		t.Errorf("not indented:\n%s", r.stdout)
	}
	r = f.run(t, "", "agents", "get", "ghost")
	if r.code != exitError || !strings.Contains(r.stderr, "agent_not_found") || !strings.Contains(r.stderr, "agents list") {
		t.Fatalf("unknown agent: %d %q", r.code, r.stderr)
	}
	if r := f.run(t, "", "agents", "get"); r.code != exitError || !strings.Contains(r.stderr, "exactly one") {
		t.Fatalf("no id: %d %q", r.code, r.stderr)
	}
}

func TestExec(t *testing.T) {
	f := newFixture(t)
	r := f.run(t, "", "exec", "host-01", "--", "both")
	if r.code != 0 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Fatalf("both: %+v", r)
	}
	r = f.run(t, "", "exec", "host-01", "--", "fail", "3", "boom")
	if r.code != 3 || r.stderr != "boom\n" {
		t.Fatalf("fail: %+v", r)
	}
	// Without "--" too, and flags before the agent.
	r = f.run(t, "", "exec", "--timeout", "9", "--env", "A=1", "--env", "B=x=y", "--workdir", "/srv", "host-01", "echo", "hi", "--there")
	if r.code != 0 || r.stdout != "hi --there\n" {
		t.Fatalf("echo: %+v", r)
	}
	cmds := f.link.Commands()
	spec := cmds[len(cmds)-1].Spec
	if spec.Timeout != 9*time.Second || spec.Env["A"] != "1" || spec.Env["B"] != "x=y" || spec.WorkingDir != "/srv" || spec.PTY {
		t.Fatalf("spec %+v", spec)
	}
	// Binary output arrives base64-encoded and is printed as bytes.
	r = f.run(t, "", "exec", "host-01", "--", "binary")
	if r.code != 0 || r.stdout != "\xff\xfe\x00" {
		t.Fatalf("binary: %q", r.stdout)
	}
	r = f.run(t, "", "exec", "--pty", "host-01", "--", "both")
	if r.code != 0 || r.stdout != "out\nerr\n" || r.stderr != "" {
		t.Fatalf("pty: %+v", r)
	}
	cmds = f.link.Commands()
	if s := cmds[len(cmds)-1].Spec; !s.PTY || s.Timeout != 300*time.Second {
		t.Fatalf("pty spec %+v", s)
	}
	r = f.run(t, "", "exec", "host-01", "--", "no-such-program")
	if r.code != 127 || !strings.Contains(r.stderr, "could not run") {
		t.Fatalf("missing program: %+v", r)
	}
}

func TestExecStdin(t *testing.T) {
	f := newFixture(t)
	r := f.run(t, "piped in\n", "exec", "-i", "host-01", "--", "cat")
	if r.code != 0 || r.stdout != "piped in\n" {
		t.Fatalf("-i: %+v", r)
	}
	p := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(p, []byte("from a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = f.run(t, "ignored", "exec", "--stdin-file", p, "host-01", "--", "cat")
	if r.code != 0 || r.stdout != "from a file" {
		t.Fatalf("--stdin-file: %+v", r)
	}
	// Without -i, stdin is not read (and the command's stdin is closed).
	r = f.run(t, "not sent", "exec", "host-01", "--", "echo")
	cmds := f.link.Commands()
	if in, _ := cmds[len(cmds)-1].Stdin(); in != "" || cmds[len(cmds)-1].Spec.StdinOpen {
		t.Fatalf("stdin sent without -i: %q", in)
	}
	if r := f.run(t, "\xff", "exec", "-i", "host-01", "--", "cat"); r.code != exitError || !strings.Contains(r.stderr, "UTF-8") {
		t.Fatalf("binary stdin: %+v", r)
	}
	if r := f.run(t, strings.Repeat("x", 1<<20), "exec", "-i", "host-01", "--", "cat"); r.code != exitError || !strings.Contains(r.stderr, "larger") {
		t.Fatalf("big stdin: %+v", r)
	}
}

func TestExecErrors(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		args    []string
		mention string
	}{
		{[]string{"exec"}, "needs an agent"},
		{[]string{"exec", "host-01"}, "needs an agent"},
		{[]string{"exec", "host-01", "--"}, "needs a command"},
		{[]string{"exec", "-i", "--stdin-file", "x", "host-01", "--", "cat"}, "not both"},
		{[]string{"exec", "--timeout", "-1", "host-01", "--", "cat"}, "--timeout"},
		{[]string{"exec", "--timeout", "abc", "host-01", "--", "cat"}, "invalid value"},
		{[]string{"exec", "--env", "NOEQUALS", "host-01", "--", "cat"}, "KEY=VALUE"},
		{[]string{"exec", "--stdin-file", "/does/not/exist", "host-01", "--", "cat"}, "no such file"},
		{[]string{"exec", "ghost", "--", "echo"}, "agent_not_found"},
		{[]string{"exec", "vm-01", "--", "echo"}, "agent_not_connected"},
		{[]string{"exec", "--bogus", "host-01", "--", "echo"}, "--help"},
	} {
		r := f.run(t, "", tc.args...)
		if r.code != exitError || !strings.Contains(r.stderr, tc.mention) {
			t.Errorf("%q: exit %d, stderr %q; want 1 mentioning %q", tc.args, r.code, r.stderr, tc.mention)
		}
	}
}

func TestWrongTokenAndUnreachableServer(t *testing.T) {
	f := newFixture(t)
	r := runWith(t, envOf("AGENTIC_SERVER", f.url), "", "--token", "tok-XYZZY", "agents", "list")
	if r.code != exitError || !strings.Contains(r.stderr, "unauthorized") || !strings.Contains(r.stderr, "--token") {
		t.Fatalf("wrong token: %+v", r)
	}
	if strings.Contains(r.stderr, "XYZZY") {
		t.Errorf("the token is echoed: %q", r.stderr)
	}
	srv := httptest.NewServer(nil)
	dead := srv.URL
	srv.Close()
	r = runWith(t, envOf("AGENTIC_OPERATOR_TOKEN", token), "", "--server", dead, "agents", "list")
	if r.code != exitError || !strings.Contains(r.stderr, "cannot reach") || !strings.Contains(r.stderr, "AGENTIC_SERVER") {
		t.Fatalf("unreachable: %+v", r)
	}
	r = runWith(t, envOf("AGENTIC_OPERATOR_TOKEN", token), "", "--server", "ftp://x", "agents", "list")
	if r.code != exitError || !strings.Contains(r.stderr, "http(s)") {
		t.Fatalf("bad URL: %+v", r)
	}
}

func TestTokenSources(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "operator-token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// From <SECRETS_DIR>/../operator-token.
	r := runWith(t, envOf("AGENTIC_SERVER", f.url, "SECRETS_DIR", filepath.Join(dir, "secrets")), "", "agents", "list")
	if r.code != 0 {
		t.Fatalf("token file: %+v", r)
	}
	// The flag beats the environment, which beats the file.
	r = runWith(t, envOf("AGENTIC_SERVER", f.url, "AGENTIC_OPERATOR_TOKEN", "wrong", "SECRETS_DIR", filepath.Join(dir, "secrets")), "", "agents", "list")
	if r.code != exitError {
		t.Fatalf("env must beat the file: %+v", r)
	}
	r = runWith(t, envOf("AGENTIC_SERVER", f.url, "AGENTIC_OPERATOR_TOKEN", "wrong"), "", "--token", token, "agents", "list")
	if r.code != 0 {
		t.Fatalf("flag must beat env: %+v", r)
	}
	// No token anywhere: say where to put one.
	r = runWith(t, envOf("AGENTIC_SERVER", f.url, "SECRETS_DIR", filepath.Join(t.TempDir(), "secrets")), "", "agents", "list")
	if r.code != exitError || !strings.Contains(r.stderr, "AGENTIC_OPERATOR_TOKEN") || !strings.Contains(r.stderr, "operator-token") {
		t.Fatalf("no token: %+v", r)
	}
}

func TestDataDir(t *testing.T) {
	defer func(f func() int) { geteuid = f }(geteuid)
	for _, tc := range []struct {
		euid int
		env  []string
		want string
	}{
		{1000, []string{"SECRETS_DIR", "/srv/agentic/secrets/"}, "/srv/agentic"},
		{0, []string{"SECRETS_DIR", "/srv/agentic/secrets"}, "/srv/agentic"},
		{0, nil, "/var/lib/agentic-sandbox"},
		{1000, []string{"XDG_STATE_HOME", "/x/state", "HOME", "/home/u"}, "/x/state/agentic-sandbox"},
		{1000, []string{"XDG_STATE_HOME", "relative", "HOME", "/home/u"}, "/home/u/.local/state/agentic-sandbox"},
		{1000, []string{"HOME", "/home/u"}, "/home/u/.local/state/agentic-sandbox"},
	} {
		geteuid = func() int { return tc.euid }
		got, err := dataDir(envOf(tc.env...))
		if err != nil || got != tc.want {
			t.Errorf("euid %d env %v: %q, %v; want %q", tc.euid, tc.env, got, err, tc.want)
		}
	}
}

func TestDefaultServer(t *testing.T) {
	// Nothing listens on the default port in tests; the message names it.
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(defaultServer, "http://"), time.Second)
	if err == nil {
		c.Close()
	}
	testreq.Need(t, err != nil, "nothing listening on "+defaultServer, "stop what listens there (a `make run` server?)")
	r := runWith(t, envOf("AGENTIC_OPERATOR_TOKEN", token), "", "agents", "list")
	if r.code != exitError || !strings.Contains(r.stderr, defaultServer) {
		t.Fatalf("with nothing on %s: %+v; want an error naming it", defaultServer, r)
	}
}

func TestHelpAndUsage(t *testing.T) {
	env := envOf()
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"}, {"agents", "--help"}, {"agents", "list", "--help"},
		{"agents", "get", "-h"}, {"exec", "--help"},
	} {
		r := runWith(t, env, "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage") {
			t.Errorf("%q: exit %d, stdout %q", args, r.code, r.stdout)
		}
	}
	if r := runWith(t, env, "", "exec", "--help"); !strings.Contains(r.stdout, "-stdin-file") || !strings.Contains(r.stdout, "-timeout") {
		t.Errorf("exec --help lists no flags: %q", r.stdout)
	}
	for _, args := range [][]string{{}, {"frobnicate"}, {"agents"}, {"agents", "nuke"}, {"--nope"}} {
		if r := runWith(t, env, "", args...); r.code != exitError || r.stderr == "" {
			t.Errorf("%q: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}
