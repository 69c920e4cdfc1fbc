package procexec

import (
	"bytes"
	"os"
	"strconv"
	"testing"
	"time"
)

func threadsNow(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("Threads:")); ok {
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads: in /proc/self/status")
	return 0
}

// TestWaitingCommandsHoldNoThreads: a running command's reaper waits in the
// runtime poller, not in a blocking waitid that holds an OS thread (and
// keeps the runtime handing Ps between threads). Not parallel: it counts
// this process's threads. The runtime keeps the threads it once made and
// reuses idle ones, so it starts more commands than there are threads.
func TestWaitingCommandsHoldNoThreads(t *testing.T) {
	before := threadsNow(t)
	n := before + 40
	procs := make([]*Process, 0, n)
	for range n {
		p, _ := start(t, Spec{Command: "sleep", Args: []string{"60"}})
		procs = append(procs, p)
	}
	// Each reaper has had the time to block, had it blocked in a syscall.
	most := 0
	for range 20 {
		most = max(most, threadsNow(t))
		time.Sleep(10 * time.Millisecond)
	}
	for _, p := range procs {
		p.Kill()
	}
	for _, p := range procs {
		<-p.Done()
		if r := p.Wait(); r.Signal != 15 {
			t.Fatalf("a killed sleep: %+v", r)
		}
	}
	if most >= before+n/2 {
		t.Fatalf("%d commands waiting: up to %d threads (%d before)", n, most, before)
	}
	t.Logf("%d commands waiting: up to %d threads (%d before)", n, most, before)
}

// TestALongCommandIsNotTakenForAMissedExit: a command that outlives
// several of awaitExit's rechecks ends with its own status, and the
// rechecks do not take it for an exit the poller missed.
func TestALongCommandIsNotTakenForAMissedExit(t *testing.T) {
	recheck := pidfdRecheck.Load()
	t.Cleanup(func() { pidfdRecheck.Store(recheck) })
	pidfdRecheck.Store(int64(20 * time.Millisecond))
	r, _ := run(t, Spec{Command: "sh", Args: []string{"-c", "sleep 0.3; exit 7"}})
	if r.ExitCode != 7 {
		t.Fatalf("result %+v, want exit 7", r)
	}
	if pidfdPollBroken.Load() {
		t.Fatal("a child still running was taken for an exit the poller missed")
	}
}
