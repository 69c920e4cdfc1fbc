package runtimetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/libvirt"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// libvirtBootTimeout bounds provision → agent ready of a VM under TCG
// (about 6 s to userspace on 2 cores; generous for a loaded CI machine).
const libvirtBootTimeout = 90 * time.Second

var (
	libvirtEnvOnce sync.Once
	libvirtEnvErr  error
)

// needLibvirt runs scripts/libvirt-test-env.sh once (installs libvirt and
// QEMU when missing, starts virtlogd and libvirtd); without root it only
// checks for the daemon's socket, and testreq decides: skip, or fail in CI.
func needLibvirt(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("libvirt tests boot VMs; skipped with -short")
	}
	libvirtEnvOnce.Do(func() {
		if os.Geteuid() != 0 {
			if _, err := os.Stat("/var/run/libvirt/libvirt-sock"); err != nil {
				libvirtEnvErr = errSkip
			}
			return
		}
		root, err := harness.ModuleRoot()
		if err != nil {
			libvirtEnvErr = err
			return
		}
		out, err := exec.Command(filepath.Join(root, "scripts", "libvirt-test-env.sh")).CombinedOutput()
		if err != nil {
			libvirtEnvErr = errors.New("scripts/libvirt-test-env.sh: " + err.Error() + "\n" + string(out))
		}
	})
	testreq.Need(t, !errors.Is(libvirtEnvErr, errSkip), "libvirtd", "run make test-env as root (or the tests as root, which start it)")
	if libvirtEnvErr != nil {
		t.Fatal(libvirtEnvErr)
	}
}

var errSkip = errors.New("skip")

var (
	vmImageOnce sync.Once
	vmImageDir  string
	vmImageErr  error
)

// vmImage builds the tiny VM image once per test binary with
// scripts/build-vm-image.sh and this test binary's agent, so the tests
// check the script too and never boot a stale image (so `make vm-image` is
// not needed first; the kernel package it downloads is cached in
// ~/.cache/agentic-sandbox/kernel for both). It goes to one fixed folder
// under the temp dir, replaced in place each run (seconds), rather than a
// new temp dir per run that no test would own; QEMU (user libvirt-qemu)
// must be able to reach it, which a folder under a 0700 home is not.
func vmImage(t *testing.T) string {
	t.Helper()
	agent := AgentBinary(t)
	vmImageOnce.Do(func() {
		root, err := harness.ModuleRoot()
		if err != nil {
			vmImageErr = err
			return
		}
		dir := filepath.Join(os.TempDir(), "agentic-sandbox-runtimetest-vm")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			vmImageErr = err
			return
		}
		start := time.Now()
		out, err := exec.Command(filepath.Join(root, "scripts", "build-vm-image.sh"), "-o", dir, "-a", agent).CombinedOutput()
		if err != nil {
			vmImageErr = errors.New("scripts/build-vm-image.sh (what `make vm-image` runs): " + err.Error() + "\n" + string(out))
			return
		}
		t.Logf("VM image built in %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
		vmImageDir = dir
	})
	if vmImageErr != nil {
		t.Fatal(vmImageErr)
	}
	return vmImageDir
}

// qemuDir is a temp dir QEMU (user libvirt-qemu) can traverse.
func qemuDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o711)
	}
	return dir
}

func randomOwner(t *testing.T) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "runtimetest-" + hex.EncodeToString(b)
}

// libvirtConn is a direct connection for the tests' own checks.
func libvirtConn(t *testing.T, uri string) *golibvirt.Libvirt {
	t.Helper()
	lv := golibvirt.NewWithDialer(dialers.NewLocal())
	if err := lv.ConnectToURI(golibvirt.ConnectURI(uri)); err != nil {
		t.Fatalf("connect %s: %v", uri, err)
	}
	t.Cleanup(func() { _ = lv.Disconnect() })
	return lv
}

// libvirtLeftovers lists what is left of an environment: its domain, its
// state folder, its relay.
func libvirtLeftovers(rt *libvirt.Runtime, lv *golibvirt.Libvirt) func(t *testing.T, name string) []string {
	return func(t *testing.T, name string) []string {
		var left []string
		if _, err := lv.DomainLookupByName(rt.DomainName(name)); err == nil {
			left = append(left, "domain "+rt.DomainName(name))
		} else if !golibvirt.IsNotFound(err) {
			t.Errorf("look up domain %s: %v", rt.DomainName(name), err)
		}
		if _, err := os.Stat(rt.EnvDir(name)); err == nil {
			entries, _ := os.ReadDir(rt.EnvDir(name))
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			left = append(left, "files "+rt.EnvDir(name)+" "+strings.Join(names, ","))
		}
		if running, _ := rt.Relaying(name); running {
			left = append(left, "relay of "+name)
		}
		if log := rt.QemuLogPath(name); log != "" {
			if _, err := os.Stat(log); err == nil {
				left = append(left, "libvirt log "+log)
			}
		}
		return left
	}
}

// testDriver is a libvirt runtime on libvirt's in-daemon test driver
// (test:///default) with files of its own, and a connection of the test's
// that keeps the driver's state while the test runs.
type testDriver struct {
	rt    *libvirt.Runtime
	lv    *golibvirt.Libvirt
	cfg   libvirt.Config
	dir   string
	owner string
}

func newTestDriver(t *testing.T) testDriver {
	t.Helper()
	needLibvirt(t)
	const uri = "test:///default"
	td := testDriver{lv: libvirtConn(t, uri), dir: t.TempDir(), owner: randomOwner(t)}
	kernel, initrd := filepath.Join(td.dir, "vmlinuz"), filepath.Join(td.dir, "initrd.img")
	for _, f := range []string{kernel, initrd} {
		if err := os.WriteFile(f, []byte("not really a kernel"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	td.cfg = libvirt.Config{URI: uri, Owner: td.owner, StateDir: filepath.Join(td.dir, "state"), Kernel: kernel, Initrd: initrd, StopTimeout: 5 * time.Second}
	rt, err := libvirt.New(td.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	td.rt = rt
	return td
}

// TestLibvirtTestDriver runs the lifecycle against libvirt's in-daemon test
// driver (test:///default): no guest boots, so it is fast and checks the
// adapter's bookkeeping: typed XML accepted, states, ownership, files.
func TestLibvirtTestDriver(t *testing.T) {
	ctx := context.Background()
	td := newTestDriver(t)
	rt, lv, dir, owner := td.rt, td.lv, td.dir, td.owner
	if rt.DomainType() != "test" {
		t.Fatalf("domain type %q on the test driver", rt.DomainType())
	}
	leftovers := libvirtLeftovers(rt, lv)

	caps := rt.Capabilities()
	if caps.Runtime != "libvirt" || caps.Isolation != ports.KindVM || !caps.Pause || caps.NetworkModes[0] != ports.NetworkNone {
		t.Errorf("capabilities %+v", caps)
	}
	if err := rt.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}

	spec := func(name string) ports.EnvironmentSpec {
		return ports.EnvironmentSpec{
			Name:      name,
			Resources: ports.Resources{CPUs: 1.5, MemoryMB: 256},
			Labels:    map[string]string{"team": "a&b <c>", "purpose": "test"},
			Agent:     ports.AgentBootstrap{ID: name, Secret: "s3cret", Socket: filepath.Join(dir, "agent.sock")},
		}
	}
	for _, bad := range []func(*ports.EnvironmentSpec){
		func(s *ports.EnvironmentSpec) { s.Name = "" },
		func(s *ports.EnvironmentSpec) { s.Name = "a/b" },
		func(s *ports.EnvironmentSpec) { s.Name = "../x" },
		func(s *ports.EnvironmentSpec) { s.Network = "bridge" },
		func(s *ports.EnvironmentSpec) { s.Resources.MemoryMB = -1 },
		func(s *ports.EnvironmentSpec) { s.Agent.Secret = "" },
		func(s *ports.EnvironmentSpec) { s.Agent.Socket = "" },
		func(s *ports.EnvironmentSpec) { s.Agent.ID = "someone-else" },
		func(s *ports.EnvironmentSpec) { s.Profile = "huge" },
		func(s *ports.EnvironmentSpec) { s.Image = filepath.Join(dir, "missing.qcow2") },
	} {
		s := spec("bad-spec")
		bad(&s)
		if _, err := rt.Provision(ctx, s); !errors.Is(err, ports.ErrInvalidSpec) {
			t.Errorf("Provision(%+v): %v, want ErrInvalidSpec", s, err)
		}
		if left := leftovers(t, "bad-spec"); len(left) > 0 {
			t.Errorf("refused Provision left %v", left)
		}
	}

	name := "td-" + owner[len(owner)-8:]
	var steps []string
	s := spec(name)
	s.Progress = func(step string) { steps = append(steps, step) }
	start := time.Now()
	env, err := rt.Provision(ctx, s)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Logf("Provision on the test driver: %s, steps %v", time.Since(start).Round(time.Microsecond), steps)
	t.Cleanup(func() { _ = rt.Destroy(context.Background(), name) })
	if env.Name != name || env.State != ports.EnvRunning || env.Runtime != "libvirt" || env.RuntimeID == "" ||
		env.Resources.CPUs != 2 || env.Resources.MemoryMB != 256 || env.Network != ports.NetworkNone ||
		env.Labels["team"] != "a&b <c>" || env.CreatedAt.IsZero() {
		t.Errorf("Provision returned %+v", env)
	}
	if !slices.Contains(steps, "define") || !slices.Contains(steps, "boot") {
		t.Errorf("progress steps %v", steps)
	}
	if _, err := rt.Provision(ctx, spec(name)); !errors.Is(err, ports.ErrEnvExists) {
		t.Errorf("second Provision: %v, want ErrEnvExists", err)
	}
	// The per-domain initrd carries the agent's env file after the image's.
	b, err := os.ReadFile(filepath.Join(rt.EnvDir(name), "initrd.img"))
	if err != nil || !bytes.HasPrefix(b, []byte("not really a kernel")) || !bytes.Contains(b, []byte("AGENT_SECRET=s3cret")) ||
		!bytes.Contains(b, []byte("MANAGEMENT_SERVER=serial:///dev/virtio-ports/io.agentic-sandbox.agent")) {
		t.Errorf("per-domain initrd: %v, %q", err, b)
	}
	if st, err := os.Stat(filepath.Join(rt.EnvDir(name), "initrd.img")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("initrd mode: %v %v", st, err)
	}

	// The domain as libvirt holds it: typed XML round trip.
	dom, err := lv.DomainLookupByName(rt.DomainName(name))
	if err != nil {
		t.Fatal(err)
	}
	x, err := lv.DomainGetXMLDesc(dom, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`owner="` + owner + `"`, `name="` + name + `"`, "<acpi", "<on_poweroff>destroy</on_poweroff>",
		"io.agentic-sandbox.agent", "console.log", "<cmdline>console=ttyS0"} {
		if !strings.Contains(x, want) {
			t.Errorf("domain XML lacks %q:\n%s", want, x)
		}
	}
	if strings.Contains(x, "<interface") {
		t.Errorf("domain has a network interface by default:\n%s", x)
	}

	// Ownership: the test driver's own domain "test", and a domain with our
	// prefix but another owner, are neither listed nor touched.
	foreign := "foreign-" + owner[len(owner)-8:]
	fx := `<domain type='test'><name>` + rt.DomainName(foreign) + `</name><memory unit='MiB'>64</memory><os><type>hvm</type></os>` +
		`<metadata><agentic:env xmlns:agentic="` + libvirt.MetadataNS + `" owner="someone-else" name="` + foreign + `"/></metadata></domain>`
	fdom, err := lv.DomainDefineXMLFlags(fx, 0)
	if err != nil {
		t.Fatalf("define a foreign domain: %v", err)
	}
	t.Cleanup(func() { _ = lv.DomainUndefine(fdom) })
	list, err := rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != name {
		t.Errorf("List: %+v, want only %s", list, name)
	}
	for op, f := range map[string]func(context.Context, string) error{"Destroy": rt.Destroy, "Stop": rt.Stop, "Start": rt.Start} {
		if err := f(ctx, foreign); !errors.Is(err, ports.ErrEnvNotFound) {
			t.Errorf("%s of a foreign domain: %v, want ErrEnvNotFound", op, err)
		}
	}
	if _, err := rt.Provision(ctx, spec(foreign)); !errors.Is(err, ports.ErrEnvExists) {
		t.Errorf("Provision over a foreign domain: %v, want ErrEnvExists", err)
	}
	if _, err := lv.DomainLookupByName(rt.DomainName(foreign)); err != nil {
		t.Errorf("the foreign domain is gone: %v", err)
	}

	state := func(want ports.EnvState) {
		t.Helper()
		got, err := rt.Inspect(ctx, name)
		if err != nil || got.State != want {
			t.Errorf("Inspect: %+v, %v; want %s", got, err, want)
		}
	}
	if err := rt.Pause(ctx, name); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	state(ports.EnvPaused)
	if err := rt.Resume(ctx, name); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	state(ports.EnvRunning)
	if err := rt.Stop(ctx, name); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	state(ports.EnvStopped)
	if err := rt.Stop(ctx, name); err != nil {
		t.Errorf("Stop of a stopped environment: %v", err)
	}
	if err := rt.Start(ctx, name); err != nil {
		t.Fatalf("Start: %v", err)
	}
	state(ports.EnvRunning)

	// A second adapter (a restarted server) recovers it, and removes the
	// folder of an environment whose domain vanished.
	stale := filepath.Join(td.cfg.StateDir, "vanished")
	if err := os.MkdirAll(stale, 0o711); err != nil {
		t.Fatal(err)
	}
	rt2, err := libvirt.New(td.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close()
	rec, err := rt2.Recover(ctx)
	if err != nil || len(rec) != 1 || rec[0].Name != name || rec[0].State != ports.EnvRunning {
		t.Errorf("Recover: %+v, %v", rec, err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("Recover left the stale folder %s: %v", stale, err)
	}
	// Another owner sees nothing.
	other, _ := libvirt.New(libvirt.Config{URI: td.cfg.URI, Owner: "nobody", StateDir: filepath.Join(dir, "other")})
	if l, err := other.List(ctx); err != nil || len(l) != 0 {
		t.Errorf("another owner lists %+v, %v", l, err)
	}
	other.Close()

	// A disk image: a qcow2 overlay on it and a cloud-init seed with the agent.
	base := filepath.Join(dir, "base.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", base, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v %s", err, out)
	}
	baseSum := fileSum(t, base)
	disk := "disk-" + owner[len(owner)-8:]
	ds := spec(disk)
	ds.Image = base
	ds.Agent.Binary = td.cfg.Kernel // any file: it is only copied onto the seed
	if _, err := rt.Provision(ctx, ds); err != nil {
		t.Fatalf("Provision of a disk image: %v", err)
	}
	info, err := exec.Command("qemu-img", "info", "--output=json", filepath.Join(rt.EnvDir(disk), "disk.qcow2")).Output()
	if err != nil || !bytes.Contains(info, []byte(base)) {
		t.Errorf("overlay: %v %s; want backed by %s", err, info, base)
	}
	ud, err := exec.Command("isoinfo", "-i", filepath.Join(rt.EnvDir(disk), "seed.iso"), "-R", "-x", "/user-data").Output()
	if err != nil || !bytes.Contains(ud, []byte("#cloud-config")) || !bytes.Contains(ud, []byte("AGENT_SECRET=s3cret")) ||
		!bytes.Contains(ud, []byte("AGENT_ID="+disk)) || !bytes.Contains(ud, []byte("agentic-agent.service")) {
		t.Errorf("seed user-data: %v\n%s", err, ud)
	}
	if vol, err := exec.Command("isoinfo", "-d", "-i", filepath.Join(rt.EnvDir(disk), "seed.iso")).Output(); err != nil || !bytes.Contains(vol, []byte("Volume id: cidata")) {
		t.Errorf("seed volume: %v\n%s", err, vol)
	}
	if ag, err := exec.Command("isoinfo", "-i", filepath.Join(rt.EnvDir(disk), "seed.iso"), "-R", "-x", "/agentic-agent").Output(); err != nil || string(ag) != "not really a kernel" {
		t.Errorf("seed agent binary: %v %q", err, ag)
	}
	if err := rt.Destroy(ctx, disk); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if left := leftovers(t, disk); len(left) > 0 {
		t.Errorf("Destroy left %v", left)
	}
	if fileSum(t, base) != baseSum {
		t.Error("the base image changed")
	}

	if err := rt.Destroy(ctx, name); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if _, err := rt.Inspect(ctx, name); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Errorf("Inspect after Destroy: %v", err)
	}
	if left := leftovers(t, name); len(left) > 0 {
		t.Errorf("Destroy left %v", left)
	}
	if err := rt.Destroy(ctx, name); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Errorf("second Destroy: %v, want ErrEnvNotFound", err)
	}
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestLibvirtUnavailable: a libvirtd that cannot be reached is
// ErrRuntimeUnavailable, not a hang or a panic.
func TestLibvirtUnavailable(t *testing.T) {
	dir := t.TempDir()
	rt, err := libvirt.New(libvirt.Config{URI: "qemu:///system", Socket: filepath.Join(dir, "no-such.sock"), StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if err := rt.Ping(context.Background()); !errors.Is(err, ports.ErrRuntimeUnavailable) {
		t.Errorf("Ping: %v, want ErrRuntimeUnavailable", err)
	}
	if _, err := rt.List(context.Background()); !errors.Is(err, ports.ErrRuntimeUnavailable) {
		t.Errorf("List: %v, want ErrRuntimeUnavailable", err)
	}
}

// libvirtQEMU is the adapter on qemu:///system with TCG and the tiny image,
// and a live agent link.
func libvirtQEMU(t *testing.T) (*libvirt.Runtime, *Link, libvirt.Config, *golibvirt.Libvirt) {
	t.Helper()
	needLibvirt(t)
	image := vmImage(t)
	dir := qemuDir(t)
	link := StartLink(t, dir)
	cfg := libvirt.Config{
		URI: "qemu:///system", Owner: randomOwner(t), StateDir: filepath.Join(dir, "vms"),
		ImageDir: image, Accel: libvirt.AccelTCG, StopTimeout: 30 * time.Second,
	}
	rt, err := libvirt.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	if rt.DomainType() != "qemu" {
		t.Fatalf("domain type %q, want qemu (TCG)", rt.DomainType())
	}
	lv := libvirtConn(t, "qemu:///system")
	t.Cleanup(func() {
		if t.Failed() {
			// The consoles of what is still there tell why.
			entries, _ := os.ReadDir(cfg.StateDir)
			for _, e := range entries {
				if b, err := os.ReadFile(filepath.Join(cfg.StateDir, e.Name(), "console.log")); err == nil {
					t.Logf("console of %s:\n%s", e.Name(), tail(b, 3000))
				}
			}
		}
	})
	return rt, link, cfg, lv
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// TestLibvirtConformance runs the ports.Runtime suite on real QEMU (TCG):
// the tiny VM boots, its agent registers through the virtio-serial relay,
// runs a command, survives Stop/Start, and Destroy leaves nothing.
func TestLibvirtConformance(t *testing.T) {
	rt, link, _, lv := libvirtQEMU(t)
	h := link.Harness(rt, ports.EnvironmentSpec{Resources: ports.Resources{CPUs: 1, MemoryMB: 512}}, libvirtLeftovers(rt, lv))
	h.BootTimeout = libvirtBootTimeout
	// The suite's duplicate Provision makes a spec with a fresh secret and
	// stores it, replacing the secret of the VM still booting; keep the first.
	t.Cleanup(func() {
		// Nothing of this owner may outlive the test.
		if envs, err := rt.List(context.Background()); err == nil {
			for _, e := range envs {
				t.Errorf("left behind: %+v", e)
				_ = rt.Destroy(context.Background(), e.Name)
			}
		}
	})
	portstest.RunRuntimeSuite(t, h)
}

// TestLibvirtAgent measures a VM's way to a working agent (Provision →
// agent ready → first command output), then checks what the suite does not:
// a restarted server (a new adapter) recovers the relay and the agent comes
// back; Pause/Resume; QEMU user networking.
func TestLibvirtAgent(t *testing.T) {
	rt, link, cfg, lv := libvirtQEMU(t)
	ctx := context.Background()
	name := "vmagent-" + cfg.Owner[len(cfg.Owner)-8:]
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	spec := ports.EnvironmentSpec{Name: name, Network: ports.NetworkUser, Agent: link.Bootstrap}
	spec.Agent.ID, spec.Agent.Secret = name, hex.EncodeToString(secret)
	if err := link.Credentials.Put(name, spec.Agent.Secret); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Destroy(context.Background(), name) })

	start := time.Now()
	if _, err := rt.Provision(ctx, spec); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	provisioned := time.Since(start)
	waitReady(t, link, name, true)
	ready := time.Since(start)
	out, firstAt := runVM(t, link, name, "echo first-output; cat /proc/uptime; ip -4 addr show eth0; cat /proc/cmdline; id -u")
	first := firstAt.Sub(start)
	t.Logf("TIMING Provision %s, agent ready %s, first command output %s (TCG, 1 vCPU, 512 MiB)",
		provisioned.Round(time.Millisecond), ready.Round(time.Millisecond), first.Round(time.Millisecond))
	if !strings.Contains(out, "first-output") || !strings.Contains(out, "10.0.2.15") {
		t.Errorf("command output %q: want first-output and the user network's 10.0.2.15", out)
	}
	if strings.Contains(out, spec.Agent.Secret) {
		t.Errorf("the secret is visible to guest processes: %q", out)
	}
	// The guest's commands run as nobody: the agent's config and memory
	// are out of their reach.
	probe, _ := runVM(t, link, name, "id -u; cat /etc/agentic-sandbox/agent.env 2>&1; cat /proc/$(pidof agentic-agent)/environ 2>&1; echo probed")
	if !strings.HasPrefix(probe, "65534") || !strings.Contains(probe, "probed") || strings.Contains(probe, spec.Agent.Secret) {
		t.Errorf("a guest command as %q found the secret or did not run: %q", strings.SplitN(probe, "\n", 2)[0], probe)
	}
	b, err := os.ReadFile(rt.ConsolePath(name))
	if err != nil || !bytes.Contains(b, []byte("agentic-init: agent starting")) {
		t.Errorf("console log: %v\n%s", err, tail(b, 2000))
	}
	// The guest's own clock (seconds since its kernel started) splits the
	// time: before the kernel, kernel to userspace, agent start to ready.
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "agentic-init:") || strings.Contains(line, "registered with") {
			t.Logf("TIMING console: %s", strings.TrimSpace(line))
		}
	}

	// The agent dies in the guest; init respawns it, and it must find its
	// way back through the relay although the virtio-serial port showed
	// the host nothing of the old connection's end.
	before, _ := link.Service.Agent(name)
	killStart := time.Now()
	// Detached: a command whose caller goes away is killed, and this one
	// ends with the agent that runs it. As root: the guest's commands run
	// as nobody by default, who cannot signal the agent.
	if _, err := link.Service.Start(ctx, name, ports.CommandSpec{Command: "sh", Args: []string{"-c", "kill -9 $(pidof agentic-agent)"}, RunAs: "0:0"},
		ports.StartOptions{Detached: true}); err != nil {
		t.Fatalf("kill the agent: %v", err)
	}
	for deadline := time.Now().Add(libvirtBootTimeout); ; time.Sleep(20 * time.Millisecond) {
		info, ok := link.Service.Agent(name)
		if ok && info.Status == "ready" && info.ConnectedAt.After(before.ConnectedAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the respawned agent did not come back: %+v", info)
		}
	}
	t.Logf("TIMING respawned agent back %s after a kill -9", time.Since(killStart).Round(time.Millisecond))
	runVM(t, link, name, "echo after-agent-restart")

	// A restarted server: the old adapter goes away (relays end, the agent
	// loses its connection), a new one recovers the domain and its relay.
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	waitReady(t, link, name, false)
	rt2, err := libvirt.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt2.Destroy(context.Background(), name); _ = rt2.Close() })
	recStart := time.Now()
	rec, err := rt2.Recover(ctx)
	if err != nil || len(rec) != 1 || rec[0].Name != name || rec[0].Network != ports.NetworkUser {
		t.Fatalf("Recover: %+v, %v", rec, err)
	}
	waitReady(t, link, name, true)
	t.Logf("TIMING agent back %s after Recover", time.Since(recStart).Round(time.Millisecond))
	runVM(t, link, name, "echo after-recover")

	// Pause freezes the guest; Resume continues it with its agent.
	if err := rt2.Pause(ctx, name); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if env, err := rt2.Inspect(ctx, name); err != nil || env.State != ports.EnvPaused {
		t.Errorf("Inspect of a paused VM: %+v, %v", env, err)
	}
	if err := rt2.Resume(ctx, name); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	runVM(t, link, name, "echo after-resume")

	stopStart := time.Now()
	if err := rt2.Stop(ctx, name); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	env, err := rt2.Inspect(ctx, name)
	t.Logf("TIMING graceful Stop %s: %+v, %v", time.Since(stopStart).Round(time.Millisecond), env.State, env.Detail)
	if err != nil || env.State != ports.EnvStopped || env.Detail != "shut down" {
		t.Errorf("after Stop: %+v, %v; want stopped by a guest shutdown (ACPI), not forced", env, err)
	}
	if err := rt2.Destroy(ctx, name); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if left := libvirtLeftovers(rt2, lv)(t, name); len(left) > 0 {
		t.Errorf("Destroy left %v", left)
	}
}

// TestLibvirtFailedBoot: a domain QEMU cannot start (its kernel is not a
// kernel) fails Provision and leaves nothing behind.
func TestLibvirtFailedBoot(t *testing.T) {
	rt, link, _, lv := libvirtQEMU(t)
	img := qemuDir(t)
	_ = os.Chmod(img, 0o755)
	for _, f := range []string{"vmlinuz", "initrd.img"} {
		if err := os.WriteFile(filepath.Join(img, f), []byte("garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	name := "badboot-" + randomOwner(t)[len("runtimetest-"):]
	spec := ports.EnvironmentSpec{Name: name, Image: img, Agent: link.Bootstrap}
	spec.Agent.ID, spec.Agent.Secret = name, "x"
	_, err := rt.Provision(context.Background(), spec)
	if err == nil {
		_ = rt.Destroy(context.Background(), name)
		t.Fatal("Provision of an unbootable image succeeded")
	}
	t.Logf("Provision: %v", err)
	if left := libvirtLeftovers(rt, lv)(t, name); len(left) > 0 {
		t.Errorf("a failed Provision left %v", left)
	}
}

func waitReady(t *testing.T, link *Link, name string, up bool) {
	t.Helper()
	deadline := time.Now().Add(libvirtBootTimeout)
	for time.Now().Before(deadline) {
		info, ok := link.Service.Agent(name)
		connected := ok && (info.Status == "ready" || info.Status == "busy")
		if connected == up {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("agent %s: connected=%v not reached within %s", name, up, libvirtBootTimeout)
}

// runVM runs a shell command through the agent and returns its output and
// when the first of it arrived.
func runVM(t *testing.T, link *Link, name, script string) (string, time.Time) {
	t.Helper()
	r := portstest.RunScript(t, link.Service, name, script, nil)
	if r.Exit != 0 {
		t.Fatalf("command on %s: exit %d (%s), output %q", name, r.Exit, r.Error, r.Output)
	}
	return r.Output, r.FirstOutput
}

// TestLibvirtTestDriverConformance is the fast conformance path: the
// ports.Runtime suite on libvirt's test driver, which runs no guest, so the
// test plays QEMU and the guest (fakeGuests). It checks in seconds what the
// TCG suite checks in a minute, through the adapter's real relay.
func TestLibvirtTestDriverConformance(t *testing.T) {
	needLibvirt(t)
	const uri = "test:///default"
	// The test driver's state lives while a connection is open.
	lv := libvirtConn(t, uri)
	dir := qemuDir(t)
	link := StartLink(t, dir)
	img := filepath.Join(dir, "image")
	if err := os.Mkdir(img, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"vmlinux", "initrd.img"} {
		if err := os.WriteFile(filepath.Join(img, f), []byte("no guest runs on the test driver\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := libvirt.New(libvirt.Config{URI: uri, Owner: randomOwner(t), StateDir: filepath.Join(dir, "vms"), ImageDir: img, StopTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	startFakeGuests(t, rt, link.Bootstrap.Binary, filepath.Join(dir, "guests"))
	h := link.Harness(rt, ports.EnvironmentSpec{Resources: ports.Resources{CPUs: 1, MemoryMB: 256}}, libvirtLeftovers(rt, lv))
	h.BootTimeout = 30 * time.Second
	// As on QEMU: the restarted guest still has the first secret.
	portstest.RunRuntimeSuite(t, h)
}

// startFakeGuests plays QEMU and the guest for rt's running domains on the
// test driver: it listens on a domain's channel socket, as QEMU does, and
// runs the real agent on the host with the config the adapter put in the
// domain's initrd, its serial port being a unix socket spliced to the
// relay's connection. A stopped or removed domain's agent is killed.
func startFakeGuests(t *testing.T, rt *libvirt.Runtime, agent, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		guests := map[string]*fakeGuest{}
		defer func() {
			for _, g := range guests {
				g.stop()
			}
		}()
		for {
			if envs, err := rt.List(ctx); err == nil {
				state := map[string]ports.EnvState{}
				for _, e := range envs {
					state[e.Name] = e.State
				}
				for name, g := range guests {
					switch state[name] {
					case ports.EnvRunning:
						g.freeze(false)
					case ports.EnvPaused:
						// A paused domain's guest is frozen, not gone: killing
						// its agent let a test that waits for the agent after
						// Resume see the old, dying connection as up.
						g.freeze(true)
					default:
						g.stop()
						delete(guests, name)
					}
				}
				for name, st := range state {
					if st == ports.EnvRunning && guests[name] == nil {
						if g, err := newFakeGuest(rt, agent, dir, name); err == nil {
							guests[name] = g
						} else {
							t.Logf("fake guest %s: %v", name, err)
						}
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", l, tail(b, 3000))
			}
		}
	})
}

type fakeGuest struct {
	channel, port net.Listener
	cmd           *exec.Cmd
	done          chan struct{}
	frozen        bool
}

func newFakeGuest(rt *libvirt.Runtime, agent, dir, name string) (*fakeGuest, error) {
	// The agent's config, as the adapter wrote it into the domain's initrd.
	initrd, err := os.ReadFile(filepath.Join(rt.EnvDir(name), "initrd.img"))
	if err != nil {
		return nil, err
	}
	env, err := cpioFile(initrd, "etc/agentic-sandbox/agent.env")
	if err != nil {
		return nil, err
	}
	envFile := filepath.Join(dir, name+".env")
	if err := os.WriteFile(envFile, env, 0o600); err != nil {
		return nil, err
	}
	portPath := filepath.Join(dir, name+".port")
	_ = os.Remove(portPath)
	port, err := net.Listen("unix", portPath)
	if err != nil {
		return nil, err
	}
	channel, err := net.Listen("unix", filepath.Join(rt.EnvDir(name), "agent.sock"))
	if err != nil {
		port.Close()
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		port.Close()
		channel.Close()
		return nil, err
	}
	cmd := exec.Command(agent, "--config", envFile, "--server", "unix://"+portPath)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		port.Close()
		channel.Close()
		return nil, err
	}
	logf.Close()
	g := &fakeGuest{channel: channel, port: port, cmd: cmd, done: make(chan struct{})}
	go g.serve()
	return g, nil
}

// serve splices one relay connection to one agent connection at a time.
func (g *fakeGuest) serve() {
	defer close(g.done)
	for {
		host, err := g.channel.Accept()
		if err != nil {
			return
		}
		guest, err := g.port.Accept()
		if err != nil {
			host.Close()
			return
		}
		var wg sync.WaitGroup
		wg.Add(2)
		for _, p := range [][2]net.Conn{{host, guest}, {guest, host}} {
			go func() {
				defer wg.Done()
				_, _ = io.Copy(p[0], p[1])
				host.Close()
				guest.Close()
			}()
		}
		wg.Wait()
	}
}

// freeze stops or continues the guest's agent, as QEMU pausing and
// resuming the domain does to the whole guest.
func (g *fakeGuest) freeze(frozen bool) {
	if g.frozen == frozen {
		return
	}
	sig := syscall.SIGCONT
	if frozen {
		sig = syscall.SIGSTOP
	}
	if g.cmd.Process.Signal(sig) == nil {
		g.frozen = frozen
	}
}

// stop kills the guest's agent (a domain that stopped runs nothing) and
// closes its sockets.
func (g *fakeGuest) stop() {
	_ = g.cmd.Process.Kill()
	_ = g.cmd.Wait()
	g.channel.Close()
	g.port.Close()
	<-g.done
}

// cpioFile is the content of the last member called name in a newc
// archive (a later member replaces an earlier one, as in the kernel).
func cpioFile(archive []byte, name string) ([]byte, error) {
	i := bytes.LastIndex(archive, []byte(name+"\x00"))
	if i < 110 || string(archive[i-110:i-104]) != "070701" {
		return nil, fmt.Errorf("no %s in the archive", name)
	}
	hdr := archive[i-110 : i]
	size, err1 := strconv.ParseUint(string(hdr[54:62]), 16, 32)
	nameSize, err2 := strconv.ParseUint(string(hdr[94:102]), 16, 32)
	if err1 != nil || err2 != nil || int(nameSize) != len(name)+1 {
		return nil, fmt.Errorf("bad cpio header of %s", name)
	}
	data := (i + int(nameSize) + 3) &^ 3
	if data+int(size) > len(archive) {
		return nil, fmt.Errorf("%s is cut short", name)
	}
	return archive[data : data+int(size)], nil
}
