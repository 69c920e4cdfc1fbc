// Package tarsafe moves directory trees as tar without letting an archive
// write outside its target: every entry is checked before anything is
// written (a refused archive writes nothing), names with ".." or absolute
// names are refused, device nodes and FIFOs are never created, and no
// symbolic link is followed while extracting (a link is created as a link,
// and nothing is written through one).
package tarsafe

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ErrRefused wraps every reason an archive is refused.
var ErrRefused = errors.New("archive refused")

// CheckName returns the cleaned relative path of a tar entry name, or why it
// is refused: empty, absolute, or with a ".." component.
func CheckName(name string) (string, error) {
	if name == "" || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("%w: empty or NUL in name %q", ErrRefused, name)
	}
	if strings.HasPrefix(name, "/") || filepath.IsAbs(name) {
		return "", fmt.Errorf("%w: absolute name %q", ErrRefused, name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: %q climbs out with ..", ErrRefused, name)
		}
	}
	clean := path.Clean(name)
	if clean == "." {
		return ".", nil
	}
	return clean, nil
}

// checkHeader refuses what Extract never creates.
func checkHeader(h *tar.Header) (string, error) {
	name, err := CheckName(h.Name)
	if err != nil {
		return "", err
	}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return "", fmt.Errorf("%w: %q is a device node or FIFO", ErrRefused, h.Name)
	case tar.TypeLink:
		return "", fmt.Errorf("%w: %q is a hard link", ErrRefused, h.Name)
	default:
		if h.Typeflag != tar.TypeXGlobalHeader && h.Typeflag != tar.TypeXHeader {
			return "", fmt.Errorf("%w: %q has an unsupported type %q", ErrRefused, h.Name, h.Typeflag)
		}
	}
	return name, nil
}

// Extract writes the archive r into dir (which must exist). It first spools
// r to a temporary file (in $TMPDIR, else beside dir) and checks every
// entry, so a refused
// archive writes nothing into dir; then it extracts, creating symlinks as
// links and refusing to write through any symlink, even one the archive
// itself made.
func Extract(r io.Reader, dir string) error {
	spool, err := os.CreateTemp("", ".tarsafe-*")
	if err != nil {
		if spool, err = os.CreateTemp(filepath.Dir(filepath.Clean(dir)), ".tarsafe-*"); err != nil {
			return err
		}
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	if _, err := io.Copy(spool, r); err != nil {
		return fmt.Errorf("reading the archive: %w", err)
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	// Nothing may be written through a symbolic link: one the archive
	// makes, or one already in dir.
	links := map[string]bool{}
	tr := tar.NewReader(spool)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRefused, err)
		}
		name, err := checkHeader(h)
		if err != nil {
			return err
		}
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			if links[p] {
				return fmt.Errorf("%w: %q would be written through the archive's symlink %q", ErrRefused, h.Name, p)
			}
			if fi, err := root.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				return fmt.Errorf("%w: %q would be written through the symlink %q", ErrRefused, h.Name, p)
			}
		}
		if h.Typeflag == tar.TypeSymlink {
			links[name] = true
		} else {
			delete(links, name)
		}
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return err
	}
	tr = tar.NewReader(spool)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name, _ := checkHeader(h)
		if name == "." || h.Typeflag == tar.TypeXGlobalHeader || h.Typeflag == tar.TypeXHeader {
			continue
		}
		if err := extractOne(root, name, h, tr); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
}

// extractOne creates one entry through root, which refuses any path that
// leaves dir, symlinks included.
func extractOne(root *os.Root, name string, h *tar.Header, r io.Reader) error {
	if parent := path.Dir(name); parent != "." {
		if err := mkdirAll(root, parent); err != nil {
			return err
		}
	}
	mode := fs.FileMode(h.Mode).Perm() //nolint:gosec // tar modes fit; only the permission bits are kept
	switch h.Typeflag {
	case tar.TypeDir:
		if err := root.Mkdir(name, mode|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return nil
	case tar.TypeSymlink:
		_ = root.Remove(name)
		return root.Symlink(h.Linkname, name)
	default:
		_ = root.Remove(name) // replace, never write through a link there
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
}

func mkdirAll(root *os.Root, dir string) error {
	cur := ""
	for _, part := range strings.Split(dir, "/") {
		cur = path.Join(cur, part)
		if err := root.Mkdir(cur, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// Create writes the tree at dir to w as tar: regular files, directories and
// symbolic links (kept as links, never followed); other files are skipped.
func Create(w io.Writer, dir string) error {
	// The walk goes through root, every step relative to a directory it
	// holds open: a link swapped in while walking cannot make it list or
	// read outside dir, and a tree deeper than PATH_MAX (which Linux
	// allows, and Extract makes) is archived whole, where a path from /
	// would fail with ENAMETOOLONG half-way through.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	tw := tar.NewWriter(w)
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = root.Readlink(rel); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return nil
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = rel
		if info.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := root.Open(rel)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(tw, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
