package e2e

import (
	"os"
	"path/filepath"
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
