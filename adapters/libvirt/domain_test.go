package libvirt

import (
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

func testPlan() domainPlan {
	return domainPlan{
		DomainName: "agentic-a1", Type: "qemu", VCPUs: 2, MemoryMiB: 384, Network: networkNone,
		Kernel: "/img/vmlinux", Initrd: "/state/a1/initrd.img", Cmdline: "console=ttyS0 panic=-1",
		Console: "/state/a1/console.log", Channel: "/state/a1/agent.sock",
		Meta: envMeta{Owner: "srv", Name: "a1", Created: "2026-01-02T03:04:05Z", Network: networkNone,
			Socket: "/run/agent.sock", Dir: "/state/a1", Labels: metaLabels(map[string]string{"team": `a&b <"c">`, "x": "y"})},
	}
}

func parseDomain(t *testing.T, x string) *libvirtxml.Domain {
	t.Helper()
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(x); err != nil {
		t.Fatalf("unmarshal %v:\n%s", err, x)
	}
	return d
}

func TestDomainXMLDirectBoot(t *testing.T) {
	x, err := domainXML(testPlan())
	if err != nil {
		t.Fatal(err)
	}
	d := parseDomain(t, x)
	if d.Type != "qemu" || d.Name != "agentic-a1" || d.VCPU.Value != 2 || d.Memory.Value != 384 || d.Memory.Unit != "MiB" {
		t.Errorf("type/name/vcpu/memory: %s %s %+v %+v", d.Type, d.Name, d.VCPU, d.Memory)
	}
	if d.OS.Kernel != "/img/vmlinux" || d.OS.Initrd != "/state/a1/initrd.img" || d.OS.Cmdline != "console=ttyS0 panic=-1" {
		t.Errorf("direct boot: %+v", d.OS)
	}
	// Without ACPI a guest poweroff leaves the domain running; poweroff must
	// end the domain, not restart it.
	if d.Features == nil || d.Features.ACPI == nil || d.OnPoweroff != "destroy" {
		t.Errorf("acpi %+v, on_poweroff %q", d.Features, d.OnPoweroff)
	}
	if d.GenID == nil || !strings.Contains(x, "<genid") {
		t.Errorf("no VM generation id (the guest's RNG would not reseed after a restore): %s", x)
	}
	dev := d.Devices
	if len(dev.Interfaces) != 0 {
		t.Errorf("no network by default, got %+v", dev.Interfaces)
	}
	if len(dev.Disks) != 0 {
		t.Errorf("direct boot has no disks, got %+v", dev.Disks)
	}
	if len(dev.Serials) != 1 || dev.Serials[0].Source.File == nil || dev.Serials[0].Source.File.Path != "/state/a1/console.log" {
		t.Errorf("serial console: %+v", dev.Serials)
	}
	if len(dev.Channels) != 1 || dev.Channels[0].Source.UNIX == nil || dev.Channels[0].Source.UNIX.Mode != "bind" ||
		dev.Channels[0].Source.UNIX.Path != "/state/a1/agent.sock" || dev.Channels[0].Target.VirtIO.Name != AgentChannel {
		t.Errorf("agent channel: %+v", dev.Channels)
	}
	if dev.MemBalloon == nil || dev.MemBalloon.Model != "none" {
		t.Errorf("balloon: %+v", dev.MemBalloon)
	}
	meta, ok := parseMeta(d.Metadata)
	if !ok {
		t.Fatalf("metadata not found in %+v", d.Metadata)
	}
	if meta.Owner != "srv" || meta.Name != "a1" || meta.Socket != "/run/agent.sock" || meta.Dir != "/state/a1" ||
		meta.labels()["team"] != `a&b <"c">` || meta.labels()["x"] != "y" || meta.created().IsZero() {
		t.Errorf("metadata round trip: %+v", meta)
	}
}

func TestDomainXMLUserNetworkAndDisk(t *testing.T) {
	p := testPlan()
	p.Network = networkUser
	p.Kernel, p.Initrd, p.Cmdline = "", "", ""
	p.Disk, p.Seed = "/state/a1/disk.qcow2", "/state/a1/seed.iso"
	x, err := domainXML(p)
	if err != nil {
		t.Fatal(err)
	}
	d := parseDomain(t, x)
	if len(d.Devices.Interfaces) != 1 || d.Devices.Interfaces[0].Source.User == nil {
		t.Errorf("user network: %+v", d.Devices.Interfaces)
	}
	if len(d.OS.BootDevices) != 1 || d.OS.BootDevices[0].Dev != "hd" || d.OS.Kernel != "" {
		t.Errorf("disk boot: %+v", d.OS)
	}
	if len(d.Devices.Disks) != 2 || d.Devices.Disks[0].Driver.Type != "qcow2" || d.Devices.Disks[1].Device != "cdrom" ||
		d.Devices.Disks[1].ReadOnly == nil {
		t.Errorf("disks: %+v", d.Devices.Disks)
	}
	p.Network = "bridge"
	if _, err := domainXML(p); err == nil {
		t.Error("a bridge network was accepted")
	}
}

func TestParseMetaForeign(t *testing.T) {
	for _, md := range []*libvirtxml.DomainMetadata{
		nil,
		{XML: `<other:x xmlns:other="urn:other"/>`},
		{XML: `<agentic:env xmlns:agentic="urn:not-ours" owner="srv" name="a1"/>`},
	} {
		if m, ok := parseMeta(md); ok {
			t.Errorf("parseMeta(%+v) = %+v, want none", md, m)
		}
	}
	// Ours among others, as libvirt returns several metadata elements.
	m, ok := parseMeta(&libvirtxml.DomainMetadata{XML: `<other:x xmlns:other="urn:other"/>` + envMeta{Owner: "o", Name: "n"}.marshal()})
	if !ok || m.Owner != "o" || m.Name != "n" {
		t.Errorf("parseMeta: %+v %v", m, ok)
	}
}

func TestToMiB(t *testing.T) {
	for _, c := range []struct {
		v    uint
		unit string
		want uint
	}{{524288, "KiB", 512}, {524288, "", 512}, {512, "MiB", 512}, {2, "GiB", 2048}, {1 << 30, "bytes", 1024}} {
		if got := toMiB(c.v, c.unit); got != c.want {
			t.Errorf("toMiB(%d, %q) = %d, want %d", c.v, c.unit, got, c.want)
		}
	}
}

func TestUserData(t *testing.T) {
	ud := userData(map[string]string{"AGENT_ID": "a1", "AGENT_SECRET": "s e$cret"}, true)
	for _, want := range []string{"#cloud-config\n", "      AGENT_ID=a1\n", `      AGENT_SECRET="s e\$cret"`,
		"agentic-agent.service", "LABEL=cidata", "enable, --now"} {
		if !strings.Contains(ud, want) {
			t.Errorf("user-data lacks %q:\n%s", want, ud)
		}
	}
	if strings.Contains(userData(nil, false), "cidata") {
		t.Error("user-data copies an agent binary it was not given")
	}
}
