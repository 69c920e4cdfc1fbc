package gitwork

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/internal/tarsafe"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@x", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@x")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func write(t *testing.T, p, content string) {
	t.Helper()
	_ = os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// origin is a repository with two commits on main and a branch, that
// anyone may read (a root server reads it as nobody).
func origin(t *testing.T) (dir, first string) {
	dir = t.TempDir()
	defer testkit.OpenToAll(t, dir)
	run(t, dir, "git", "init", "-q", "-b", "main")
	write(t, filepath.Join(dir, "a.txt"), "a1\n")
	write(t, filepath.Join(dir, "b.txt"), "b1\n")
	run(t, dir, "git", "add", "-A")
	run(t, dir, "git", "commit", "-q", "-m", "one")
	first = run(t, dir, "git", "rev-parse", "HEAD")
	write(t, filepath.Join(dir, "a.txt"), "a2\n")
	run(t, dir, "git", "commit", "-q", "-am", "two")
	return dir, first
}

func TestStageCollectAndPatch(t *testing.T) {
	ctx := context.Background()
	repo, first := origin(t)
	w, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base, err := w.Stage(ctx, "t1", ports.TaskRepository{URL: repo, Branch: "main", Commit: first}, "do the thing\n")
	if err != nil {
		t.Fatal(err)
	}
	if base != first {
		t.Fatalf("base %s, want the requested commit %s", base, first)
	}
	// The agent's side: the tree as the workload sees it.
	ws := t.TempDir()
	tr, err := w.Tree(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarsafe.Extract(tr, ws); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "a1\n" {
		t.Fatalf("checked out a.txt = %q, want the requested commit's", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, TaskFile)); string(b) != "do the thing\n" {
		t.Fatalf("TASK.md = %q", b)
	}
	if st := run(t, ws, "git", "status", "--porcelain"); st != "" {
		t.Fatalf("TASK.md shows in git status: %q", st)
	}
	// The agent works: a commit, then uncommitted edits, a delete, new files.
	write(t, filepath.Join(ws, "c.txt"), "committed\n")
	run(t, ws, "git", "add", "c.txt")
	run(t, ws, "git", "commit", "-q", "-m", "agent")
	write(t, filepath.Join(ws, "a.txt"), "edited\n")
	_ = os.Remove(filepath.Join(ws, "b.txt"))
	write(t, filepath.Join(ws, "new/d.bin"), "\x00\x01binary")
	write(t, filepath.Join(ws, "REPORT.md"), "# report\n")
	write(t, filepath.Join(ws, "reports/x/y/r.json"), `{"ok":true}`)
	write(t, filepath.Join(ws, "reports/skip.txt"), "no")
	// And plants what would run code on the server's git.
	marker := filepath.Join(t.TempDir(), "pwned")
	write(t, filepath.Join(ws, ".git/hooks/pre-commit"), "#!/bin/sh\ntouch "+marker+"\n")
	_ = os.Chmod(filepath.Join(ws, ".git/hooks/pre-commit"), 0o755)
	write(t, filepath.Join(ws, ".git/config"), "[core]\n\tfsmonitor = touch "+marker+"\n[diff]\n\texternal = touch "+marker+"\n[filter \"x\"]\n\tclean = touch "+marker+"\n")
	write(t, filepath.Join(ws, ".gitattributes"), "* filter=x diff=x\n")
	_ = os.Symlink("/etc", filepath.Join(ws, ".git/objects/etc"))

	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarsafe.Create(pw, ws)) }()
	arts, err := w.Collect(ctx, "t1", pr, base, []string{"REPORT.md", "reports/**/*.json"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the workload's git config or hook ran on the server")
	}
	names := map[string]ports.Artifact{}
	for _, a := range arts {
		names[a.Name] = a
	}
	if len(arts) != 3 || names["REPORT.md"].Size != 9 || names["reports/x/y/r.json"].ContentType != "application/json" || names[PatchName].Size == 0 {
		t.Fatalf("artifacts %+v", arts)
	}
	sum := sha256.Sum256([]byte("# report\n"))
	if names["REPORT.md"].SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("sha256 %s", names["REPORT.md"].SHA256)
	}
	// The patch applied to a fresh clone at base reproduces the agent's tree.
	fresh := t.TempDir()
	run(t, fresh, "git", "clone", "-q", repo, ".")
	run(t, fresh, "git", "checkout", "-q", base)
	f, err := w.Open("t1", PatchName)
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := io.ReadAll(f)
	f.Close()
	if strings.Contains(string(patch), TaskFile) {
		t.Error("the patch carries TASK.md")
	}
	write(t, filepath.Join(t.TempDir(), "p"), "")
	pfile := filepath.Join(t.TempDir(), "changes.patch")
	write(t, pfile, string(patch))
	run(t, fresh, "git", "apply", "--binary", pfile)
	for p, want := range map[string]string{"a.txt": "edited\n", "c.txt": "committed\n", "new/d.bin": "\x00\x01binary", "REPORT.md": "# report\n"} {
		if b, err := os.ReadFile(filepath.Join(fresh, p)); err != nil || string(b) != want {
			t.Errorf("%s after the patch: %q %v", p, b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(fresh, "b.txt")); !os.IsNotExist(err) {
		t.Errorf("b.txt after the patch: %v", err)
	}
	// Only kept artifacts open; nothing outside.
	for _, bad := range []string{"../tree/a.txt", "/etc/passwd", "reports/skip.txt", "nope"} {
		if _, err := w.Open("t1", bad); !errors.Is(err, ports.ErrArtifactNotFound) {
			t.Errorf("Open(%q): %v", bad, err)
		}
	}
	if err := w.Remove("t1"); err != nil {
		t.Fatal(err)
	}
}

func TestStageFailures(t *testing.T) {
	ctx := context.Background()
	repo, _ := origin(t)
	w, _ := New(t.TempDir())
	for name, r := range map[string]ports.TaskRepository{
		"unreachable commit": {URL: repo, Commit: "0123456789abcdef0123456789abcdef01234567"},
		"missing branch":     {URL: repo, Branch: "nope"},
		"missing repository": {URL: filepath.Join(t.TempDir(), "none")},
	} {
		if _, err := w.Stage(ctx, "t2", r, "x"); err == nil {
			t.Errorf("%s: staged", name)
		}
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pat, name string
		ok        bool
	}{
		{"REPORT.md", "REPORT.md", true}, {"REPORT.md", "x/REPORT.md", false}, {"**/REPORT.md", "x/REPORT.md", true},
		{"**/REPORT.md", "REPORT.md", true}, {"reports/**/*.json", "reports/a.json", true}, {"reports/**/*.json", "reports/a/b/c.json", true},
		{"reports/**/*.json", "reports/a.txt", false}, {"*.md", "a/b.md", false}, {"**", "anything/at/all", true},
	} {
		if got := matchAny([]string{c.pat}, c.name); got != c.ok {
			t.Errorf("%s ~ %s = %v", c.pat, c.name, got)
		}
	}
}
