package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// rootOnlyRepo makes a repository at dir that only root can read (0700),
// holding secret.txt with content.
func rootOnlyRepo(t *testing.T, dir, content string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	gitIn(t, dir, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	gitIn(t, dir, "add", "-A")
	gitIn(t, dir, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "secret")
}

// A server running as root reads a task's local repository as nobody: a
// root-only one named by file:// fails the task at staging, with an error
// that says so and names AGENTIC_TASK_REPO_DIRS, before an environment is
// provisioned, and nothing of it is kept; the same repository under a
// directory the setting lists is staged and run.
func TestTaskRootOnlyRepositoryRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test makes a repository only root can read; run the tests as root (CI does)")
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	marker := "root-only-" + hex.EncodeToString(b) + "\n"
	// A root-only repository in a directory anyone can reach: only its
	// own mode keeps nobody out.
	outside := t.TempDir()
	testkit.OpenToAll(t, outside)
	secret := filepath.Join(outside, "secret")
	rootOnlyRepo(t, secret, marker)
	allowed := t.TempDir()
	inside := filepath.Join(allowed, "secret")
	rootOnlyRepo(t, inside, marker)
	e := newTaskEnv(t, "AGENTIC_TASK_REPO_DIRS="+allowed)
	const manifest = "command: {argv: [sh, -c, \"cat secret.txt > REPORT.md\"]}\nenvironment: {runtime: host}\nlifecycle: {artifact_patterns: [REPORT.md]}\n"

	tk := e.run("repository: {url: \"file://" + secret + "\"}\n" + manifest)
	if tk.State != "failed" || deref(tk.Reason) != "staging_failed" {
		t.Fatalf("task: %s (%s): %s, want failed at staging", tk.State, deref(tk.Reason), deref(tk.Error))
	}
	if msg := deref(tk.Error); !strings.Contains(msg, "not readable by the unprivileged user") || !strings.Contains(msg, "AGENTIC_TASK_REPO_DIRS") || !strings.Contains(msg, secret) {
		t.Errorf("error %q: want it to say the repository is not readable by the unprivileged user and name the setting", msg)
	}
	var states []string
	for _, p := range tk.Phases {
		states = append(states, p.State)
	}
	if strings.Join(states, ",") != "pending,staging,failed" {
		t.Errorf("phases %v: want no environment provisioned", states)
	}
	if left := e.environmentsLeft(); len(left) != 0 {
		t.Errorf("environments: %v", left)
	}
	if st, body := fileDo(t, e.s, http.MethodGet, e.s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts", nil); st != http.StatusOK || strings.Contains(string(body), "REPORT.md") {
		t.Errorf("artifacts of the refused task: %d %s", st, body)
	}
	// Nothing of the repository anywhere the server keeps (staged trees
	// under task-work included), nor in its log.
	err := filepath.WalkDir(e.data, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(marker)) {
				t.Errorf("the root-only repository's content is in %s", p)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(e.s.Log(), strings.TrimSpace(marker)) {
		t.Error("the root-only repository's content is in the server's log")
	}

	// Under a listed directory the server reads it itself.
	tk = e.run("repository: {url: \"file://" + inside + "\", branch: main}\n" + manifest)
	if tk.State != "completed" {
		t.Fatalf("task from %s: %s (%s): %s", inside, tk.State, deref(tk.Reason), deref(tk.Error))
	}
	if st, report := fileDo(t, e.s, http.MethodGet, e.s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/REPORT.md", nil); st != http.StatusOK || string(report) != marker {
		t.Errorf("REPORT.md: %d %q, want the repository's file", st, report)
	}
	e.noEnvironmentsLeft()
}
