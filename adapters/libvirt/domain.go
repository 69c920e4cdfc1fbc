package libvirt

import (
	"encoding/xml"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"libvirt.org/go/libvirtxml"
)

// MetadataNS is the namespace of the element that marks a domain as an
// environment of this project, and of which server (owner).
const MetadataNS = "https://agentic-sandbox.dev/env/1"

// AgentChannel is the virtio-serial port name of the agent's channel; the
// guest sees it as /dev/virtio-ports/<name> (the tiny image's init makes the
// link, as udev would) and as /dev/vportNp1.
const AgentChannel = "io.agentic-sandbox.agent"

// envMeta is the <agentic:env> element in a domain's <metadata>.
type envMeta struct {
	XMLName xml.Name          `xml:"https://agentic-sandbox.dev/env/1 env"`
	Owner   string            `xml:"owner,attr"`
	Name    string            `xml:"name,attr"`
	Created string            `xml:"created,attr,omitempty"`
	Network ports.NetworkMode `xml:"network,attr,omitempty"`
	Image   string            `xml:"image,attr,omitempty"`
	Socket  string            `xml:"agent-socket,attr,omitempty"`
	Dir     string            `xml:"state-dir,attr,omitempty"`
	Labels  []metaLabel       `xml:"https://agentic-sandbox.dev/env/1 label"`
}

type metaLabel struct {
	Key   string `xml:"key,attr"`
	Value string `xml:"value,attr"`
}

// marshal renders the element with an explicit prefix (libvirt keeps
// metadata elements as written).
func (m envMeta) marshal() string {
	var b strings.Builder
	attr := func(k, v string) {
		if v == "" {
			return
		}
		b.WriteString(" " + k + `="`)
		_ = xml.EscapeText(&b, []byte(v))
		b.WriteString(`"`)
	}
	b.WriteString(`<agentic:env xmlns:agentic="` + MetadataNS + `"`)
	attr("owner", m.Owner)
	attr("name", m.Name)
	attr("created", m.Created)
	attr("network", string(m.Network))
	attr("image", m.Image)
	attr("agent-socket", m.Socket)
	attr("state-dir", m.Dir)
	if len(m.Labels) == 0 {
		b.WriteString("/>")
		return b.String()
	}
	b.WriteString(">")
	for _, l := range m.Labels {
		b.WriteString("<agentic:label")
		attr("key", l.Key)
		b.WriteString(` value="`)
		_ = xml.EscapeText(&b, []byte(l.Value))
		b.WriteString(`"/>`)
	}
	b.WriteString("</agentic:env>")
	return b.String()
}

// parseMeta finds our element in a domain's metadata; ok is false for a
// domain without one (not made by this project).
func parseMeta(md *libvirtxml.DomainMetadata) (envMeta, bool) {
	if md == nil || !strings.Contains(md.XML, MetadataNS) {
		return envMeta{}, false
	}
	// The inner XML holds sibling elements of any namespace; wrap it to
	// decode them as one document.
	var wrap struct {
		Envs []envMeta `xml:"https://agentic-sandbox.dev/env/1 env"`
	}
	if err := xml.Unmarshal([]byte("<metadata>"+md.XML+"</metadata>"), &wrap); err != nil || len(wrap.Envs) == 0 {
		return envMeta{}, false
	}
	return wrap.Envs[0], true
}

func (m envMeta) labels() map[string]string {
	if len(m.Labels) == 0 {
		return nil
	}
	out := make(map[string]string, len(m.Labels))
	for _, l := range m.Labels {
		out[l.Key] = l.Value
	}
	return out
}

func (m envMeta) created() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, m.Created)
	return t
}

func metaLabels(labels map[string]string) []metaLabel {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]metaLabel, 0, len(keys))
	for _, k := range keys {
		out = append(out, metaLabel{Key: k, Value: labels[k]})
	}
	return out
}

// domainPlan is everything domainXML needs for one environment.
type domainPlan struct {
	DomainName string
	UUID       string // "" lets libvirt choose
	Type       string // "qemu", "kvm" or "test"
	VCPUs      uint
	MemoryMiB  uint
	Meta       envMeta
	Network    ports.NetworkMode
	// Direct kernel boot (the tiny image) ...
	Kernel, Initrd, Cmdline string
	// ... or a disk (a qcow2 overlay) with a cloud-init seed ISO.
	Disk, Seed string
	Console    string // serial console log file
	Channel    string // the agent channel's unix socket (QEMU listens)

	// What the tiny image's initrd is made of (a template needs them too).
	agentEnv               map[string]string
	baseInitrd, addedAgent string
}

// domainXML builds the typed domain definition.
func domainXML(p domainPlan) (string, error) {
	on := "on"
	d := &libvirtxml.Domain{
		Type:        p.Type,
		Name:        p.DomainName,
		UUID:        p.UUID,
		Description: "agentic-sandbox environment " + p.Meta.Name + " (owner " + p.Meta.Owner + ")",
		Metadata:    &libvirtxml.DomainMetadata{XML: p.Meta.marshal()},
		Memory:      &libvirtxml.DomainMemory{Value: p.MemoryMiB, Unit: "MiB"},
		VCPU:        &libvirtxml.DomainVCPU{Value: p.VCPUs},
		OS: &libvirtxml.DomainOS{
			Type: &libvirtxml.DomainOSType{Arch: "x86_64", Type: "hvm"},
		},
		Features:      &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}},
		OnPoweroff:    "destroy",
		OnReboot:      "restart",
		OnCrash:       "destroy",
		Devices:       &libvirtxml.DomainDeviceList{},
		Clock:         &libvirtxml.DomainClock{Offset: "utc"},
		CurrentMemory: &libvirtxml.DomainCurrentMemory{Value: p.MemoryMiB, Unit: "MiB"},
	}
	if p.Type == "test" {
		// The test driver knows no machine types or devices beyond the basics.
		d.OS.Type.Arch = "i686"
	} else {
		// A VM generation id, new on every restore of a saved state, makes
		// the guest kernel reseed its RNG (vmgenid): two guests resumed from
		// one saved state would otherwise share random numbers for a while
		// (measured, docs/vm-restore.md).
		d.GenID = &libvirtxml.DomainGenID{}
	}
	if p.Kernel != "" {
		d.OS.Kernel, d.OS.Initrd, d.OS.Cmdline = p.Kernel, p.Initrd, p.Cmdline
	} else {
		d.OS.BootDevices = []libvirtxml.DomainBootDevice{{Dev: "hd"}}
	}
	dev := d.Devices
	if p.Disk != "" {
		dev.Disks = append(dev.Disks, libvirtxml.DomainDisk{
			Device: "disk",
			Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2"},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: p.Disk}},
			Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
		})
	}
	if p.Seed != "" {
		dev.Disks = append(dev.Disks, libvirtxml.DomainDisk{
			Device:   "cdrom",
			Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
			Source:   &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: p.Seed}},
			Target:   &libvirtxml.DomainDiskTarget{Dev: "sda", Bus: "sata"},
			ReadOnly: &libvirtxml.DomainDiskReadOnly{},
		})
	}
	if p.Console != "" {
		port := uint(0)
		dev.Serials = []libvirtxml.DomainSerial{{
			Source: &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: p.Console, Append: on}},
			Target: &libvirtxml.DomainSerialTarget{Port: &port},
		}}
	}
	if p.Channel != "" {
		dev.Channels = []libvirtxml.DomainChannel{{
			Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind", Path: p.Channel}},
			Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: AgentChannel}},
		}}
	}
	if p.Type != "test" {
		// No USB, balloon, graphics or default NIC: fewer devices boot faster
		// under TCG and leave the guest nothing it does not need.
		dev.Controllers = []libvirtxml.DomainController{{Type: "usb", Model: "none"}}
		dev.MemBalloon = &libvirtxml.DomainMemBalloon{Model: "none"}
		dev.RNGs = []libvirtxml.DomainRNG{{
			Model:   "virtio",
			Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}},
		}}
	}
	switch p.Network {
	case networkNone, ports.NetworkProxy: // no device: proxy egress goes through the agent
	case networkUser:
		dev.Interfaces = []libvirtxml.DomainInterface{{
			Source: &libvirtxml.DomainInterfaceSource{User: &libvirtxml.DomainInterfaceSourceUser{}},
			Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
		}}
	default:
		return "", fmt.Errorf("network %q", p.Network)
	}
	return d.Marshal()
}
