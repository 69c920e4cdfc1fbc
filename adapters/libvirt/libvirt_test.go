package libvirt

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func TestConfigDefaults(t *testing.T) {
	t.Setenv("LIBVIRT_DEFAULT_URI", "")
	c := Config{StateDir: "/s"}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.URI != "qemu:///system" || c.Owner != "agentic-sandbox" || c.NamePrefix != "agentic-" || c.Accel != AccelAuto ||
		c.CPUs != 1 || c.MemoryMB != 512 || c.Cmdline != "console=ttyS0 panic=-1" || c.QemuLogDir != "/var/log/libvirt/qemu" {
		t.Errorf("defaults: %+v", c)
	}
	for _, bad := range []Config{{}, {StateDir: "/s", Accel: "hvf"}, {StateDir: "/s", URI: "not a uri"}} {
		if err := bad.defaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	for uri, logDir := range map[string]string{"qemu:///session": "", "test:///default": "", "qemu+ssh://h/system": "", "qemu+unix:///system": "/var/log/libvirt/qemu"} {
		c := Config{URI: uri, StateDir: "/s"}
		if err := c.defaults(); err != nil || c.QemuLogDir != logDir {
			t.Errorf("%s: QemuLogDir %q, %v; want %q", uri, c.QemuLogDir, err, logDir)
		}
	}
	c = Config{StateDir: "/s", QemuLogDir: "-"}
	if err := c.defaults(); err != nil || c.QemuLogDir != "" {
		t.Errorf("QemuLogDir - : %q %v", c.QemuLogDir, err)
	}
}

func TestDomainType(t *testing.T) {
	for _, c := range []struct {
		uri, accel, want string
	}{
		{"test:///default", AccelKVM, "test"},
		{"qemu:///system", AccelTCG, "qemu"},
		{"qemu:///system", AccelKVM, "kvm"},
		{"qemu+ssh://host/system", AccelAuto, "qemu"},
	} {
		cfg := Config{URI: c.uri, Accel: c.accel, StateDir: "/s"}
		if err := cfg.defaults(); err != nil {
			t.Fatal(err)
		}
		if got := cfg.domainType(); got != c.want {
			t.Errorf("%s %s: %s, want %s", c.uri, c.accel, got, c.want)
		}
	}
	cfg := Config{URI: "qemu:///system", StateDir: "/s"}
	_ = cfg.defaults()
	want := "qemu"
	if kvmUsable() {
		want = "kvm"
	}
	if got := cfg.domainType(); got != want {
		t.Errorf("auto: %s, want %s", got, want)
	}
}

// newTestRuntime is an adapter that never reaches a libvirtd (plan and the
// checks before any call).
func newTestRuntime(t *testing.T) (*Runtime, string) {
	t.Helper()
	dir := t.TempDir()
	img := filepath.Join(dir, "image")
	if err := os.Mkdir(img, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"vmlinux", "initrd.img"} {
		if err := os.WriteFile(filepath.Join(img, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := New(Config{URI: "qemu:///system", Socket: filepath.Join(dir, "none.sock"), StateDir: filepath.Join(dir, "state"),
		ImageDir: img, Accel: AccelTCG, Profiles: map[string]Profile{"big": {CPUs: 4, MemoryMB: 4096}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	if st, err := os.Stat(filepath.Join(dir, "state")); err != nil || st.Mode().Perm() != 0o711 {
		t.Errorf("state dir: %v %v; want 0711 for QEMU to traverse", st, err)
	}
	return rt, dir
}

func goodSpec(dir string) ports.EnvironmentSpec {
	return ports.EnvironmentSpec{Name: "a1", Agent: ports.AgentBootstrap{ID: "a1", Secret: "s", Socket: filepath.Join(dir, "agent.sock")}}
}

func TestPlan(t *testing.T) {
	rt, dir := newTestRuntime(t)
	p, boot, err := rt.plan(goodSpec(dir))
	if err != nil {
		t.Fatal(err)
	}
	if p.DomainName != "agentic-a1" || p.Type != "qemu" || p.VCPUs != 1 || p.MemoryMiB != 512 || p.Network != networkNone ||
		p.Kernel != filepath.Join(dir, "image", "vmlinux") || p.Initrd != filepath.Join(rt.EnvDir("a1"), "initrd.img") ||
		p.Channel != filepath.Join(rt.EnvDir("a1"), "agent.sock") || p.Meta.Socket != filepath.Join(dir, "agent.sock") {
		t.Errorf("plan: %+v", p)
	}
	if err := os.MkdirAll(rt.EnvDir("a1"), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := boot(context.Background(), rt.EnvDir("a1")); err != nil {
		t.Fatalf("boot files: %v", err)
	}
	b, _ := os.ReadFile(p.Initrd)
	if !strings.Contains(string(b), "MANAGEMENT_SERVER=serial:///dev/virtio-ports/"+AgentChannel) || !strings.Contains(string(b), "AGENT_RUNTIME=vm") {
		t.Errorf("per-domain initrd lacks the agent's config: %q", b)
	}

	s := goodSpec(dir)
	s.Profile, s.Resources.MemoryMB, s.Network = "big", 256, ports.NetworkUser
	if p, _, err := rt.plan(s); err != nil || p.VCPUs != 4 || p.MemoryMiB != 256 || p.Network != networkUser {
		t.Errorf("profile with a memory override: %+v %v", p, err)
	}
	s = goodSpec(dir)
	s.Resources.CPUs = 1.5
	if p, _, err := rt.plan(s); err != nil || p.VCPUs != 2 {
		t.Errorf("1.5 CPUs: %d vCPUs, %v; want 2", p.VCPUs, err)
	}
}

func TestPlanInvalid(t *testing.T) {
	rt, dir := newTestRuntime(t)
	for why, mutate := range map[string]func(*ports.EnvironmentSpec){
		"empty name":       func(s *ports.EnvironmentSpec) { s.Name = "" },
		"slash":            func(s *ports.EnvironmentSpec) { s.Name = "a/b" },
		"dot dot":          func(s *ports.EnvironmentSpec) { s.Name = ".." },
		"long name":        func(s *ports.EnvironmentSpec) { s.Name = strings.Repeat("a", 64) },
		"bridge":           func(s *ports.EnvironmentSpec) { s.Network = ports.NetworkBridge },
		"host network":     func(s *ports.EnvironmentSpec) { s.Network = ports.NetworkHost },
		"negative memory":  func(s *ports.EnvironmentSpec) { s.Resources.MemoryMB = -1 },
		"negative cpus":    func(s *ports.EnvironmentSpec) { s.Resources.CPUs = -1 },
		"tiny memory":      func(s *ports.EnvironmentSpec) { s.Resources.MemoryMB = 16 },
		"no secret":        func(s *ports.EnvironmentSpec) { s.Agent.Secret = "" },
		"no socket":        func(s *ports.EnvironmentSpec) { s.Agent.Socket = "" },
		"long socket":      func(s *ports.EnvironmentSpec) { s.Agent.Socket = "/" + strings.Repeat("s", 200) },
		"other agent id":   func(s *ports.EnvironmentSpec) { s.Agent.ID = "b" },
		"read-only root":   func(s *ports.EnvironmentSpec) { s.ReadOnlyRoot = true },
		"unknown profile":  func(s *ports.EnvironmentSpec) { s.Profile = "huge" },
		"missing image":    func(s *ports.EnvironmentSpec) { s.Image = filepath.Join(dir, "missing.qcow2") },
		"missing agent":    func(s *ports.EnvironmentSpec) { s.Agent.Binary = filepath.Join(dir, "missing-agent") },
		"empty label key":  func(s *ports.EnvironmentSpec) { s.Labels = map[string]string{"": "x"} },
		"image without vm": func(s *ports.EnvironmentSpec) { s.Image = t.TempDir() },
	} {
		s := goodSpec(dir)
		mutate(&s)
		if _, _, err := rt.plan(s); !errors.Is(err, ports.ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", why, err)
		}
		// Provision refuses before it reaches libvirtd (there is none here).
		if _, err := rt.Provision(context.Background(), s); !errors.Is(err, ports.ErrInvalidSpec) {
			t.Errorf("Provision, %s: %v, want ErrInvalidSpec", why, err)
		}
	}
	// The image's absence says how to make it.
	s := goodSpec(dir)
	if err := os.Remove(filepath.Join(dir, "image", "initrd.img")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rt.plan(s); !errors.Is(err, ports.ErrInvalidSpec) || !strings.Contains(err.Error(), "make vm-image") {
		t.Errorf("missing image: %v", err)
	}
	if entries, _ := os.ReadDir(rt.cfg.StateDir); len(entries) != 0 {
		t.Errorf("refused specs left %v", entries)
	}
}

func TestUnavailable(t *testing.T) {
	rt, _ := newTestRuntime(t)
	ctx := context.Background()
	if err := rt.Ping(ctx); !errors.Is(err, ports.ErrRuntimeUnavailable) {
		t.Errorf("Ping: %v", err)
	}
	if _, err := rt.List(ctx); !errors.Is(err, ports.ErrRuntimeUnavailable) {
		t.Errorf("List: %v", err)
	}
	// An invalid name is never found (and never reaches libvirt).
	if _, err := rt.Inspect(ctx, "../x"); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Errorf("Inspect: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := rt.Ping(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Ping with a cancelled context: %v", err)
	}
}

func TestUnsearchable(t *testing.T) {
	dir := t.TempDir()
	_ = os.Chmod(dir, 0o755)
	open, closed := filepath.Join(dir, "open"), filepath.Join(dir, "closed")
	if err := os.Mkdir(open, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	if d := unsearchable(filepath.Join(open, "file")); d != "" && !strings.HasPrefix(dir, d) {
		t.Errorf("open: %q", d)
	}
	if d := unsearchable(filepath.Join(closed, "x", "file")); d != closed && !strings.HasPrefix(dir, d) {
		t.Errorf("closed: %q, want %s", d, closed)
	}
}

// With DiskImageDir set, an API caller boots only images from it: not any
// host file, not through a symbolic link, not an image whose contents
// come from a backing file elsewhere.
func TestImagesComeOnlyFromTheImageDir(t *testing.T) {
	rt, dir := newTestRuntime(t)
	images := filepath.Join(dir, "images")
	if err := os.Mkdir(images, 0o755); err != nil {
		t.Fatal(err)
	}
	rt.cfg.DiskImageDir = images
	if err := os.Symlink("/etc/passwd", filepath.Join(images, "sneaky.qcow2")); err != nil {
		t.Fatal(err)
	}
	for _, image := range []string{"/etc/shadow", "/etc/passwd", filepath.Join(images, "sneaky.qcow2"), filepath.Join(images, "..", "state")} {
		s := goodSpec(dir)
		s.Image = image
		if _, err := rt.Provision(context.Background(), s); !errors.Is(err, ports.ErrInvalidSpec) || !strings.Contains(err.Error(), "images come only from") {
			t.Errorf("image %s: %v, want refused", image, err)
		}
	}
	// The tiny image's own dir stays allowed.
	s := goodSpec(dir)
	s.Image = filepath.Join(dir, "image")
	if err := rt.imageAllowed(s.Image); err != nil {
		t.Errorf("the tiny image dir: %v", err)
	}

	testreq.Command(t, "qemu-img", "run make test-env (it installs qemu-utils)")
	base := filepath.Join(dir, "elsewhere.qcow2")
	layered := filepath.Join(images, "layered.qcow2")
	plain := filepath.Join(images, "plain.qcow2")
	for _, args := range [][]string{
		{"create", "-q", "-f", "qcow2", base, "16M"},
		{"create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, layered},
		{"create", "-q", "-f", "qcow2", plain, "16M"},
	} {
		if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img %v: %v %s", args, err, out)
		}
	}
	if _, err := rt.imageFormat(context.Background(), layered); !errors.Is(err, ports.ErrInvalidSpec) || !strings.Contains(err.Error(), "backing file") {
		t.Errorf("an image with a backing file: %v, want refused", err)
	}
	if f, err := rt.imageFormat(context.Background(), plain); err != nil || f != "qcow2" {
		t.Errorf("a plain image: %q %v", f, err)
	}
}
