package e2e

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

// A full data dir loses nothing: a mission that ends while the store cannot
// write is neither announced early nor forgotten, dispatches are refused
// with 503 store_unavailable meanwhile, and once there is room again the
// outcome is stored and reaches aiwg serve. On a small tmpfs.
func TestFullDiskLosesNoMission(t *testing.T) {
	testreq.Root(t, "mounting a small tmpfs")
	var filler string
	e := newContract(t, copts{agents: 1, prepare: func(dir string) {
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
			t.Fatalf("mount: %v %s", err, out)
		}
		t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
		filler = filepath.Join(dir, "filler")
	}})
	gate, wait := e.gate("disk-go")
	e.dispatch("m-full", wait+"; echo finished", "executor_filter", map[string]any{"agent_id": "host-01"})
	e.waitEvent("m-full", evStarted, patience)

	// Fill the data dir to the last byte.
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
	}
	f.Close()

	touch(t, gate) // the mission ends now, with nowhere to store it
	if r := e.dispatchRaw("sess-m-other", e.body("m-other", "true"), auth{}); r.status != http.StatusServiceUnavailable || r.code() != "store_unavailable" {
		t.Fatalf("a dispatch on a full disk: %s", r)
	}
	time.Sleep(2 * time.Second)
	for _, f := range e.events("m-full") {
		if isTerminal(f.Event) {
			t.Fatalf("%s announced while it could not be stored", f.Event)
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	end := e.waitEnd("m-full", patience)
	if end.Event != evCompleted {
		t.Fatalf("after room came back: %s %v", end.Event, end.Data)
	}
	if st := e.missionState("m-full"); st != "completed" {
		t.Fatalf("stored state %q", st)
	}
}
