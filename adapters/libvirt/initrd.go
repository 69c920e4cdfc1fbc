package libvirt

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// cpioEntry is one member of a newc cpio archive.
type cpioEntry struct {
	Name string // relative, no leading slash
	Mode uint32 // type and permission bits (cpioDir, cpioFile | perm)
	// Data is the content of a regular file; Path, when set, is a host file
	// copied instead.
	Data []byte
	Path string
}

const (
	cpioDir  = 0o040000
	cpioFile = 0o100000
)

// writeCPIO writes entries as an uncompressed newc archive ("070701"), the
// format the kernel unpacks into the initramfs.
func writeCPIO(w io.Writer, entries []cpioEntry) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	var off int64
	write := func(b []byte) error {
		n, err := bw.Write(b)
		off += int64(n)
		return err
	}
	pad := func() error {
		if r := off % 4; r != 0 {
			return write(make([]byte, 4-r))
		}
		return nil
	}
	header := func(ino int, name string, mode uint32, nlink int, size int64) error {
		h := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
		if err := write([]byte(h + name + "\x00")); err != nil {
			return err
		}
		return pad()
	}
	for i, e := range entries {
		if e.Mode&cpioDir != 0 {
			if err := header(i+1, e.Name, e.Mode, 2, 0); err != nil {
				return err
			}
			continue
		}
		if e.Path == "" {
			if err := header(i+1, e.Name, e.Mode, 1, int64(len(e.Data))); err != nil {
				return err
			}
			if err := write(e.Data); err != nil {
				return err
			}
		} else {
			f, err := os.Open(e.Path)
			if err != nil {
				return err
			}
			st, err := f.Stat()
			if err != nil {
				f.Close()
				return err
			}
			if err := header(i+1, e.Name, e.Mode, 1, st.Size()); err != nil {
				f.Close()
				return err
			}
			n, err := io.Copy(bw, f)
			off += n
			f.Close()
			if err != nil {
				return err
			}
			if n != st.Size() {
				return fmt.Errorf("%s changed while being copied", e.Path)
			}
		}
		if err := pad(); err != nil {
			return err
		}
	}
	if err := header(len(entries)+1, "TRAILER!!!", 0, 1, 0); err != nil {
		return err
	}
	return bw.Flush()
}

// writeInitrd writes the per-domain initrd at path: the image's base initrd,
// zero padding to a 4-byte boundary, then an uncompressed archive with the
// agent's env file (and, when agentBinary is set, the server's agent, which
// replaces the image's copy). Linux unpacks concatenated archives in order,
// a later file replacing an earlier one. Uncompressed, because gunzip under
// TCG costs more boot time than the host saves in bytes.
func writeInitrd(path, base string, env map[string]string, agentBinary string) (err error) {
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	in, err := os.Open(base)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, in)
	in.Close()
	if err != nil {
		return err
	}
	if r := n % 4; r != 0 {
		if _, err := out.Write(make([]byte, 4-r)); err != nil {
			return err
		}
	}
	entries := []cpioEntry{
		{Name: "etc", Mode: cpioDir | 0o755},
		{Name: "etc/agentic-sandbox", Mode: cpioDir | 0o755},
		{Name: "etc/agentic-sandbox/agent.env", Mode: cpioFile | 0o600, Data: []byte(formatEnv(env))},
	}
	if agentBinary != "" {
		entries = append(entries,
			cpioEntry{Name: "usr", Mode: cpioDir | 0o755},
			cpioEntry{Name: "usr/local", Mode: cpioDir | 0o755},
			cpioEntry{Name: "usr/local/bin", Mode: cpioDir | 0o755},
			cpioEntry{Name: "usr/local/bin/agentic-agent", Mode: cpioFile | 0o755, Path: agentBinary})
	}
	if err := writeCPIO(out, entries); err != nil {
		return err
	}
	return out.Sync()
}

// formatEnv renders an agent.env (see adapters/envfile), sorted by key.
func formatEnv(env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# written by the libvirt runtime of agentic-sandbox\n")
	for _, k := range keys {
		b.WriteString(k + "=" + quoteEnv(env[k]) + "\n")
	}
	return b.String()
}

func quoteEnv(v string) string {
	plain := v != ""
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_./:@+=,-", c)) {
			plain = false
			break
		}
	}
	if plain {
		return v
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`, "\n", `\n`, "\r", `\r`, "\t", `\t`)
	return `"` + r.Replace(v) + `"`
}

// fileSums caches the sha256 of files by path, size and modification time.
type fileSums struct {
	mu sync.Mutex
	m  map[string]fileSum
}

type fileSum struct {
	size int64
	mod  time.Time
	sum  string
}

func (c *fileSums) sum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	e, ok := c.m[path]
	c.mu.Unlock()
	if ok && e.size == st.Size() && e.mod.Equal(st.ModTime()) {
		return e.sum, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	e = fileSum{size: st.Size(), mod: st.ModTime(), sum: hex.EncodeToString(h.Sum(nil))}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]fileSum{}
	}
	c.m[path] = e
	c.mu.Unlock()
	return e.sum, nil
}

// imageHasAgent reports whether the image's initrd already holds this agent
// binary: build-vm-image.sh records its sha256 in agent.sha256 next to
// initrd.img. A domain's initrd then carries no second copy, which the guest
// kernel would unpack at every boot (13 MB, a second under TCG). A record
// older than the initrd is not trusted: the initrd was replaced since.
func (c *fileSums) imageHasAgent(initrd, binary string) bool {
	rec := filepath.Join(filepath.Dir(initrd), "agent.sha256")
	rst, err := os.Stat(rec)
	if err != nil {
		return false
	}
	ist, err := os.Stat(initrd)
	if err != nil || ist.ModTime().After(rst.ModTime()) {
		return false
	}
	want, err := os.ReadFile(rec)
	if err != nil {
		return false
	}
	got, err := c.sum(binary)
	return err == nil && strings.TrimSpace(string(want)) == got
}
