// Package gitwork is the server's side of a task's files (ports.Workspace):
// it clones a repository with the git CLI, writes TASK.md, streams the tree
// to the agent, and takes the workspace back to keep artifacts and a patch.
//
// The tree that comes back is the workload's: its .git may carry hooks, a
// config with an fsmonitor, filters or an external diff, alternates or
// symlinks pointing at the server's files. Before git touches it, the
// config is replaced by the server's, hooks, alternates and every symlink
// inside .git are removed, and git runs with no system or global config,
// no hooks, no fsmonitor, no external diff or textconv.
//
// A repository on this machine (a path, a file:// URL) is read by a server
// running as root only as an unprivileged user (ReaderUID, nobody), unless
// it is under one of RepoDirs, directories the operator lists for the
// server to read itself: an API caller cannot have a file only root reads
// staged into an environment.
package gitwork

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/internal/tarsafe"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// PatchName is the artifact holding the changes against the base commit.
const PatchName = "changes.patch"

// TaskFile is the prompt written into the workspace, ignored by git there.
const TaskFile = "TASK.md"

// Workspace implements ports.Workspace under a directory of its own.
type Workspace struct {
	root string
	// MaxArtifactBytes caps one artifact (default 100 MiB).
	MaxArtifactBytes int64
	// RepoDirs are directories (absolute, symbolic links resolved: see
	// ParseRepoDirs) whose repositories a server running as root reads
	// itself. Any other local repository it reads as ReaderUID:ReaderGID
	// (default nobody, 65534). A server not running as root reads every
	// repository as itself.
	RepoDirs             []string
	ReaderUID, ReaderGID uint32
}

var _ ports.Workspace = (*Workspace)(nil)

// New keeps task files under root (made 0700).
func New(root string) (*Workspace, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	return &Workspace{root: root, MaxArtifactBytes: 100 << 20, ReaderUID: Nobody, ReaderGID: Nobody}, nil
}

func (w *Workspace) dir(taskID, part string) string {
	return filepath.Join(w.root, filepath.Base(taskID), part)
}

// git runs git with nothing from the system, the user or the repository
// that could run a program.
func git(ctx context.Context, dir string, extraEnv []string, args ...string) ([]byte, error) {
	cmd := gitCmd(ctx, dir, extraEnv, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 500 {
			msg = msg[:500]
		}
		return out, fmt.Errorf("git %s: %v: %s", args[0], err, msg)
	}
	return out, nil
}

func gitCmd(ctx context.Context, dir string, extraEnv []string, args ...string) *exec.Cmd {
	safe := []string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "safe.directory=*",
		"-c", "protocol.ext.allow=never", "-c", "core.sshCommand=ssh -o BatchMode=yes"}
	cmd := exec.CommandContext(ctx, "git", append(safe, args...)...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "LC_ALL=C"}
	cmd.Env = append(cmd.Env, extraEnv...)
	return cmd
}

// Stage implements ports.Workspace.
func (w *Workspace) Stage(ctx context.Context, taskID string, repo ports.TaskRepository, taskMD string) (string, error) {
	tree := w.dir(taskID, "tree")
	if err := os.RemoveAll(tree); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(tree), 0o700); err != nil {
		return "", err
	}
	url := repo.URL
	if strings.HasPrefix(url, "-") {
		return "", fmt.Errorf("repository url %q", url)
	}
	fromBundle := false
	if os.Geteuid() == 0 {
		// Before anything is cloned: what root may read is not the caller's.
		p, local, err := localPath(url)
		if err != nil {
			return "", err
		}
		if local {
			bundle := w.dir(taskID, "repo.bundle")
			if url, fromBundle, err = w.source(ctx, p, bundle); err != nil {
				return "", err
			}
			defer os.Remove(bundle)
		}
	}
	// No template (hook samples, description) and no reflogs: every file
	// is an entry to upload and to take back, and those serve nobody.
	args := []string{"-c", "core.logAllRefUpdates=false", "clone", "-q", "--template="}
	if repo.Branch != "" {
		args = append(args, "--branch", repo.Branch)
	}
	if _, err := git(ctx, filepath.Dir(tree), nil, append(args, "--", url, tree)...); err != nil {
		return "", err
	}
	if fromBundle {
		// The workload sees where the repository came from, not the bundle.
		if _, err := git(ctx, tree, nil, "remote", "set-url", "origin", "--", repo.URL); err != nil {
			return "", err
		}
	}
	if repo.Commit != "" {
		if _, err := git(ctx, tree, nil, "checkout", "-q", "--detach", repo.Commit, "--"); err != nil {
			return "", fmt.Errorf("commit %s: %w", repo.Commit, err)
		}
	}
	base, err := git(ctx, tree, nil, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	// The tree is the repository's: a TASK.md in it, perhaps a symbolic
	// link, is replaced, and nothing is written outside the tree.
	root, err := os.OpenRoot(tree)
	if err != nil {
		return "", err
	}
	defer func() { _ = root.Close() }()
	if err := root.Remove(TaskFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s: %w", TaskFile, err)
	}
	// The tree goes to the workload: its files are for the workload's user.
	if err := root.WriteFile(TaskFile, []byte(taskMD), 0o644); err != nil { //nolint:gosec // read by the workload
		return "", err
	}
	exclude := filepath.Join(".git", "info", "exclude")
	if err := root.MkdirAll(filepath.Dir(exclude), 0o755); err != nil { //nolint:gosec // read by the workload
		return "", err
	}
	f, err := root.OpenFile(exclude, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644) //nolint:gosec // read by the workload
	if err != nil {
		return "", err
	}
	_, err = fmt.Fprintf(f, "\n/%s\n", TaskFile)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return strings.TrimSpace(string(base)), err
}

// Tree implements ports.Workspace.
func (w *Workspace) Tree(_ context.Context, taskID string) (io.ReadCloser, error) {
	tree := w.dir(taskID, "tree")
	if _, err := os.Stat(tree); err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarsafe.Create(pw, tree)) }()
	return pr, nil
}

// Collect implements ports.Workspace.
func (w *Workspace) Collect(ctx context.Context, taskID string, tree io.Reader, baseCommit string, patterns []string) ([]ports.Artifact, error) {
	back := w.dir(taskID, "returned")
	arts := w.dir(taskID, "artifacts")
	for _, d := range []string{back, arts} {
		if err := os.RemoveAll(d); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	defer os.RemoveAll(back)
	if err := tarsafe.Extract(tree, back); err != nil {
		return nil, fmt.Errorf("the workspace: %w", err)
	}
	var out []ports.Artifact
	err := filepath.WalkDir(back, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(back, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && rel == ".git" {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() || rel == TaskFile || !matchAny(patterns, rel) {
			return nil
		}
		a, err := w.keep(p, arts, rel)
		if err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if baseCommit != "" {
		a, err := w.patch(ctx, back, arts, baseCommit)
		if err != nil {
			return out, fmt.Errorf("%s: %w", PatchName, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// keep copies one artifact under arts/rel, with its checksum and type.
func (w *Workspace) keep(src, arts, rel string) (ports.Artifact, error) {
	in, err := os.Open(src)
	if err != nil {
		return ports.Artifact{}, err
	}
	defer in.Close()
	dst := filepath.Join(arts, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return ports.Artifact{}, err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return ports.Artifact{}, err
	}
	h := sha256.New()
	var head bytes.Buffer
	n, err := io.Copy(io.MultiWriter(out, h, &limitedBuffer{b: &head, max: 512}), io.LimitReader(in, w.MaxArtifactBytes+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return ports.Artifact{}, err
	}
	if n > w.MaxArtifactBytes {
		_ = os.Remove(dst)
		return ports.Artifact{}, fmt.Errorf("artifact %s is over %d bytes", rel, w.MaxArtifactBytes)
	}
	ct := mime.TypeByExtension(path.Ext(rel))
	if ct == "" {
		ct = http.DetectContentType(head.Bytes())
	}
	return ports.Artifact{Name: rel, Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), ContentType: ct}, nil
}

type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// patch is every change of the tree against base: commits, modified,
// deleted and new files (TASK.md excluded), as a binary git diff that
// `git apply` applies to base.
func (w *Workspace) patch(ctx context.Context, tree, arts, base string) (ports.Artifact, error) {
	if err := defuse(filepath.Join(tree, ".git")); err != nil {
		return ports.Artifact{}, err
	}
	// A fresh index: the workload's own may say anything.
	env := []string{"GIT_INDEX_FILE=" + filepath.Join(tree, ".git", "agentic-index"), "GIT_DIR=" + filepath.Join(tree, ".git"), "GIT_WORK_TREE=" + tree}
	if _, err := git(ctx, tree, env, "add", "-A", "--", "."); err != nil {
		return ports.Artifact{}, err
	}
	diff, err := git(ctx, tree, env, "diff", "--cached", "--binary", "--full-index", "--no-ext-diff", "--no-textconv", "--no-color", base, "--")
	if err != nil {
		return ports.Artifact{}, err
	}
	p := filepath.Join(tree, ".agentic-patch")
	if err := os.WriteFile(p, diff, 0o600); err != nil {
		return ports.Artifact{}, err
	}
	a, err := w.keep(p, arts, PatchName)
	a.ContentType = "text/x-diff"
	return a, err
}

// defuse makes a returned .git safe for the server's git: the server's own
// minimal config, no hooks, no alternates, no symlinks anywhere inside.
func defuse(gitDir string) error {
	fi, err := os.Lstat(gitDir)
	if err != nil || !fi.IsDir() {
		return errors.New("the workspace has no .git directory to diff against")
	}
	for _, p := range []string{"hooks", "objects/info/alternates", "objects/info/http-alternates", "commondir", "info/attributes"} {
		if err := os.RemoveAll(filepath.Join(gitDir, p)); err != nil {
			return err
		}
	}
	if err := filepath.WalkDir(gitDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			// The tree is in the server's private 0700 directory: nothing
			// else changes it while this walks.
			return os.Remove(p) //nolint:gosec // see above
		}
		return nil
	}); err != nil {
		return err
	}
	const cfg = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
	return os.WriteFile(filepath.Join(gitDir, "config"), []byte(cfg), 0o600)
}

// matchAny matches rel against globs where ** spans any number of parts.
func matchAny(patterns []string, rel string) bool {
	for _, p := range patterns {
		if matchParts(strings.Split(p, "/"), strings.Split(rel, "/")) {
			return true
		}
	}
	return false
}

func matchParts(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchParts(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// Open implements ports.Workspace: only what Collect kept, nothing outside.
func (w *Workspace) Open(taskID, name string) (io.ReadCloser, error) {
	root, err := os.OpenRoot(w.dir(taskID, "artifacts"))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ports.ErrArtifactNotFound, name)
	}
	defer func() { _ = root.Close() }()
	f, err := root.Open(filepath.FromSlash(name))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ports.ErrArtifactNotFound, name)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s", ports.ErrArtifactNotFound, name)
	}
	return f, nil
}

// Remove implements ports.Workspace.
func (w *Workspace) Remove(taskID string) error {
	return os.RemoveAll(filepath.Join(w.root, filepath.Base(taskID)))
}
