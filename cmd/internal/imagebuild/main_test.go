package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/internal/busyboxroot"
	"github.com/agentic-sandbox/agentic-sandbox/internal/ociimage"
)

func TestRunWritesBothArchivesAndSaysWhat(t *testing.T) {
	bb, err := busyboxroot.Find("")
	if err != nil {
		t.Fatalf("%v: run scripts/docker-test-env.sh (make test-env)", err)
	}
	out := filepath.Join(t.TempDir(), "images")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-agent", bb, "-out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("printed %q: want one line per archive", stdout.String())
	}
	for i, want := range []struct{ file, ref string }{
		{ociimage.AgentArchive, ociimage.AgentImage},
		{ociimage.WorkloadArchive, ociimage.WorkloadImage},
	} {
		f := strings.Split(lines[i], "\t")
		if len(f) != 3 || f[0] != filepath.Join(out, want.file) || f[1] != want.ref || !strings.HasPrefix(f[2], "sha256:") {
			t.Fatalf("line %q: want %s, %s and its digest", lines[i], want.file, want.ref)
		}
		if st, err := os.Stat(f[0]); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f[0], err)
		}
	}
}

func TestRunWithMgmtAlsoWritesTheServerImage(t *testing.T) {
	bb, err := busyboxroot.Find("")
	if err != nil {
		t.Fatalf("%v: run scripts/docker-test-env.sh (make test-env)", err)
	}
	out := filepath.Join(t.TempDir(), "images")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-agent", bb, "-mgmt", bb, "-out", out, "-version", "9.9.9"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("printed %q: want the agent, workload and server archives", stdout.String())
	}
	f := strings.Split(lines[2], "\t")
	if len(f) != 3 || f[0] != filepath.Join(out, ociimage.ServerArchive) || f[1] != ociimage.ServerRepository+":9.9.9" || !strings.HasPrefix(f[2], "sha256:") {
		t.Fatalf("line %q: want %s, %s:9.9.9 and its digest", lines[2], ociimage.ServerArchive, ociimage.ServerRepository)
	}
	if st, err := os.Stat(f[0]); err != nil || st.Size() == 0 {
		t.Fatalf("%s: %v", f[0], err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"-agent", bb, "-mgmt", "/bin/ls", "-out", t.TempDir()}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "dynamically linked") {
		t.Fatalf("-mgmt /bin/ls: exit %d, stderr %q: want 1, dynamically linked", code, stderr.String())
	}
}

func TestRunRefusesBadInvocations(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"-out", t.TempDir(), "extra"}, 2, "unexpected arguments"},
		{[]string{"-nosuchflag"}, 2, "flag provided but not defined"},
		{[]string{"-agent", "/bin/ls", "-out", t.TempDir()}, 1, "dynamically linked"},
		{[]string{"-agent", filepath.Join(t.TempDir(), "missing"), "-out", t.TempDir()}, 1, "no such file"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.says) || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stderr %q, stdout %q: want exit %d saying %q", c.args, code, stderr.String(), stdout.String(), c.code, c.says)
		}
	}
}
