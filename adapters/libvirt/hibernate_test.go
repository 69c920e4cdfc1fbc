package libvirt

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// hibernatedFiles lays out what Hibernate leaves in an environment's
// folder: a save (as libvirt writes one) finished with its record.
func hibernatedFiles(t *testing.T, rt *Runtime, name string) ports.Hibernation {
	t.Helper()
	if err := qemuFolder(rt.EnvDir(name)); err != nil {
		t.Fatal(err)
	}
	fakeSaveImage(t, rt.SavePath(name)+".tmp", "<domain><name>x</name></domain>", "<cookie/>", 4096, nil)
	h, err := rt.finishSave(name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A finished save is a hibernation: its size, its time, a stopped
// environment reported hibernated; the record checks the file at Wake.
func TestHibernationFiles(t *testing.T) {
	rt, _ := newTestRuntime(t)
	if c := rt.Capabilities(); c.Hibernate != ports.HibernateMemory {
		t.Errorf("capability %q, want memory", c.Hibernate)
	}
	h := hibernatedFiles(t, rt, "a1")
	st, err := os.Stat(rt.SavePath("a1"))
	if err != nil || h.Mode != ports.HibernateMemory || h.Bytes != st.Size() || time.Since(h.At) > time.Minute {
		t.Fatalf("hibernation %+v for a save of %v (%v)", h, st, err)
	}
	if _, err := os.Stat(rt.SavePath("a1") + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the save's temporary file is left: %v", err)
	}
	if got, ok := rt.saved("a1"); !ok || got != h {
		t.Errorf("saved: %+v %v, want %+v", got, ok, h)
	}
	if err := rt.checkSaved("a1"); err != nil {
		t.Errorf("a sound save: %v", err)
	}
	env := ports.Environment{Name: "a1", State: ports.EnvStopped, Detail: "saved"}
	rt.hibernated(&env)
	if env.State != ports.EnvHibernated || env.Detail != "" || env.SavedBytes != h.Bytes || !env.HibernatedAt.Equal(h.At) {
		t.Errorf("a stopped environment with a save: %+v", env)
	}
	for _, st := range []ports.EnvState{ports.EnvRunning, ports.EnvPaused} {
		env := ports.Environment{Name: "a1", State: st}
		rt.hibernated(&env)
		if env.State != st || env.SavedBytes != 0 {
			t.Errorf("a %s environment: %+v", st, env)
		}
	}
	env = ports.Environment{Name: "b1", State: ports.EnvStopped}
	rt.hibernated(&env)
	if env.State != ports.EnvStopped {
		t.Errorf("a stopped environment without a save: %+v", env)
	}
}

// A saved state that is missing, cut short, garbled or without its record
// is lost: ErrSavedStateLost, before QEMU is asked to load it.
func TestSavedStateLost(t *testing.T) {
	for why, spoil := range map[string]func(t *testing.T, rt *Runtime, save string){
		"missing": func(t *testing.T, _ *Runtime, save string) {
			if err := os.Remove(save); err != nil {
				t.Fatal(err)
			}
		},
		"truncated": func(t *testing.T, _ *Runtime, save string) {
			st, _ := os.Stat(save)
			if err := os.Truncate(save, st.Size()-100); err != nil {
				t.Fatal(err)
			}
		},
		"garbled": func(t *testing.T, _ *Runtime, save string) {
			f, err := os.OpenFile(save, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("garbage"), 20000); err != nil {
				t.Fatal(err)
			}
		},
		"not a save image": func(t *testing.T, _ *Runtime, save string) {
			f, err := os.OpenFile(save, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("X"), 0); err != nil {
				t.Fatal(err)
			}
		},
		"no record": func(t *testing.T, rt *Runtime, _ string) {
			if err := os.Remove(rt.recordPath("a1")); err != nil {
				t.Fatal(err)
			}
		},
		"garbled record": func(t *testing.T, rt *Runtime, _ string) {
			if err := os.WriteFile(rt.recordPath("a1"), []byte("{"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(why, func(t *testing.T) {
			rt, _ := newTestRuntime(t)
			hibernatedFiles(t, rt, "a1")
			spoil(t, rt, rt.SavePath("a1"))
			err := rt.checkSaved("a1")
			if !errors.Is(err, ports.ErrSavedStateLost) {
				t.Fatalf("checkSaved: %v, want ErrSavedStateLost", err)
			}
			// Wake records it: the environment is failed with the
			// reason, its corrupt save gone.
			rt.markLost("a1", err, false)
			env := ports.Environment{Name: "a1", State: ports.EnvStopped, Detail: "saved"}
			rt.hibernated(&env)
			if env.State != ports.EnvFailed || env.Detail != err.Error() || env.SavedBytes != 0 {
				t.Errorf("after a lost saved state: %+v", env)
			}
			if _, ok := rt.saved("a1"); ok {
				t.Error("the lost save is still taken for a hibernation")
			}
			rt.forgetLost("a1")
			env = ports.Environment{Name: "a1", State: ports.EnvStopped}
			rt.hibernated(&env)
			if env.State != ports.EnvStopped {
				t.Errorf("after forgetLost: %+v", env)
			}
			if entries, _ := os.ReadDir(rt.EnvDir("a1")); len(entries) != 0 {
				t.Errorf("forgetLost left %v", entries)
			}
		})
	}
}

// A restart that cut a hibernation off between libvirt's save and the
// record finishes it when the domain is shut off (the save completed),
// and leaves a running domain's alone.
func TestRecoverSave(t *testing.T) {
	rt, _ := newTestRuntime(t)
	if err := qemuFolder(rt.EnvDir("a1")); err != nil {
		t.Fatal(err)
	}
	tmp := rt.SavePath("a1") + ".tmp"
	fakeSaveImage(t, tmp, "<domain/>", "", 4096, nil)
	running := rt.recoverSave(ports.Environment{Name: "a1", State: ports.EnvRunning})
	if running.State != ports.EnvRunning {
		t.Errorf("a running domain: %+v", running)
	}
	if _, err := os.Stat(tmp); err != nil {
		t.Errorf("a running domain's save in the making was touched: %v", err)
	}
	env := rt.recoverSave(ports.Environment{Name: "a1", State: ports.EnvStopped, Detail: "saved"})
	if env.State != ports.EnvHibernated || env.SavedBytes == 0 {
		t.Errorf("a shut-off domain with a complete save: %+v", env)
	}
	if err := rt.checkSaved("a1"); err != nil {
		t.Errorf("the finished save: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(rt.EnvDir("a1"), "*.tmp")); len(m) != 0 {
		t.Errorf("left %v", m)
	}
}

// A restore waits only for the check of the save's head (libvirt's header
// and the domain XML); QEMU's stream is checked while it runs. A garbled
// head is caught by the first, a garbled stream by the second, and a
// record of an older server (no head checksum) still has its whole file
// checked.
func TestSavedStateCheckedInTwoParts(t *testing.T) {
	garble := func(t *testing.T, save string, at int64) {
		t.Helper()
		f, err := os.OpenFile(save, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte("garbage"), at); err != nil {
			t.Fatal(err)
		}
	}
	rt, _ := newTestRuntime(t)
	hibernatedFiles(t, rt, "a1")
	rec, err := rt.readRecord("a1")
	if err != nil {
		t.Fatal(err)
	}
	img, err := readSaveImageFile(rt.SavePath("a1"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.HeadBytes != img.streamFrom || rec.HeadCRC32C == 0 {
		t.Fatalf("record %+v: want the head up to QEMU's stream at %d", rec, img.streamFrom)
	}

	garble(t, rt.SavePath("a1"), 200) // in the domain XML's block
	if _, err := rt.checkHead("a1"); !errors.Is(err, ports.ErrSavedStateLost) || !strings.Contains(err.Error(), "header") {
		t.Errorf("checkHead of a garbled head: %v, want ErrSavedStateLost naming the header", err)
	}

	rt.forgetLost("a1")
	hibernatedFiles(t, rt, "a1")
	garble(t, rt.SavePath("a1"), img.streamFrom+1000) // in QEMU's stream
	rec, err = rt.checkHead("a1")
	if err != nil {
		t.Errorf("checkHead of a save garbled after its head: %v", err)
	}
	if err := rt.checkRest("a1", rec); !errors.Is(err, ports.ErrSavedStateLost) || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("checkRest of a garbled stream: %v, want ErrSavedStateLost saying corrupt", err)
	}

	// An older server's record: the head check is the magic and size.
	rt.forgetLost("a1")
	hibernatedFiles(t, rt, "a1")
	rec, _ = rt.readRecord("a1")
	rec.HeadBytes, rec.HeadCRC32C = 0, 0
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(rt.recordPath("a1"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	garble(t, rt.SavePath("a1"), 200)
	rec, err = rt.checkHead("a1")
	if err != nil {
		t.Errorf("checkHead with an older record: %v", err)
	}
	if err := rt.checkRest("a1", rec); !errors.Is(err, ports.ErrSavedStateLost) {
		t.Errorf("checkRest with an older record of a garbled save: %v, want ErrSavedStateLost", err)
	}
}

// A restore that fails on the saved state (QEMU refusing its stream,
// libvirt its header or XML, its disk or kernel gone) loses it; one that
// fails on the host (QEMU not starting for its socket or cgroup, a busy
// libvirtd, a broken connection) does not: the next Wake tries again.
func TestRestoreRefusedState(t *testing.T) {
	lverr := func(code golibvirt.ErrorNumber, msg string) error {
		return golibvirt.Error{Code: uint32(code), Message: msg}
	}
	for _, c := range []struct {
		err  error
		lost bool
	}{
		{lverr(golibvirt.ErrInternalError, "internal error: qemu unexpectedly closed the monitor: 2026-12-06T05:00:00.000000Z qemu-system-x86_64: Not a migration stream\nqemu-system-x86_64: load of migration failed: Invalid argument"), true},
		{lverr(golibvirt.ErrOperationFailed, "operation failed: job 'restore' failed: error while loading state for instance 0x0 of device 'ram'"), true},
		{lverr(golibvirt.ErrOperationFailed, "operation failed: failed to read qemu header"), true},
		{lverr(golibvirt.ErrXMLError, "XML error: expected root element <domain>"), true},
		{lverr(golibvirt.ErrSystemError, "Cannot access storage file '/var/lib/agentic/vms/a1/disk.qcow2': No such file or directory"), true},
		{lverr(golibvirt.ErrInternalError, "internal error: qemu unexpectedly closed the monitor: qemu-system-x86_64: -chardev socket,id=charchannel0,path=/x/agent.sock,server=on,wait=off: Failed to bind socket to /x/agent.sock: Address already in use"), false},
		{lverr(golibvirt.ErrSystemError, "Unable to unlink /x/agent.sock: Is a directory"), false},
		{lverr(golibvirt.ErrInternalError, "internal error: process exited while connecting to monitor"), false},
		{lverr(golibvirt.ErrSystemError, "Unable to write to '/sys/fs/cgroup/machine.slice/cpu.max': Device or resource busy"), false},
		{lverr(golibvirt.ErrOperationTimeout, "Timed out during operation: cannot acquire state change lock"), false},
		{errors.New("read unix @->/var/run/libvirt/libvirt-sock: EOF"), false},
	} {
		if got := restoreRefusedState(c.err); got != c.lost {
			t.Errorf("restoreRefusedState(%q) = %v, want %v", c.err, got, c.lost)
		}
	}
}
