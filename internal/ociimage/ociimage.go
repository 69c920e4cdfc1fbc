// Package ociimage builds the project's two container images as image
// archives, without a registry or a container engine: the agent image
// (only the static agentic-agent, for an init container that copies it into
// a volume shared with the workload) and the default workload image (the
// host's static busybox with a non-root user for commands). The archives
// are in the `docker save` layout (manifest.json, config and gzip layers),
// which `docker load -i` and `ctr -n k8s.io images import` both read, and
// which `crane push` or `skopeo copy docker-archive:...` push to a registry.
//
// The same inputs give the same bytes: every time in the archives is the
// Unix epoch, the layers are built in a fixed order with root ownership, so
// the digests only change when the binaries do.
package ociimage

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/agentic-sandbox/agentic-sandbox/internal/busyboxroot"
)

// The images' names: the kubernetes runtime's defaults name exactly these
// (an operator who pushes them elsewhere overrides them).
const (
	// Version tags both images; it is the binaries' version (cmd/*/main.go).
	Version = "0.1.0-dev"

	AgentRepository    = "agentic-sandbox/agent"
	WorkloadRepository = "agentic-sandbox/workload"
	AgentImage         = AgentRepository + ":" + Version
	WorkloadImage      = WorkloadRepository + ":" + Version

	// AgentPath is where the agent image holds agentic-agent (its
	// entrypoint); AgentDir is its directory, the only one in the image.
	AgentDir  = "/agentic"
	AgentPath = AgentDir + "/agentic-agent"

	// WorkloadUser is the workload image's user (nobody:nogroup): what a
	// plain `docker run` of it runs as, and the user the agent runs commands
	// as. The kubernetes runtime starts the agent itself as root with only
	// the capabilities it needs to switch to it.
	WorkloadUser = "65534:65534"
	WorkloadHome = "/tmp"

	// The archives' file names under the output directory (build/images).
	AgentArchive    = "agent.tar"
	WorkloadArchive = "workload.tar"
)

// epoch is every timestamp in the images: builds of the same inputs are
// byte for byte the same.
var epoch = time.Unix(0, 0).UTC()

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Agent is the agent image: agentic-agent (which must be statically
// linked: the image has no libc) at AgentPath, mode 0755, owned by root,
// as the entrypoint.
func Agent(agentBinary string) (v1.Image, error) {
	arch, err := staticArch(agentBinary)
	if err != nil {
		return nil, fmt.Errorf("agent image: %w", err)
	}
	bin, err := os.ReadFile(agentBinary)
	if err != nil {
		return nil, fmt.Errorf("agent image: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := AgentDir[1:]
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: AgentPath[1:], Mode: 0o755, Size: int64(len(bin)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return image(arch, buf.Bytes(), "agentic-agent at "+AgentPath, v1.Config{
		Entrypoint: []string{AgentPath},
		User:       "0:0",
		WorkingDir: "/",
		Env:        []string{"PATH=" + defaultPath},
		Labels: map[string]string{
			"org.opencontainers.image.title":   "agentic-sandbox agent",
			"org.opencontainers.image.version": Version,
		},
	})
}

// Workload is the default workload image: the static busybox at busybox
// (empty: Debian's busybox-static) with a symlink per applet, /tmp (1777),
// passwd and group entries for root and nobody, and nobody as its user.
func Workload(busybox string) (v1.Image, error) {
	bb, err := busyboxroot.Find(busybox)
	if err != nil {
		return nil, fmt.Errorf("workload image: %w", err)
	}
	arch, err := staticArch(bb)
	if err != nil {
		return nil, fmt.Errorf("workload image: %w", err)
	}
	rootfs, err := busyboxroot.Rootfs(bb)
	if err != nil {
		return nil, fmt.Errorf("workload image: %w", err)
	}
	return image(arch, rootfs, "static busybox root", v1.Config{
		Cmd:        []string{"/bin/sh"},
		User:       WorkloadUser,
		WorkingDir: WorkloadHome,
		Env:        []string{"PATH=" + defaultPath, "HOME=" + WorkloadHome},
		Labels: map[string]string{
			"org.opencontainers.image.title":   "agentic-sandbox default workload",
			"org.opencontainers.image.version": Version,
		},
	})
}

// image is one layer (an uncompressed tarball) with cfg, for linux/arch.
func image(arch string, layerTar []byte, createdBy string, cfg v1.Config) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      v1.Time{Time: epoch},
		Config:       cfg,
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "agentic-sandbox imagebuild: " + createdBy},
	})
}

// staticArch is the GOARCH of the statically linked ELF executable at
// path; a dynamically linked one is refused (the images have no libc).
func staticArch(path string) (string, error) {
	static, err := busyboxroot.IsStatic(path)
	if err != nil {
		return "", err
	}
	if !static {
		return "", fmt.Errorf("%s is dynamically linked: build it with CGO_ENABLED=0", path)
	}
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }() // read only
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	case elf.EM_386:
		return "386", nil
	case elf.EM_ARM:
		return "arm", nil
	case elf.EM_RISCV:
		return "riscv64", nil
	case elf.EM_PPC64:
		return "ppc64le", nil
	case elf.EM_S390:
		return "s390x", nil
	}
	return "", fmt.Errorf("%s: unsupported machine %s", path, f.Machine)
}

// WriteArchive writes img tagged ref to path as an image archive,
// atomically: a reader never sees half an archive.
func WriteArchive(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone once renamed
	if err := tarball.Write(tag, img, tmp); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Built is one archive written by Build.
type Built struct {
	Path   string  // the archive
	Ref    string  // the tag it loads as
	Digest v1.Hash // the image's manifest digest
}

// Build writes both archives into dir (created if missing): AgentArchive
// from the static agent binary and WorkloadArchive from busybox (empty:
// Debian's busybox-static), tagged with version (empty: Version).
func Build(dir, agentBinary, busybox, version string) ([]Built, error) {
	if version == "" {
		version = Version
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // build output, read by docker/ctr run as anyone
		return nil, err
	}
	agent, err := Agent(agentBinary)
	if err != nil {
		return nil, err
	}
	workload, err := Workload(busybox)
	if err != nil {
		return nil, err
	}
	var out []Built
	for _, b := range []struct {
		file, repo string
		img        v1.Image
	}{
		{AgentArchive, AgentRepository, agent},
		{WorkloadArchive, WorkloadRepository, workload},
	} {
		ref := b.repo + ":" + version
		p := filepath.Join(dir, b.file)
		if err := WriteArchive(p, ref, b.img); err != nil {
			return nil, err
		}
		d, err := b.img.Digest()
		if err != nil {
			return nil, err
		}
		out = append(out, Built{Path: p, Ref: ref, Digest: d})
	}
	return out, nil
}
