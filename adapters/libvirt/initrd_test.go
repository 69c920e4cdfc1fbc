package libvirt

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

type cpioMember struct {
	mode uint32
	data []byte
}

// readCPIOs reads concatenated newc archives as the kernel does: NUL
// padding between archives, a later member replacing an earlier one. It
// fails the test on anything the kernel would reject.
func readCPIOs(t *testing.T, b []byte) map[string]cpioMember {
	t.Helper()
	out := map[string]cpioMember{}
	off := 0
	field := func(i int) int {
		v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
		if err != nil {
			t.Fatalf("header at %d: %v", off, err)
		}
		return int(v)
	}
	for off < len(b) {
		if b[off] == 0 {
			if off%4 != 0 {
				t.Fatalf("padding at unaligned offset %d", off)
			}
			off += 4
			continue
		}
		if off%4 != 0 || string(b[off:off+6]) != "070701" {
			t.Fatalf("no newc header at %d: %q", off, b[off:min(off+16, len(b))])
		}
		mode, size, nameSize := uint32(field(1)), field(6), field(11)
		name := string(b[off+110 : off+110+nameSize-1])
		data := (off + 110 + nameSize + 3) &^ 3
		if name != "TRAILER!!!" {
			out[name] = cpioMember{mode: mode, data: b[data : data+size]}
		}
		off = (data + size + 3) &^ 3
	}
	return out
}

func TestWriteInitrd(t *testing.T) {
	dir := t.TempDir()
	// A base archive of a length that is not a multiple of 4 (as a
	// compressed one would be): the appended archive must still be aligned.
	var base bytes.Buffer
	if err := writeCPIO(&base, []cpioEntry{
		{Name: "usr", Mode: cpioDir | 0o755},
		{Name: "usr/local", Mode: cpioDir | 0o755},
		{Name: "usr/local/bin", Mode: cpioDir | 0o755},
		{Name: "usr/local/bin/agentic-agent", Mode: cpioFile | 0o755, Data: []byte("old agent")},
		{Name: "init", Mode: cpioFile | 0o755, Data: []byte("#!/bin/sh\n")},
	}); err != nil {
		t.Fatal(err)
	}
	base.WriteString("\x00\x00")
	baseFile := filepath.Join(dir, "base.img")
	if err := os.WriteFile(baseFile, base.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(dir, "agent")
	if err := os.WriteFile(agent, []byte("new agent!"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "initrd.img")
	if err := writeInitrd(out, baseFile, map[string]string{"AGENT_ID": "a1", "AGENT_SECRET": "s3"}, agent); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("initrd mode: %v %v", st, err)
	}
	b, _ := os.ReadFile(out)
	if !bytes.HasPrefix(b, base.Bytes()) {
		t.Error("the base initrd is not the prefix")
	}
	m := readCPIOs(t, b)
	if got := m["etc/agentic-sandbox/agent.env"]; got.mode != cpioFile|0o600 || !bytes.Contains(got.data, []byte("\nAGENT_ID=a1\nAGENT_SECRET=s3\n")) {
		t.Errorf("agent.env: %o %q", got.mode, got.data)
	}
	if got := m["usr/local/bin/agentic-agent"]; string(got.data) != "new agent!" || got.mode != cpioFile|0o755 {
		t.Errorf("agent: %o %q, want the new one", got.mode, got.data)
	}
	if string(m["init"].data) != "#!/bin/sh\n" {
		t.Errorf("init: %q", m["init"].data)
	}
	// It never overwrites; a failure leaves no partial file.
	if err := writeInitrd(out, baseFile, nil, ""); err == nil {
		t.Error("writeInitrd replaced an existing file")
	}
	if err := writeInitrd(filepath.Join(dir, "x.img"), filepath.Join(dir, "missing"), nil, ""); err == nil {
		t.Error("writeInitrd without a base succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "x.img")); !os.IsNotExist(err) {
		t.Errorf("a failed writeInitrd left its file: %v", err)
	}
}

func TestFormatEnv(t *testing.T) {
	got := formatEnv(map[string]string{"B": "plain-value_1.2:3@x+y=z,/", "A": "", "C": "a b\"c\\d$e\nf\tg"})
	want := "# written by the libvirt runtime of agentic-sandbox\n" +
		"A=\"\"\n" +
		"B=plain-value_1.2:3@x+y=z,/\n" +
		"C=\"a b\\\"c\\\\d\\$e\\nf\\tg\"\n"
	if got != want {
		t.Errorf("formatEnv:\n%s\nwant:\n%s", got, want)
	}
}

func TestImageFiles(t *testing.T) {
	dir := t.TempDir()
	if k, i := imageFiles(dir); k != filepath.Join(dir, "vmlinuz") || i != filepath.Join(dir, "initrd.img") {
		t.Errorf("without vmlinux: %s %s", k, i)
	}
	if err := os.WriteFile(filepath.Join(dir, "vmlinux"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if k, _ := imageFiles(dir); k != filepath.Join(dir, "vmlinux") {
		t.Errorf("with vmlinux: %s", k)
	}
}

func TestImageHasAgent(t *testing.T) {
	dir := t.TempDir()
	initrd, rec, agent := filepath.Join(dir, "initrd.img"), filepath.Join(dir, "agent.sha256"), filepath.Join(dir, "agent")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(initrd, "archive")
	write(agent, "hello\n")
	var sums fileSums
	if sums.imageHasAgent(initrd, agent) {
		t.Error("no record, yet the image has the agent")
	}
	// sha256 of "hello\n", as sha256sum writes it.
	write(rec, "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03\n")
	if !sums.imageHasAgent(initrd, agent) {
		t.Error("the recorded agent is not recognised")
	}
	write(agent, "another\n") // (a size of its own: the cache keys on size and mtime)
	if sums.imageHasAgent(initrd, agent) {
		t.Error("another agent binary matched the record")
	}
	write(agent, "hello\n")
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(rec, old, old); err != nil {
		t.Fatal(err)
	}
	if sums.imageHasAgent(initrd, agent) {
		t.Error("a record older than the initrd was trusted")
	}
}
