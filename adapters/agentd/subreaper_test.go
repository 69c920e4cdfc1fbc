package agentd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"golang.org/x/sys/unix"
)

func TestProcState(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want byte
		ok   bool
	}{
		{"1234 (sh) S 1 1234 1234 0 -1", 'S', true},
		{"1234 (sh) Z 1 1234", 'Z', true},
		{"99 (a (b) c) X 1 2", 'X', true},
		{"7 (odd) name) R 1", 'R', true},
		{"7 (no close", 0, false},
		{"7 (trunc)", 0, false},
		{"", 0, false},
	} {
		got, ok := procState(tc.stat)
		if got != tc.want || ok != tc.ok {
			t.Errorf("procState(%q) = %q, %v; want %q, %v", tc.stat, got, ok, tc.want, tc.ok)
		}
	}
	if processEnded(os.Getpid()) {
		t.Error("this process counts as ended")
	}
}

// A child that exited but was not waited for is a zombie, which kill(pid, 0)
// still finds; once reaped its /proc entry is gone. Both have ended.
func TestProcessEndedOnZombieAndReaped(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Wait() }) // reaped even when the test fails before it does
	pid := cmd.Process.Pid
	if !testkit.Within(10*time.Second, func() bool { return processEnded(pid) }) {
		t.Fatal("an exited, unreaped child does not count as ended")
	}
	if unix.Kill(pid, 0) != nil {
		t.Fatal("kill(pid, 0) fails on the zombie: this test shows nothing")
	}
	_ = cmd.Wait()
	if !processEnded(pid) {
		t.Error("a reaped child does not count as ended")
	}
}

// subreaperHelperEnv makes the test binary the non-reaping subreaper of
// TestTmuxSessionEndsUnderANonReapingSubreaper.
const subreaperHelperEnv = "AGENTD_SUBREAPER_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(subreaperHelperEnv) == "1" {
		os.Exit(runSubreaperHelper())
	}
	os.Exit(m.Run())
}

// runSubreaperHelper adopts orphans and never waits for them, like the
// harness that first showed the defect, runs a background session that
// exits 3 and prints what ended it.
func runSubreaperHelper() int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Println("prctl:", err)
		return 1
	}
	p := startTmuxLog(bgSpec("as-reaped", `echo started; sleep 0.3; exit 3`), func(ports.OutputStream, []byte) {})
	select {
	case <-p.Done():
		r := p.Wait()
		fmt.Printf("exit=%d err=%q\n", r.ExitCode, r.Error)
		return 0
	case <-time.After(20 * time.Second):
		fmt.Println("never reported its end")
		return 2
	}
}

func TestTmuxSessionEndsUnderANonReapingSubreaper(t *testing.T) {
	privateTmux(t) // sets TMUX_TMPDIR and TMPDIR, which the helper inherits
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), subreaperHelperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "exit="+strconv.Itoa(3)) {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}
