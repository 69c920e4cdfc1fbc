package hostsup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

func TestAgentLogsAreRotated(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "agent.log")
	if err := os.WriteFile(log, make([]byte, maxAgentLog+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(log+".1", []byte("oldest"), 0o600); err != nil {
		t.Fatal(err)
	}
	rotateLog(log)
	if _, err := os.Stat(log); !os.IsNotExist(err) {
		t.Fatalf("the big log stayed: %v", err)
	}
	if fi, err := os.Stat(log + ".1"); err != nil || fi.Size() != maxAgentLog+1 {
		t.Fatalf("rotated log: %v %v", fi, err)
	}
	// A small log is left alone.
	if err := os.WriteFile(log, []byte("small"), 0o600); err != nil {
		t.Fatal(err)
	}
	rotateLog(log)
	if b, _ := os.ReadFile(log); string(b) != "small" {
		t.Fatalf("a small log was rotated: %q", b)
	}
}

// Agents make themselves non-dumpable, which makes the files under
// /proc/<pid> root's: the owner a restarted server checks before adopting an
// agent must still be the process's own.
func TestProcUIDOfANonDumpableProcess(t *testing.T) {
	testreq.Root(t, "starting a process as another user")
	testreq.File(t, "/usr/bin/perl", "perl (Debian's perl-base)", "apt-get install perl-base")
	// prctl(PR_SET_DUMPABLE, 0) is syscall 157 on x86-64.
	testreq.Need(t, runtime.GOARCH == "amd64", "x86-64 (the syscall number)", "run it on x86-64")
	cmd := exec.Command("/usr/bin/perl", "-e", "syscall(157, 4, 0, 0, 0, 0) == 0 or die; sleep 30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Non-dumpable, its /proc files turn root's (the directory procUID
	// reads excepted): wait for that, not for a time.
	testkit.Eventually(t, 15*time.Second, "the process non-dumpable", func() bool {
		var st syscall.Stat_t
		return syscall.Stat(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid), &st) == nil && st.Uid == 0
	})
	if uid, err := procUID(cmd.Process.Pid); err != nil || uid != 65534 {
		t.Fatalf("procUID = %d, %v; want 65534", uid, err)
	}
}
