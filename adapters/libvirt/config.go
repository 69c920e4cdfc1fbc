package libvirt

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Acceleration choices for Config.Accel.
const (
	AccelAuto = "auto"
	AccelTCG  = "tcg"
	AccelKVM  = "kvm"
)

// Config configures the libvirt runtime.
type Config struct {
	// URI is the libvirt connection URI; default $LIBVIRT_DEFAULT_URI, else
	// qemu:///system. test:///default is libvirt's in-daemon test driver
	// (domains without guests: lifecycle only, no agent).
	URI string
	// Socket is libvirtd's unix socket (default /var/run/libvirt/libvirt-sock).
	Socket string
	// Owner marks the domains of this server (metadata owner="…"); List,
	// Recover and Destroy touch no other. Default "agentic-sandbox".
	Owner string
	// NamePrefix is prepended to environment names to make domain names
	// (default "agentic-"), so they stand out in `virsh list`.
	NamePrefix string
	// StateDir holds one folder per environment: its initrd, console log,
	// agent channel socket and disks. It and its parents must be searchable
	// by the QEMU user (libvirt-qemu): folders are made 0711, files 0600
	// and libvirt hands them to QEMU while the domain runs.
	StateDir string
	// ImageDir is the tiny VM image folder (`make vm-image` writes build/vm
	// with scripts/build-vm-image.sh), used when a spec names no Image: its
	// vmlinux (else vmlinuz) and initrd.img, looked up at each Provision so a
	// rebuilt image needs no restart. Kernel and Initrd, when set, name the
	// files instead.
	ImageDir       string
	Kernel, Initrd string
	// DiskImageDir, when set, is the only place a spec's Image may come
	// from (besides ImageDir): an API caller must not boot any host file.
	// Images with a backing file are refused there, as their contents
	// would come from elsewhere.
	DiskImageDir string
	// Cmdline is the guest kernel command line for direct boot (default
	// "console=ttyS0 panic=-1").
	Cmdline string
	// Accel picks the domain type: "tcg" (type='qemu', software emulation),
	// "kvm" (type='kvm'), or "auto" (default): kvm only where /dev/kvm opens
	// read-write, the CPU has vmx or svm and the kernel's KVM is not the
	// nested "PVM" flavour (module kvm_pvm), on which stock guest kernels
	// hang; tcg otherwise. A remote URI never auto-selects kvm.
	Accel string
	// CPUs and MemoryMB are the defaults for a spec without Resources (1, 512).
	CPUs     int
	MemoryMB int
	// Profiles are named resource presets a spec can pick with Profile.
	Profiles map[string]Profile
	// StopTimeout bounds a graceful (ACPI) shutdown before Stop forces the
	// domain off (default 30s).
	StopTimeout time.Duration
	// AgentSocket, when set, overrides the agent socket recorded in a
	// domain's metadata for the relays Recover starts (a server whose socket
	// moved).
	AgentSocket string
	// QemuLogDir is where libvirtd writes each domain's QEMU log
	// (<domain>.log), which it keeps after undefine; Destroy removes it.
	// Default /var/log/libvirt/qemu for a local qemu:///system, none for
	// other URIs; "-" disables the removal.
	QemuLogDir string
	// QemuImg and ISOTool are the programs that make disk overlays and the
	// cloud-init seed (defaults qemu-img and the first of genisoimage,
	// mkisofs, xorrisofs in PATH).
	QemuImg string
	ISOTool string
	// NoRestore boots every warm pool member instead of restoring it from
	// a saved template guest (the default for the tiny image under QEMU;
	// StateDir/.templates holds about 100 MB per template).
	NoRestore bool
	// RestoreAll restores every VM of the tiny image from a template, not
	// only pool members: the first create of a shape boots and makes the
	// template in the background. Clones share the template's kernel
	// layout (KASLR) and boot id; each gets its own identity, RNG reseed
	// and clock.
	RestoreAll bool
	Logger     *slog.Logger
}

// Profile is a named resource preset.
type Profile struct {
	CPUs     int
	MemoryMB int
}

func (c *Config) defaults() error {
	if c.URI == "" {
		c.URI = os.Getenv("LIBVIRT_DEFAULT_URI")
	}
	if c.URI == "" {
		c.URI = "qemu:///system"
	}
	u, err := url.Parse(c.URI)
	if err != nil || u.Scheme == "" {
		return fmt.Errorf("libvirt URI %q is not a URI", c.URI)
	}
	if c.Socket == "" {
		c.Socket = "/var/run/libvirt/libvirt-sock"
	}
	if c.Owner == "" {
		c.Owner = "agentic-sandbox"
	}
	if c.NamePrefix == "" {
		c.NamePrefix = "agentic-"
	}
	if c.StateDir == "" {
		return errors.New("libvirt: no StateDir")
	}
	if c.Cmdline == "" {
		c.Cmdline = "console=ttyS0 panic=-1"
	}
	if c.Accel == "" {
		c.Accel = AccelAuto
	}
	switch c.Accel {
	case AccelAuto, AccelTCG, AccelKVM:
	default:
		return fmt.Errorf("libvirt: Accel %q: want auto, tcg or kvm", c.Accel)
	}
	if c.CPUs <= 0 {
		c.CPUs = 1
	}
	if c.MemoryMB <= 0 {
		c.MemoryMB = 512
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 30 * time.Second
	}
	switch {
	case c.QemuLogDir == "-":
		c.QemuLogDir = ""
	case c.QemuLogDir == "" && c.systemQEMU():
		c.QemuLogDir = "/var/log/libvirt/qemu"
	}
	if c.QemuImg == "" {
		c.QemuImg = "qemu-img"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// imageFiles finds the kernel and initrd of a tiny-image folder. vmlinux,
// the uncompressed kernel, comes first: QEMU boots it through its PVH entry
// point, which under TCG saves the seconds a bzImage spends in real-mode
// setup and decompression.
func imageFiles(dir string) (kernel, initrd string) {
	kernel = filepath.Join(dir, "vmlinux")
	if _, err := os.Stat(kernel); err != nil {
		kernel = filepath.Join(dir, "vmlinuz")
	}
	return kernel, filepath.Join(dir, "initrd.img")
}

// driver is the URI's hypervisor driver: "qemu", "test", …
func (c *Config) driver() string {
	u, _ := url.Parse(c.URI)
	return strings.SplitN(u.Scheme, "+", 2)[0]
}

func (c *Config) local() bool {
	u, _ := url.Parse(c.URI)
	return u.Host == ""
}

// systemQEMU is a local qemu:///system, where QEMU runs as libvirt's own
// user (libvirt-qemu), not as this process's.
func (c *Config) systemQEMU() bool {
	u, _ := url.Parse(c.URI)
	return c.driver() == "qemu" && c.local() && strings.TrimSuffix(u.Path, "/") == "/system"
}

// domainType resolves Accel into the domain's type attribute.
func (c *Config) domainType() string {
	switch c.driver() {
	case "qemu":
	case "test":
		return "test"
	default:
		return c.driver()
	}
	switch c.Accel {
	case AccelKVM:
		return "kvm"
	case AccelTCG:
		return "qemu"
	}
	if c.local() && kvmUsable() {
		return "kvm"
	}
	return "qemu"
}

// kvmUsable is the auto-detection of hardware virtualisation that works:
// /dev/kvm opens read-write, the CPU advertises vmx or svm (so KVM is not a
// software shim), and the kvm_pvm module (nested "pagetable virtual
// machine" KVM, on which stock guest kernels hang) is not loaded.
func kvmUsable() bool {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		return false
	}
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(cpuinfo), "\n") {
		if !strings.HasPrefix(line, "flags") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if f == "vmx" || f == "svm" {
				return true
			}
		}
		return false
	}
	return false
}
