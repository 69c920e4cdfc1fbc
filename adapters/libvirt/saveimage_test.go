package libvirt

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

// fakeSaveImage writes a save image laid out as libvirt 9 writes one.
func fakeSaveImage(t *testing.T, path, xml, cookie string, dataLen int, mutate func(hdr []byte)) []byte {
	t.Helper()
	hdr := make([]byte, saveHeaderLen)
	copy(hdr, saveMagic)
	data := make([]byte, dataLen)
	copy(data, xml)
	copy(data[len(xml)+1:], cookie)
	le := binary.LittleEndian
	le.PutUint32(hdr[16:], saveVersion)
	le.PutUint32(hdr[20:], uint32(dataLen))
	le.PutUint32(hdr[24:], 1) // was running
	le.PutUint32(hdr[32:], uint32(len(xml)+1))
	if mutate != nil {
		mutate(hdr)
	}
	stream := append([]byte(qemuVMMagic), bytes.Repeat([]byte("guest memory "), 5000)...)
	if err := os.WriteFile(path, append(append(hdr, data...), stream...), 0o600); err != nil {
		t.Fatal(err)
	}
	return stream
}

func TestSaveImageClone(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "t.sav")
	stream := fakeSaveImage(t, src, "<domain><name>tmpl</name></domain>", "<cookie/>", 4096, nil)
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := readSaveImage(f)
	if err != nil {
		t.Fatal(err)
	}
	if img.xml != "<domain><name>tmpl</name></domain>" || string(img.cookie) != "<cookie/>" {
		t.Fatalf("read %q cookie %q", img.xml, img.cookie)
	}
	longer := "<domain><name>a-much-longer-member-name</name></domain>"
	dst, err := os.Create(filepath.Join(dir, "c.sav"))
	if err != nil {
		t.Fatal(err)
	}
	if err := writeClone(dst, f, img, longer); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	g, _ := os.Open(dst.Name())
	defer g.Close()
	clone, err := readSaveImage(g)
	if err != nil || clone.xml != longer || string(clone.cookie) != "<cookie/>" || clone.streamFrom != img.streamFrom {
		t.Fatalf("clone: %+v, %v", clone, err)
	}
	b, _ := os.ReadFile(dst.Name())
	if !bytes.Equal(b[clone.streamFrom:], stream) {
		t.Fatal("the clone's QEMU stream differs from the template's")
	}
	// An XML that does not fit the data block is refused, not truncated.
	if err := writeClone(dst, f, img, strings.Repeat("x", 4096)); err == nil {
		t.Fatal("an XML larger than the data block was written")
	}
}

func TestSaveImageRefusesOtherLayouts(t *testing.T) {
	dir := t.TempDir()
	for name, mutate := range map[string]func([]byte){
		"partial":    func(h []byte) { copy(h, "LibvirtQemudPart") },
		"version 3":  func(h []byte) { binary.LittleEndian.PutUint32(h[16:], 3) },
		"compressed": func(h []byte) { binary.LittleEndian.PutUint32(h[28:], 1) },
		"cookie off": func(h []byte) { binary.LittleEndian.PutUint32(h[32:], 7) },
		"huge data":  func(h []byte) { binary.LittleEndian.PutUint32(h[20:], 1<<30) },
	} {
		p := filepath.Join(dir, "x.sav")
		fakeSaveImage(t, p, "<domain/>", "<c/>", 512, mutate)
		f, _ := os.Open(p)
		if _, err := readSaveImage(f); err == nil {
			t.Errorf("%s: accepted", name)
		}
		f.Close()
	}
	// No QEMU stream after the data block.
	p := filepath.Join(dir, "short.sav")
	fakeSaveImage(t, p, "<domain/>", "<c/>", 512, nil)
	b, _ := os.ReadFile(p)
	_ = os.WriteFile(p, b[:saveHeaderLen+512], 0o600)
	f, _ := os.Open(p)
	defer f.Close()
	if _, err := readSaveImage(f); err == nil {
		t.Error("an image without a stream accepted")
	}
}

// cloneXML keeps the saved guest's devices and changes only what makes the
// clone another machine.
func TestCloneXML(t *testing.T) {
	tmpl := domainPlan{
		DomainName: "agentic-tmpl-x", Type: "qemu", VCPUs: 1, MemoryMiB: 512, Network: networkNone,
		Kernel: "/img/vmlinux", Initrd: "/s/.templates/x.build/initrd.img", Cmdline: "console=ttyS0",
		Console: "/s/.templates/x.build/console.log", Channel: "/s/.templates/x.build/agent.sock",
		Meta: envMeta{Owner: "o/template", Name: "tmpl-x"},
	}
	saved, err := domainXML(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	member := tmpl
	member.DomainName, member.UUID = "agentic-m1", "5f1c54c5-0b6e-4a4f-9a86-2b3b8d1f3b11"
	member.Initrd, member.Console, member.Channel = "/s/m1/initrd.img", "/s/m1/console.log", "/s/m1/agent.sock"
	member.Meta = envMeta{Owner: "o", Name: "m1", Labels: metaLabels(map[string]string{"agentic-sandbox.pool": "vms"})}
	x, err := cloneXML(saved, member)
	if err != nil {
		t.Fatal(err)
	}
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	meta, ok := parseMeta(d.Metadata)
	if d.Name != "agentic-m1" || d.UUID != member.UUID || d.OS.Initrd != "/s/m1/initrd.img" || d.OS.Kernel != "/img/vmlinux" ||
		d.Devices.Serials[0].Source.File.Path != "/s/m1/console.log" || d.Devices.Channels[0].Source.UNIX.Path != "/s/m1/agent.sock" ||
		!ok || meta.Owner != "o" || meta.Name != "m1" || len(meta.Labels) != 1 || d.GenID == nil || d.GenID.Value != "" {
		t.Fatalf("clone XML:\n%s", x)
	}
	if strings.Contains(x, ".templates") || strings.Contains(x, "tmpl-x") {
		t.Fatalf("the clone still names the template:\n%s", x)
	}
}
