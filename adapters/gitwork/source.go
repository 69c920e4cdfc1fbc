package gitwork

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// RepoDirsSetting names the setting that lists RepoDirs (agentic-mgmt's
// AGENTIC_TASK_REPO_DIRS); errors name it so an operator knows what to change.
const RepoDirsSetting = "AGENTIC_TASK_REPO_DIRS"

// Nobody is who a root server reads local repositories as, outside RepoDirs.
const Nobody = 65534

// ErrRepoNotReadable is a local repository the unprivileged reader cannot
// read (a missing one reads the same: its existence is not told).
var ErrRepoNotReadable = errors.New("not readable by the unprivileged user")

// ErrRepoEscapes is a repository under RepoDirs whose git files reach
// outside them (a gitfile, alternates or a symbolic link).
var ErrRepoEscapes = errors.New("reaches outside " + RepoDirsSetting)

// ParseRepoDirs reads the RepoDirs setting: absolute paths of existing
// directories, separated by commas or colons, empty for none. Each is
// returned with its symbolic links resolved, so that a repository is
// matched against where the directory really is.
func ParseRepoDirs(list string) ([]string, error) {
	var dirs []string
	for _, d := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ':' }) {
		d = strings.TrimSpace(d)
		if d == "" {
			continue
		}
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("%q is not an absolute path", d)
		}
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", d, err)
		}
		if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%q is not a directory", d)
		}
		dirs = append(dirs, real)
	}
	return dirs, nil
}

// localPath is the filesystem path of a repository URL git reads from this
// machine (an absolute path, a file:// URL, anything that is not a remote
// URL), or ok false for a remote one (scheme://, or scp-like host:path).
func localPath(u string) (p string, ok bool, err error) {
	if rest, isFile := strings.CutPrefix(u, "file://"); isFile {
		if !strings.HasPrefix(rest, "/") {
			return "", true, fmt.Errorf("repository url %q: a file URL names no host (file:///path)", u)
		}
		if p, err = url.PathUnescape(rest); err != nil {
			return "", true, fmt.Errorf("repository url %q: %w", u, err)
		}
		return filepath.Clean(p), true, nil
	}
	if strings.Contains(u, "://") {
		return "", false, nil
	}
	// git's rule: a colon before any slash makes it ssh's host:path.
	if i := strings.IndexByte(u, ':'); i > 0 && !strings.Contains(u[:i], "/") {
		return "", false, nil
	}
	if !filepath.IsAbs(u) {
		return "", true, fmt.Errorf("repository url %q: a local repository is an absolute path", u)
	}
	return filepath.Clean(u), true, nil
}

// source is what a root server clones for a local repository at p: the
// repository itself when it is under RepoDirs (its symbolic links
// resolved), else a bundle of it that the unprivileged reader wrote.
func (w *Workspace) source(ctx context.Context, p, bundle string) (src string, isBundle bool, err error) {
	real, err := filepath.EvalSymlinks(p)
	if err == nil && w.inRepoDirs(real) {
		if err := w.confined(real); err != nil {
			return "", false, fmt.Errorf("repository %s: %w", p, err)
		}
		return real, false, nil
	}
	if err := w.bundleAsReader(ctx, p, bundle); err != nil {
		return "", false, err
	}
	return bundle, true, nil
}

func (w *Workspace) inRepoDirs(real string) bool {
	for _, d := range w.RepoDirs {
		if rel, err := filepath.Rel(d, real); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// confined checks that what git reads of the repository at real (resolved,
// under RepoDirs) stays under RepoDirs: the git directory (a .git file or
// link followed), every symbolic link inside it, its common dir and its
// alternates, each resolved.
func (w *Workspace) confined(real string) error {
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	gitDir := real
	if fi.IsDir() {
		dotGit := filepath.Join(real, ".git")
		switch gi, err := os.Lstat(dotGit); {
		case err == nil && gi.Mode().IsRegular():
			target, err := gitfile(dotGit)
			if err != nil {
				return err
			}
			gitDir = target
		case err == nil:
			gitDir = dotGit
		case errors.Is(err, fs.ErrNotExist):
			// Bare: git would otherwise try <path>.git beside it.
			if _, err := os.Stat(filepath.Join(real, "HEAD")); err != nil {
				return errors.New("not a git repository")
			}
		default:
			return err
		}
	} else if target, err := gitfile(real); err == nil {
		gitDir = target
	}
	return w.confinedDir(gitDir, map[string]bool{})
}

// gitfile reads a "gitdir: <path>" file; a relative path is from its directory.
func gitfile(p string) (string, error) {
	b, err := os.ReadFile(p) //nolint:gosec // a repository under RepoDirs, which the operator trusts
	if err != nil {
		return "", err
	}
	rest, ok := bytes.CutPrefix(b, []byte("gitdir: "))
	if !ok {
		return "", fmt.Errorf("%s is not a gitfile", p)
	}
	target := strings.TrimSpace(string(rest))
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(p), target)
	}
	return target, nil
}

func (w *Workspace) confinedDir(dir string, seen map[string]bool) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if !w.inRepoDirs(real) {
		return fmt.Errorf("%w: %s is %s", ErrRepoEscapes, dir, real)
	}
	if seen[real] || len(seen) > 8 {
		return nil
	}
	seen[real] = true
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error { //nolint:gosec // checked under RepoDirs above
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return err
		}
		to, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil //nolint:nilerr // a dangling link reads nothing
		}
		if !w.inRepoDirs(to) {
			return fmt.Errorf("%w: %s links to %s", ErrRepoEscapes, p, to)
		}
		if fi, err := os.Stat(to); err == nil && fi.IsDir() {
			return w.confinedDir(to, seen)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if b, err := os.ReadFile(filepath.Join(real, "commondir")); err == nil { //nolint:gosec // under RepoDirs
		common := strings.TrimSpace(string(b))
		if !filepath.IsAbs(common) {
			common = filepath.Join(real, common)
		}
		if err := w.confinedDir(common, seen); err != nil {
			return err
		}
	}
	objects := filepath.Join(real, "objects")
	if _, err := os.Stat(objects); err != nil { //nolint:gosec // under RepoDirs
		// An alternate is an objects directory itself.
		objects = real
	}
	f, err := os.Open(filepath.Join(objects, "info", "alternates")) //nolint:gosec // under RepoDirs
	if err != nil {
		return nil //nolint:nilerr // no alternates
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		alt := strings.TrimSpace(sc.Text())
		if alt == "" || strings.HasPrefix(alt, "#") {
			continue
		}
		if !filepath.IsAbs(alt) {
			alt = filepath.Join(objects, alt)
		}
		if err := w.confinedDir(alt, seen); err != nil {
			return err
		}
	}
	return sc.Err()
}

// bundleAsReader writes every ref of the repository at p (and the objects
// they reach) into bundle, read by a git running as the unprivileged
// reader: a repository it cannot read is refused with ErrRepoNotReadable.
// Nothing the reader writes is ever run or followed by the server: it
// only reads the bundle, a pack, from the reader's stdout.
func (w *Workspace) bundleAsReader(ctx context.Context, p, bundle string) error {
	if strings.Contains(filepath.Dir(p), ":") {
		return fmt.Errorf("repository %s: a local repository read by the unprivileged user has no ':' in its directory's path", p)
	}
	out, err := os.OpenFile(bundle, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	// Discovery stops at p: git reads p (a work tree or a bare repository),
	// never a repository above it.
	cmd := gitCmd(ctx, p, []string{"GIT_CEILING_DIRECTORIES=" + filepath.Dir(p)}, "bundle", "create", "-q", "-", "--all")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: w.ReaderUID, Gid: w.ReaderGID, Groups: []uint32{}}}
	cmd.Stdout = out
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if cerr := out.Close(); err == nil && cerr != nil {
		return cerr
	}
	if err == nil {
		return nil
	}
	_ = os.Remove(bundle)
	msg := strings.TrimSpace(stderr.String())
	if len(msg) > 500 {
		msg = msg[:500]
	}
	if strings.Contains(msg, "empty bundle") {
		return fmt.Errorf("repository %s has no commits", p)
	}
	var why string
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) && msg == "" {
		why = pe.Err.Error() // the reader could not enter the directory
	} else if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		why = msg
	} else {
		why = err.Error()
	}
	return fmt.Errorf("repository %s: %w (uid %d), as which a server running as root reads local repositories; "+
		"for the server to read it itself, list a directory holding it in %s: %s", p, ErrRepoNotReadable, w.ReaderUID, RepoDirsSetting, why)
}
