package e2e

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/agentic-sandbox/agentic-sandbox/internal/ociimage"
)

// TestAgentImageArchivesLoadAndRunInDocker: the archives of `make
// agent-image` (the real static agentic-agent, the host's busybox) load into
// a private dockerd with `docker load -i` under the names the kubernetes
// runtime defaults to, and run there with no network and no pull: the agent
// image's entrypoint is agentic-agent, the workload image runs commands as
// uid 65534 with a writable /tmp.
func TestAgentImageArchivesLoadAndRunInDocker(t *testing.T) {
	host := privateDockerd(t)
	built, err := ociimage.Build(t.TempDir(), bins.Agent, "", "")
	if err != nil {
		t.Fatalf("build the archives (make test-env installs busybox-static): %v", err)
	}
	docker := func(args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		out, err := exec.CommandContext(ctx, "docker", append([]string{"-H", host}, args...)...).CombinedOutput()
		return string(out), err
	}
	for _, b := range built {
		out, err := docker("load", "-i", b.Path)
		if err != nil {
			t.Fatalf("docker load -i %s: %v\n%s", b.Path, err, out)
		}
		if !strings.Contains(out, b.Ref) {
			t.Fatalf("docker load -i %s said %q: want it to name %s", b.Path, out, b.Ref)
		}
		id, err := docker("image", "inspect", "--format", "{{.Id}}", b.Ref)
		if err != nil {
			t.Fatalf("docker image inspect %s: %v\n%s", b.Ref, err, id)
		}
		want, err := imageIDs(b.Path, b.Ref)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(want, strings.TrimSpace(id)) {
			t.Fatalf("%s loaded as %s: want the archive's image, one of %q", b.Ref, strings.TrimSpace(id), want)
		}
	}

	out, err := docker("run", "--rm", "--pull", "never", "--network", "none", ociimage.AgentImage, "--help")
	if err != nil {
		t.Fatalf("docker run %s --help: %v\n%s", ociimage.AgentImage, err, out)
	}
	if !strings.Contains(out, "Usage of") || !strings.Contains(out, "-server") {
		t.Fatalf("docker run %s --help printed %q: want agentic-agent's usage", ociimage.AgentImage, out)
	}

	out, err = docker("run", "--rm", "--pull", "never", "--network", "none", ociimage.WorkloadImage, "id", "-u")
	if err != nil {
		t.Fatalf("docker run %s id -u: %v\n%s", ociimage.WorkloadImage, err, out)
	}
	if strings.TrimSpace(out) != "65534" {
		t.Fatalf("docker run %s id -u printed %q: want 65534", ociimage.WorkloadImage, out)
	}
	out, err = docker("run", "--rm", "--pull", "never", "--network", "none", ociimage.WorkloadImage,
		"sh", "-c", `echo ok > /tmp/probe && cat /tmp/probe && pwd && echo "$HOME"`)
	if err != nil {
		t.Fatalf("docker run %s: write /tmp: %v\n%s", ociimage.WorkloadImage, err, out)
	}
	if got := strings.Fields(out); len(got) != 3 || got[0] != "ok" || got[1] != "/tmp" || got[2] != "/tmp" {
		t.Fatalf("write /tmp, pwd, HOME printed %q: want ok, /tmp, /tmp", out)
	}
}

// imageIDs are the IDs docker may give the archive's image tagged ref: the
// config's digest (docker's own image store) or the manifest's (the
// containerd image store).
func imageIDs(path, ref string) ([]string, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return nil, err
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	m, err := img.Digest()
	if err != nil {
		return nil, err
	}
	return []string{cfg.String(), m.String()}, nil
}
