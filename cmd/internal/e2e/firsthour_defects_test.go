package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// Defects a new user met in the first hour (issue 27), each tried the way
// that user did.

// A root server's PATH starts with a directory only root may enter (as
// root's /root/go/bin is): its host agents, run as users of their own, do
// not get it, and a program found nowhere is "not found" (127) as the
// README says, not "permission denied" (126) on root's directory.
func TestMissingProgramOnARootServersHostAgentIsNotFound(t *testing.T) {
	needRoot(t)
	// 0700, in a 0700 directory: root's alone.
	rootOnly := t.TempDir()
	if err := os.WriteFile(filepath.Join(rootOnly, "firsthour-roots-tool"), []byte("#!/bin/sh\necho root's\n"), 0o755); err != nil { //nolint:gosec // a program
		t.Fatal(err)
	}
	s := startServer(t, 1, "", defaultHostUsers, "PATH="+rootOnly+":"+os.Getenv("PATH"))
	createHostEnv(t, s, "fh-path")
	for _, agent := range []string{"host-01", "fh-path"} {
		for _, prog := range []string{"firsthour-no-such-program", "firsthour-roots-tool"} {
			out, errOut, code := ctl(t, s.RESTURL, s.Token, "exec", agent, "--", prog)
			if code != 127 || !strings.Contains(errOut, "not found") || !strings.Contains(errOut, prog) {
				t.Errorf("%s: exec %s: exit %d, stdout %q, stderr %q; want 127 and %q not found", agent, prog, code, out, errOut, prog)
			}
		}
		r := execOK(t, s, agent, restapi.ExecRequest{Command: "firsthour-no-such-program"})
		if r.ExitCode != 127 || r.Error == nil || *r.Error != `command not found: "firsthour-no-such-program"` {
			t.Errorf("%s: REST exec of a missing program: %+v", agent, r)
		}
		// Its PATH is one its user can use: without root's directory,
		// with the system's programs.
		stdout, _ := shell(t, s, agent, `echo "$PATH"; command -v sh`)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if len(lines) != 2 || strings.Contains(lines[0], rootOnly) || !strings.HasSuffix(lines[1], "/sh") {
			t.Errorf("%s: PATH and sh: %q", agent, stdout)
		}
	}
}

// `sessions create --type interactive AGENT` with no command is the
// agent's shell, as the README says (and so is a REST create without
// one); the other types still need a command, and say so.
func TestInteractiveSessionWithoutACommandIsTheAgentsShell(t *testing.T) {
	s := startServer(t, 1, "")
	out, errOut, code := ctl(t, s.RESTURL, s.Token, "sessions", "create", "--type", "interactive", "--name", "myshell", "host-01")
	if code != 0 {
		t.Fatalf("sessions create --type interactive host-01: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	id := strings.TrimSpace(out)
	got, err := s.Client().GetSessionWithResponse(context.Background(), id)
	if err != nil || got.JSON200 == nil || got.JSON200.Type != restapi.SessionInteractive || got.JSON200.Command != "" || got.JSON200.Name != "myshell" {
		t.Fatalf("the session: %v %s", err, got.Body)
	}
	tm := attach(t, s, id)
	tm.typeUntil(t, "echo $((6*7))\r", regexp.MustCompile(`\b42\b`))
	if err := tm.proc.WriteStdin([]byte{0x1d}); err != nil { // detach
		t.Fatal(err)
	}
	if r := tm.ended(t, "on the detach key"); r.ExitCode != 0 {
		t.Fatalf("attach ended with %+v:\n%q", r, tm.output())
	}
	// The same over REST, without "command".
	interactive := restapi.SessionInteractive
	if sess := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &interactive}); sess.Command != "" || sess.Type != interactive {
		t.Fatalf("REST create without a command: %+v", sess)
	}

	// A background or headless session has nothing to run without one.
	for _, typ := range []string{"background", "headless"} {
		out, errOut, code = ctl(t, s.RESTURL, s.Token, "sessions", "create", "--type", typ, "host-01")
		if code != 1 || out != "" || !strings.Contains(errOut, "needs a command") || !strings.Contains(errOut, "--type interactive") {
			t.Errorf("sessions create --type %s host-01: exit %d, stdout %q, stderr %q", typ, code, out, errOut)
		}
		st := restapi.SessionType(typ)
		resp, err := s.Client().CreateSessionWithResponse(context.Background(), "host-01", restapi.CreateSessionRequest{Type: &st})
		if err != nil || resp.StatusCode() != 400 || !strings.Contains(string(resp.Body), `"invalid_request"`) || !strings.Contains(string(resp.Body), "command") {
			t.Errorf("REST create of a %s session without a command: %v %d %s", typ, err, resp.StatusCode(), resp.Body)
		}
	}
}
