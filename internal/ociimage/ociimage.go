// Package ociimage builds the project's container images as image
// archives, without a registry or a container engine: the agent image
// (only the static agentic-agent, for an init container that copies it into
// a volume shared with the workload), the default workload image (the
// host's static busybox with a non-root user for commands) and the server
// image (the static agentic-mgmt, run as a non-root user, for
// deploy/kubernetes). The archives
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
	ServerArchive   = "mgmt.tar"

	// ServerRepository is the server image: agentic-mgmt at ServerPath,
	// run as ServerUser with its data dir at ServerDataDir (SECRETS_DIR
	// is ServerDataDir/secrets), as deploy/kubernetes runs it.
	ServerRepository = "agentic-sandbox/mgmt"
	ServerImage      = ServerRepository + ":" + Version
	ServerPath       = "/usr/local/bin/agentic-mgmt"
	ServerUser       = "65532:65532"
	ServerDataDir    = "/var/lib/agentic-sandbox"
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

// serverUID is ServerUser's uid and gid: "agentic" in the image's passwd.
const serverUID = 65532

// Server is the server image: agentic-mgmt (statically linked) at
// ServerPath as the entrypoint, run as ServerUser (agentic, not root);
// /etc/passwd and /etc/group naming root, agentic and nobody; /tmp (1777);
// the data dir ServerDataDir (0700, agentic's), which a volume replaces in a
// cluster. Nothing else: no shell, no libc. The agent port and the operator
// ports (LISTEN_ADDR's port, +1, +2) are exposed.
func Server(mgmtBinary string) (v1.Image, error) {
	arch, err := staticArch(mgmtBinary)
	if err != nil {
		return nil, fmt.Errorf("server image: %w", err)
	}
	bin, err := os.ReadFile(mgmtBinary)
	if err != nil {
		return nil, fmt.Errorf("server image: %w", err)
	}
	files := []struct {
		hdr  tar.Header
		body []byte
	}{
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755}},
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644}, body: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"agentic:x:65532:65532:agentic-mgmt:" + ServerDataDir + ":/sbin/nologin\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n")},
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "etc/group", Mode: 0o644}, body: []byte(
			"root:x:0:\nagentic:x:65532:\nnogroup:x:65534:\n")},
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "etc/nsswitch.conf", Mode: 0o644}, body: []byte("hosts: files dns\n")},
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}},
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "usr/", Mode: 0o755}},
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "usr/local/", Mode: 0o755}},
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "usr/local/bin/", Mode: 0o755}},
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: ServerPath[1:], Mode: 0o755}, body: bin},
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "var/", Mode: 0o755}},
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "var/lib/", Mode: 0o755}},
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: ServerDataDir[1:] + "/", Mode: 0o700, Uid: serverUID, Gid: serverUID}},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := f.hdr
		h.ModTime, h.Format, h.Size = epoch, tar.FormatPAX, int64(len(f.body))
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return image(arch, buf.Bytes(), "agentic-mgmt at "+ServerPath, v1.Config{
		Entrypoint: []string{ServerPath},
		User:       ServerUser,
		WorkingDir: ServerDataDir,
		Env:        []string{"PATH=" + defaultPath, "HOME=" + ServerDataDir, "SECRETS_DIR=" + ServerDataDir + "/secrets"},
		ExposedPorts: map[string]struct{}{
			"8120/tcp": {}, "8121/tcp": {}, "8122/tcp": {},
		},
		Labels: map[string]string{
			"org.opencontainers.image.title":   "agentic-sandbox management server",
			"org.opencontainers.image.version": Version,
		},
	})
}

// WithAgent is img with agent's layer on top: the agent at AgentPath,
// root's and read-only to anyone else.
func WithAgent(img, agent v1.Image) (v1.Image, error) {
	layers, err := agent.Layers()
	if err != nil {
		return nil, err
	}
	return mutate.AppendLayers(img, layers...)
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
	// The default workload carries the agent too: its pods need no init
	// container to inject it (adapters/kubernetes DefaultImageHasAgent).
	if workload, err = WithAgent(workload, agent); err != nil {
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

// BuildServer writes ServerArchive into dir (created if missing): the
// server image from the static agentic-mgmt, tagged with version (empty:
// Version).
func BuildServer(dir, mgmtBinary, version string) (Built, error) {
	if version == "" {
		version = Version
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // build output, read by docker/ctr run as anyone
		return Built{}, err
	}
	img, err := Server(mgmtBinary)
	if err != nil {
		return Built{}, err
	}
	ref := ServerRepository + ":" + version
	p := filepath.Join(dir, ServerArchive)
	if err := WriteArchive(p, ref, img); err != nil {
		return Built{}, err
	}
	d, err := img.Digest()
	if err != nil {
		return Built{}, err
	}
	return Built{Path: p, Ref: ref, Digest: d}, nil
}
