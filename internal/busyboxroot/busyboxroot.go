// Package busyboxroot builds the root filesystem of the project's default
// images from the host's static busybox (Debian's busybox-static), so that
// no registry is needed: the Docker runtime imports it as
// agentic-sandbox/base:busybox and internal/ociimage packs it as the default
// workload image.
package busyboxroot

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
	"time"
)

// Find returns a statically linked busybox (want, or the Debian
// busybox-static paths when want is empty): the images have no libc.
func Find(want string) (string, error) {
	candidates := []string{"/bin/busybox", "/usr/bin/busybox"}
	if want != "" {
		candidates = []string{want}
	}
	var problems []string
	for _, p := range candidates {
		static, err := IsStatic(p)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if static {
			return p, nil
		}
		problems = append(problems, p+" is dynamically linked")
	}
	return "", fmt.Errorf("no static busybox (apt-get install busybox-static): %s", strings.Join(problems, "; "))
}

// IsStatic reports whether the ELF executable at path needs no dynamic
// loader: images need not have a libc.
func IsStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }() // read only
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

// Rootfs is the tarball of a default image: busybox at /bin/busybox,
// a symlink per applet, the usual directories, and passwd/group entries for
// root and nobody.
func Rootfs(busybox string) ([]byte, error) {
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", busybox, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// A fixed time keeps the tarball, and so the image, the same each build.
	mtime := time.Unix(0, 0)
	dirs := map[string]bool{}
	var addDir func(name string, mode int64) error
	addDir = func(name string, mode int64) error {
		if dirs[name] || name == "." {
			return nil
		}
		if err := addDir(path.Dir(name), 0o755); err != nil {
			return err
		}
		dirs[name] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: mtime})
	}
	for _, d := range []struct {
		name string
		mode int64
	}{
		{"bin", 0o755}, {"sbin", 0o755}, {"usr", 0o755}, {"usr/bin", 0o755}, {"usr/sbin", 0o755},
		{"etc", 0o755}, {"dev", 0o755}, {"proc", 0o755}, {"sys", 0o755}, {"run", 0o755},
		{"var", 0o755}, {"root", 0o700}, {"home", 0o755}, {"tmp", 0o1777}, {"var/tmp", 0o1777},
	} {
		if err := addDir(d.name, d.mode); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin)), ModTime: mtime}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	for _, f := range []struct{ name, body string }{
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/tmp:/bin/sh\n"},
		{"etc/group", "root:x:0:\nnogroup:x:65534:\n"},
	} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: mtime}); err != nil {
			return nil, err
		}
		if _, err := io.WriteString(tw, f.body); err != nil {
			return nil, err
		}
	}
	seen := map[string]bool{"bin/busybox": true}
	for _, line := range strings.Split(string(out), "\n") {
		name := strings.TrimPrefix(strings.TrimSpace(line), "/")
		if name == "" || seen[name] || strings.Contains(name, "..") {
			continue
		}
		seen[name] = true
		if err := addDir(path.Dir(name), 0o755); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: "/bin/busybox", Mode: 0o777, ModTime: mtime}); err != nil {
			return nil, err
		}
	}
	if !seen["bin/sh"] {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/sh", Linkname: "/bin/busybox", Mode: 0o777, ModTime: mtime}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
