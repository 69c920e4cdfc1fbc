package ociimage_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/agentic-sandbox/agentic-sandbox/internal/busyboxroot"
	"github.com/agentic-sandbox/agentic-sandbox/internal/ociimage"
)

// staticBusybox is Debian's static busybox: the workload image's content
// and, in these tests, a static executable standing in for the agent.
func staticBusybox(t *testing.T) string {
	t.Helper()
	bb, err := busyboxroot.Find("")
	if err != nil {
		t.Fatalf("%v: run scripts/docker-test-env.sh (make test-env)", err)
	}
	return bb
}

// load reads the archive at path back as the image tagged ref.
func load(t *testing.T, path, ref string) v1.Image {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatalf("read %s as %s: %v", path, ref, err)
	}
	return img
}

type entry struct {
	hdr  *tar.Header
	body []byte
}

// files is the content of img's layers by path (the last layer wins).
func files(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]entry{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")] = entry{h, body}
		}
		if err := rc.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func config(t *testing.T, img v1.Image) *v1.ConfigFile {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf
}

func TestBuildWritesTheAgentImageWithOnlyTheAgentAsItsEntrypoint(t *testing.T) {
	agent := staticBusybox(t)
	want, err := os.ReadFile(agent)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	built, err := ociimage.Build(dir, agent, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(built) != 2 || built[0].Path != filepath.Join(dir, ociimage.AgentArchive) || built[0].Ref != ociimage.AgentImage {
		t.Fatalf("built %+v: want %s as %s first", built, ociimage.AgentArchive, ociimage.AgentImage)
	}
	img := load(t, built[0].Path, ociimage.AgentImage)
	if d, err := img.Digest(); err != nil || d != built[0].Digest {
		t.Fatalf("digest read back %v (%v), Build said %v", d, err, built[0].Digest)
	}
	fs := files(t, img)
	var names []string
	for n := range fs {
		names = append(names, n)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"agentic", "agentic/agentic-agent"}) {
		t.Fatalf("agent image holds %q: want only the agent and its directory", names)
	}
	bin := fs[strings.TrimPrefix(ociimage.AgentPath, "/")]
	if bin.hdr.Typeflag != tar.TypeReg || bin.hdr.Mode&0o7777 != 0o755 || bin.hdr.Uid != 0 || bin.hdr.Gid != 0 {
		t.Fatalf("agent entry type %c mode %o owner %d:%d: want a regular file 0755 owned by root", bin.hdr.Typeflag, bin.hdr.Mode, bin.hdr.Uid, bin.hdr.Gid)
	}
	if !bytes.Equal(bin.body, want) {
		t.Fatalf("agent in the image is %d bytes, not the %d of %s", len(bin.body), len(want), agent)
	}
	if d := fs["agentic"]; d.hdr.Typeflag != tar.TypeDir || d.hdr.Mode&0o7777 != 0o755 {
		t.Fatalf("agent directory type %c mode %o: want a directory 0755", d.hdr.Typeflag, d.hdr.Mode)
	}
	cf := config(t, img)
	if !slices.Equal(cf.Config.Entrypoint, []string{ociimage.AgentPath}) || len(cf.Config.Cmd) != 0 {
		t.Fatalf("entrypoint %q cmd %q: want [%s] and no cmd", cf.Config.Entrypoint, cf.Config.Cmd, ociimage.AgentPath)
	}
	if cf.OS != "linux" || cf.Architecture == "" || cf.Config.User != "0:0" {
		t.Fatalf("os %q arch %q user %q: want linux, the binary's arch, root", cf.OS, cf.Architecture, cf.Config.User)
	}
}

func TestBuildWritesTheWorkloadImageWithANonRootUserAndTmp(t *testing.T) {
	bb := staticBusybox(t)
	built, err := ociimage.Build(t.TempDir(), bb, bb, "")
	if err != nil {
		t.Fatal(err)
	}
	if built[1].Ref != ociimage.WorkloadImage || filepath.Base(built[1].Path) != ociimage.WorkloadArchive {
		t.Fatalf("built %+v: want %s as %s second", built, ociimage.WorkloadArchive, ociimage.WorkloadImage)
	}
	img := load(t, built[1].Path, ociimage.WorkloadImage)
	cf := config(t, img)
	if cf.Config.User != "65534:65534" || cf.Config.WorkingDir != "/tmp" || !slices.Equal(cf.Config.Cmd, []string{"/bin/sh"}) {
		t.Fatalf("user %q workdir %q cmd %q: want 65534:65534, /tmp, [/bin/sh]", cf.Config.User, cf.Config.WorkingDir, cf.Config.Cmd)
	}
	fs := files(t, img)
	if e := fs["bin/busybox"]; e.hdr == nil || e.hdr.Mode&0o7777 != 0o755 || e.hdr.Uid != 0 {
		t.Fatalf("bin/busybox: %+v: want 0755 owned by root", e.hdr)
	}
	if e := fs["bin/sh"]; e.hdr == nil || e.hdr.Typeflag != tar.TypeSymlink || e.hdr.Linkname != "/bin/busybox" {
		t.Fatalf("bin/sh: %+v: want a symlink to /bin/busybox", e.hdr)
	}
	if e := fs["tmp"]; e.hdr == nil || e.hdr.Typeflag != tar.TypeDir || e.hdr.Mode&0o7777 != 0o1777 {
		t.Fatalf("tmp: %+v: want a directory 1777", e.hdr)
	}
	if e := fs["etc/passwd"]; !strings.Contains(string(e.body), "nobody:x:65534:65534:") {
		t.Fatalf("etc/passwd %q: want nobody as 65534", e.body)
	}
	// It carries the agent, root's, that nobody may run but not change.
	if e := fs[ociimage.AgentPath[1:]]; e.hdr == nil || e.hdr.Mode&0o7777 != 0o755 || e.hdr.Uid != 0 {
		t.Fatalf("%s: %+v: want the agent, 0755 owned by root", ociimage.AgentPath, e.hdr)
	}
}

func TestBuildIsReproducible(t *testing.T) {
	bb := staticBusybox(t)
	a, err := ociimage.Build(t.TempDir(), bb, bb, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ociimage.Build(t.TempDir(), bb, bb, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i].Digest != b[i].Digest {
			t.Fatalf("%s: digest %v then %v for the same inputs", a[i].Ref, a[i].Digest, b[i].Digest)
		}
		x, err := os.ReadFile(a[i].Path)
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(b[i].Path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Fatalf("%s: the two archives differ for the same inputs", a[i].Ref)
		}
	}
	// Another binary is another image.
	other := filepath.Join(t.TempDir(), "agent")
	body, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, append(body, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := ociimage.Build(t.TempDir(), other, bb, "")
	if err != nil {
		t.Fatal(err)
	}
	if c[0].Digest == a[0].Digest {
		t.Fatalf("agent image digest %v for two different binaries", c[0].Digest)
	}
	// The workload carries the agent (its pods need no init container):
	// another agent, another workload image too.
	if c[1].Digest == a[1].Digest {
		t.Fatalf("workload image digest %v for two different agents it carries", c[1].Digest)
	}
}

func TestBuildTagsWithTheVersionAsked(t *testing.T) {
	bb := staticBusybox(t)
	built, err := ociimage.Build(t.TempDir(), bb, bb, "1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	if built[0].Ref != "agentic-sandbox/agent:1.2.3" || built[1].Ref != "agentic-sandbox/workload:1.2.3" {
		t.Fatalf("refs %q, %q", built[0].Ref, built[1].Ref)
	}
	load(t, built[0].Path, built[0].Ref)
	load(t, built[1].Path, built[1].Ref)
}

func TestBuildRefusesADynamicallyLinkedAgent(t *testing.T) {
	dynamic := "/bin/ls" // coreutils: dynamically linked on Debian
	if static, err := busyboxroot.IsStatic(dynamic); err != nil || static {
		t.Fatalf("%s: static %v (%v): the test needs a dynamic executable", dynamic, static, err)
	}
	dir := t.TempDir()
	_, err := ociimage.Build(dir, dynamic, "", "")
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("Build with %s: %v, want a refusal naming it dynamically linked", dynamic, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a refused build left %v", ents)
	}
}

func TestBuildServerWritesTheServerImageRunAsANonRootUser(t *testing.T) {
	mgmt := staticBusybox(t) // a static executable standing in for agentic-mgmt
	want, err := os.ReadFile(mgmt)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b, err := ociimage.BuildServer(dir, mgmt, "")
	if err != nil {
		t.Fatal(err)
	}
	if b.Path != filepath.Join(dir, ociimage.ServerArchive) || b.Ref != ociimage.ServerImage || ociimage.ServerImage != "agentic-sandbox/mgmt:"+ociimage.Version {
		t.Fatalf("built %+v: want %s as %s", b, ociimage.ServerArchive, ociimage.ServerImage)
	}
	img := load(t, b.Path, ociimage.ServerImage)
	if d, err := img.Digest(); err != nil || d != b.Digest {
		t.Fatalf("digest read back %v (%v), BuildServer said %v", d, err, b.Digest)
	}
	fs := files(t, img)
	var names []string
	for n := range fs {
		names = append(names, n)
	}
	slices.Sort(names)
	wantNames := []string{"etc", "etc/group", "etc/nsswitch.conf", "etc/passwd", "tmp", "usr", "usr/local", "usr/local/bin",
		"usr/local/bin/agentic-mgmt", "var", "var/lib", "var/lib/agentic-sandbox"}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("server image holds %q: want %q (the server, its user, /tmp and its data dir; no shell)", names, wantNames)
	}
	bin := fs[strings.TrimPrefix(ociimage.ServerPath, "/")]
	if bin.hdr.Typeflag != tar.TypeReg || bin.hdr.Mode&0o7777 != 0o755 || bin.hdr.Uid != 0 || !bytes.Equal(bin.body, want) {
		t.Fatalf("server entry type %c mode %o uid %d, %d bytes: want %s's %d bytes, 0755, owned by root", bin.hdr.Typeflag, bin.hdr.Mode, bin.hdr.Uid, len(bin.body), mgmt, len(want))
	}
	if e := fs["var/lib/agentic-sandbox"]; e.hdr.Typeflag != tar.TypeDir || e.hdr.Mode&0o7777 != 0o700 || e.hdr.Uid != 65532 || e.hdr.Gid != 65532 {
		t.Fatalf("data dir type %c mode %o owner %d:%d: want a directory 0700 of 65532:65532", e.hdr.Typeflag, e.hdr.Mode, e.hdr.Uid, e.hdr.Gid)
	}
	if e := fs["tmp"]; e.hdr.Mode&0o7777 != 0o1777 {
		t.Fatalf("tmp mode %o: want 1777", e.hdr.Mode)
	}
	if e := fs["etc/passwd"]; !strings.Contains(string(e.body), "agentic:x:65532:65532:") {
		t.Fatalf("etc/passwd %q: want agentic as 65532", e.body)
	}
	cf := config(t, img)
	if !slices.Equal(cf.Config.Entrypoint, []string{ociimage.ServerPath}) || cf.Config.User != "65532:65532" || cf.OS != "linux" {
		t.Fatalf("entrypoint %q user %q os %q: want [%s], 65532:65532, linux", cf.Config.Entrypoint, cf.Config.User, cf.OS, ociimage.ServerPath)
	}
	if !slices.Contains(cf.Config.Env, "SECRETS_DIR=/var/lib/agentic-sandbox/secrets") {
		t.Fatalf("env %q: want SECRETS_DIR in the image's data dir", cf.Config.Env)
	}
	for _, p := range []string{"8120/tcp", "8121/tcp", "8122/tcp"} {
		if _, ok := cf.Config.ExposedPorts[p]; !ok {
			t.Errorf("exposed ports %v: want %s", cf.Config.ExposedPorts, p)
		}
	}
	// The same binary, the same bytes; a dynamically linked one is refused.
	again, err := ociimage.BuildServer(t.TempDir(), mgmt, "")
	if err != nil || again.Digest != b.Digest {
		t.Fatalf("second build: digest %v (%v), first %v", again.Digest, err, b.Digest)
	}
	if _, err := ociimage.BuildServer(t.TempDir(), "/bin/ls", ""); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("BuildServer with /bin/ls: %v, want a refusal naming it dynamically linked", err)
	}
}
