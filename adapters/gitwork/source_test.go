package gitwork

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs a server running as root; run the tests as root (CI does)")
	}
}

// repoIn makes a repository with one commit at dir (made with mode).
func repoIn(t *testing.T, dir string, mode os.FileMode, content string) {
	t.Helper()
	if err := os.MkdirAll(dir, mode); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "git", "init", "-q", "-b", "main")
	write(t, filepath.Join(dir, "secret.txt"), content)
	run(t, dir, "git", "add", "-A")
	run(t, dir, "git", "commit", "-q", "-m", "one")
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

func stagedFile(t *testing.T, w *Workspace, taskID, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(w.dir(taskID, "tree"), name))
	if err != nil {
		t.Fatalf("%s staged: %v", name, err)
	}
	return string(b)
}

// A root server reads a local repository only as nobody: one only root
// reads (0700) is refused, whatever names it (a path, file://, a symbolic
// link to it, a path with ..), before anything is cloned; a world-readable
// one beside it is staged, with its origin as given and the branch asked.
func TestRootOnlyRepositoryRefused(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	base := t.TempDir()
	public := filepath.Join(base, "public")
	repoIn(t, public, 0o755, "public\n")
	run(t, public, "git", "branch", "other")
	secret := filepath.Join(base, "secret")
	repoIn(t, secret, 0o700, "root's\n")
	if err := os.Symlink(secret, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	testkit.OpenToAll(t, public)
	w, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{public, "file://" + public, secret + "/../public"} {
		if _, err := w.Stage(ctx, "pub", ports.TaskRepository{URL: url, Branch: "other"}, "x"); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if got := stagedFile(t, w, "pub", "secret.txt"); got != "public\n" {
			t.Errorf("%s: staged %q", url, got)
		}
		if origin := run(t, w.dir("pub", "tree"), "git", "remote", "get-url", "origin"); origin != url {
			t.Errorf("origin %q, want %q", origin, url)
		}
		if br := run(t, w.dir("pub", "tree"), "git", "branch", "--show-current"); br != "other" {
			t.Errorf("branch %q", br)
		}
		if _, err := os.Stat(w.dir("pub", "repo.bundle")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the bundle is left: %v", err)
		}
	}
	for _, url := range []string{secret, "file://" + secret, filepath.Join(base, "link"), filepath.Join(public, "..", "secret"), "file://" + strings.ReplaceAll(secret, "secret", "%73ecret")} {
		_, err := w.Stage(ctx, "sec", ports.TaskRepository{URL: url}, "x")
		if !errors.Is(err, ErrRepoNotReadable) || !strings.Contains(err.Error(), RepoDirsSetting) || !strings.Contains(err.Error(), "uid 65534") {
			t.Errorf("%s: %v, want it refused as not readable by nobody, naming %s", url, err, RepoDirsSetting)
		}
		if entries, _ := os.ReadDir(w.dir("sec", "tree")); len(entries) != 0 {
			t.Errorf("%s: %d entries staged from a refused repository", url, len(entries))
		}
	}
	// A missing repository reads the same as a hidden one: nobody cannot tell.
	if _, err := w.Stage(ctx, "sec", ports.TaskRepository{URL: filepath.Join(secret, "nope")}, "x"); !errors.Is(err, ErrRepoNotReadable) {
		t.Errorf("missing under a root-only dir: %v", err)
	}
}

// Directories in RepoDirs are read by the server itself: the root-only
// repository under one is staged; a symbolic link in one to a root-only
// repository elsewhere, or a repository whose git files reach outside, is not.
func TestRepoDirsReadByTheServer(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	allowed := t.TempDir()
	secret := filepath.Join(allowed, "secret")
	repoIn(t, secret, 0o700, "root's\n")
	outside := filepath.Join(t.TempDir(), "outside")
	repoIn(t, outside, 0o700, "elsewhere\n")
	dirs, err := ParseRepoDirs(allowed)
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w.RepoDirs = dirs
	for _, url := range []string{secret, "file://" + secret} {
		if _, err := w.Stage(ctx, "ok", ports.TaskRepository{URL: url, Branch: "main"}, "x"); err != nil {
			t.Fatalf("%s under %s: %v", url, RepoDirsSetting, err)
		}
		if got := stagedFile(t, w, "ok", "secret.txt"); got != "root's\n" {
			t.Errorf("staged %q", got)
		}
	}
	// A link in the allowed dir, and .. out of it, read as nobody: refused.
	if err := os.Symlink(outside, filepath.Join(allowed, "link")); err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{filepath.Join(allowed, "link"), "file://" + filepath.Join(allowed, "link"), filepath.Join(allowed, "..", filepath.Base(filepath.Dir(outside)), "outside")} {
		if _, err := w.Stage(ctx, "esc", ports.TaskRepository{URL: url}, "x"); !errors.Is(err, ErrRepoNotReadable) {
			t.Errorf("%s: %v, want it read as nobody and refused", url, err)
		}
	}
	// Git files that reach outside: a .git file, alternates, a link in .git.
	gitfileRepo := filepath.Join(allowed, "gitfile")
	write(t, filepath.Join(gitfileRepo, ".git"), "gitdir: "+filepath.Join(outside, ".git")+"\n")
	alternates := filepath.Join(allowed, "alternates")
	repoIn(t, alternates, 0o700, "mine\n")
	write(t, filepath.Join(alternates, ".git", "objects", "info", "alternates"), filepath.Join(outside, ".git", "objects")+"\n")
	linked := filepath.Join(allowed, "linked")
	repoIn(t, linked, 0o700, "mine\n")
	if err := os.Symlink(filepath.Join(outside, ".git", "refs", "heads"), filepath.Join(linked, ".git", "refs", "remotes")); err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(allowed, "notgit")
	if err := os.Mkdir(bare, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, bare+".git"); err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{gitfileRepo, alternates, linked} {
		if _, err := w.Stage(ctx, "esc", ports.TaskRepository{URL: url}, "x"); !errors.Is(err, ErrRepoEscapes) {
			t.Errorf("%s: %v, want it refused for reaching outside", url, err)
		}
	}
	// git would try notgit.git beside a directory that is no repository.
	if _, err := w.Stage(ctx, "esc", ports.TaskRepository{URL: bare}, "x"); err == nil || !strings.Contains(err.Error(), "not a git repository") {
		t.Errorf("a directory that is no repository: %v", err)
	}
	if entries, _ := os.ReadDir(w.dir("esc", "tree")); len(entries) != 0 {
		t.Errorf("%d entries staged from refused repositories", len(entries))
	}
}

// A repository's own TASK.md, even a symbolic link, is replaced: nothing
// is written through it.
func TestStageReplacesTheRepositorysTaskFile(t *testing.T) {
	ctx := context.Background()
	repo := t.TempDir()
	target := filepath.Join(t.TempDir(), "victim")
	write(t, target, "untouched\n")
	run(t, repo, "git", "init", "-q", "-b", "main")
	if err := os.Symlink(target, filepath.Join(repo, TaskFile)); err != nil {
		t.Fatal(err)
	}
	run(t, repo, "git", "add", "-A")
	run(t, repo, "git", "commit", "-q", "-m", "link")
	testkit.OpenToAll(t, repo)
	w, _ := New(t.TempDir())
	if _, err := w.Stage(ctx, "t", ports.TaskRepository{URL: repo}, "the prompt\n"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "untouched\n" {
		t.Errorf("written through the repository's link: %q", b)
	}
	if got := stagedFile(t, w, "t", TaskFile); got != "the prompt\n" {
		t.Errorf("TASK.md %q", got)
	}
}

func TestParseRepoDirs(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "file"), "x")
	got, err := ParseRepoDirs(" " + filepath.Join(dir, "link") + " ," + real + ":")
	if err != nil || len(got) != 2 || got[0] != real || got[1] != real {
		t.Errorf("ParseRepoDirs: %q %v, want the links resolved", got, err)
	}
	if got, err := ParseRepoDirs(""); err != nil || got != nil {
		t.Errorf("empty: %q %v", got, err)
	}
	for _, bad := range []string{"relative/dir", filepath.Join(dir, "missing"), filepath.Join(dir, "file")} {
		if _, err := ParseRepoDirs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestLocalPath(t *testing.T) {
	for _, c := range []struct {
		url, path string
		local     bool
		bad       bool
	}{
		{url: "/srv/repo", path: "/srv/repo", local: true},
		{url: "/srv/x/../repo/", path: "/srv/repo", local: true},
		{url: "file:///srv/my%20repo", path: "/srv/my repo", local: true},
		{url: "file://host/srv/repo", local: true, bad: true},
		{url: "file:///srv/%zz", local: true, bad: true},
		{url: "relative/repo", local: true, bad: true},
		{url: "./a:b", local: true, bad: true},
		{url: "https://example.com/r.git"},
		{url: "ssh://git@example.com/r.git"},
		{url: "git@example.com:r.git"},
		{url: "example.com:r.git"},
	} {
		p, local, err := localPath(c.url)
		if local != c.local || (err != nil) != c.bad || (!c.bad && p != c.path) {
			t.Errorf("localPath(%q) = %q %v %v", c.url, p, local, err)
		}
	}
}
