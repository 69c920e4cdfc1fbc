package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/libvirt"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// libvirtOptions are the libvirt runtime's settings.
type libvirtOptions struct {
	// URI is libvirt's connection URI; "" is the adapter's default.
	URI string
	// VMImageDir holds the tiny VM image (vmlinuz, initrd.img) of `make vm-image`.
	VMImageDir string
	// Accel is the VMs' accelerator: kvm, tcg or auto (KVM where it works).
	Accel string
	// ImageDir is the only place VM disk images named by API callers come from.
	ImageDir string
	// NoRestore boots warm pool VMs instead of restoring them from a saved
	// template guest; RestoreAll restores every tiny-image VM, not only
	// pool members.
	NoRestore, RestoreAll bool
}

// libvirtSocket is where libvirtd listens.
const libvirtSocket = "/var/run/libvirt/libvirt-sock"

// libvirtRuntime runs environments as VMs under libvirt and QEMU. A VM per
// task would be slow, so tasks never land on it unless asked.
var libvirtRuntime = runtimeDef[libvirtOptions]{
	Name:     libvirt.RuntimeName,
	Help:     "a VM under libvirt and QEMU (the tiny image or a disk image), reaching the server over a virtio-serial channel",
	FoundDoc: "when `LIBVIRT_DEFAULT_URI` is set or `" + libvirtSocket + "` exists",
	HowTo:    "start libvirtd on this machine (`make test-env` installs libvirt and QEMU and starts `virtlogd` and `libvirtd`) or point `LIBVIRT_DEFAULT_URI` at one",
	Settings: []setting{
		{Env: "LIBVIRT_DEFAULT_URI", DefaultDoc: "`qemu:///system`", Doc: "where the libvirt runtime reaches libvirtd"},
		{Env: "AGENTIC_VM_IMAGE_DIR", Flag: "vm-image-dir", Default: "./build/vm",
			Doc: "the tiny VM image (`vmlinuz`, `initrd.img`) of `make vm-image`"},
		{Env: "AGENTIC_LIBVIRT_ACCEL", Flag: "libvirt-accel", Default: libvirt.AccelAuto,
			Choices: []string{libvirt.AccelKVM, libvirt.AccelTCG, libvirt.AccelAuto},
			Doc:     "`kvm`, `tcg` or `auto` (KVM where it works, else TCG)", Help: "the VMs' accelerator: kvm, tcg or auto (KVM where it works, else TCG)"},
		{Env: "AGENTIC_LIBVIRT_RESTORE", Default: "1", Choices: []string{"0", "1", "all"},
			Doc: "`1`: warm pool VMs of the tiny image are restored from a saved template guest (made once per shape, ~100 MB in `<data>/vms/.templates`); `all`: every VM of the tiny image is (the first of a shape boots while its template is made; clones share the template's kernel layout and boot id); `0`: each one boots"},
		{Env: "AGENTIC_IMAGE_DIR", Flag: "image-dir", DefaultDoc: "`<data dir>/images`",
			Doc:  "the only place VM disk images named by API callers come from (besides the tiny image); symbolic links are resolved, images with a backing file refused, formats qcow2 and raw",
			Help: "the only dir VM disk images named by API callers come from"},
	},
	Configure: func(v settingValues, cfg Config) (libvirtOptions, error) {
		o := libvirtOptions{URI: v["LIBVIRT_DEFAULT_URI"], Accel: v["AGENTIC_LIBVIRT_ACCEL"],
			NoRestore: v["AGENTIC_LIBVIRT_RESTORE"] == "0", RestoreAll: v["AGENTIC_LIBVIRT_RESTORE"] == "all"}
		if err := checkURL(o.URI); err != nil {
			return o, fmt.Errorf("LIBVIRT_DEFAULT_URI: %w", err)
		}
		var err error
		if o.VMImageDir, err = filepath.Abs(v["AGENTIC_VM_IMAGE_DIR"]); err != nil {
			return o, fmt.Errorf("AGENTIC_VM_IMAGE_DIR: %w", err)
		}
		images := v["AGENTIC_IMAGE_DIR"]
		if images == "" {
			images = filepath.Join(cfg.DataDir, "images")
		}
		if o.ImageDir, err = filepath.Abs(images); err != nil {
			return o, fmt.Errorf("AGENTIC_IMAGE_DIR: %w", err)
		}
		return o, nil
	},
	Found: func(o libvirtOptions) bool { return o.URI != "" || exists(libvirtSocket) },
	New: func(cfg Config, o libvirtOptions, d runtimeDeps) (ports.Runtime, func(), error) {
		// QEMU runs as its own user and must reach the VMs' files: the data
		// dir is opened for search only (its files stay 0600, secrets/ 0700).
		if err := os.Chmod(cfg.DataDir, 0o711); err != nil { //nolint:gosec // search only, for QEMU; the files inside stay 0600
			return nil, nil, err
		}
		rt, err := libvirt.New(libvirt.Config{
			URI: o.URI, Owner: owner(cfg), StateDir: filepath.Join(cfg.DataDir, "vms"), Logger: d.Log,
			ImageDir: o.VMImageDir, Accel: o.Accel, DiskImageDir: o.ImageDir,
			NoRestore: o.NoRestore, RestoreAll: o.RestoreAll,
		})
		if err != nil {
			return nil, nil, err
		}
		return rt, func() { _ = rt.Close() }, nil
	},
}
