package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// noTmuxPath is a PATH with every program of the test's PATH but tmux, so
// the host agents keep no session in tmux (as in an image without it).
func noTmuxPath(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.Name() == "tmux" || e.IsDir() {
				continue
			}
			// The first in PATH wins, as a lookup would find it.
			_ = os.Symlink(filepath.Join(d, e.Name()), filepath.Join(dir, e.Name()))
		}
	}
	return dir
}

var crashTickRE = regexp.MustCompile(`tick-(\d+)\r?\n`)

// gapMark stands for a gap the log marks, in the text wholeOutput returns.
const gapMark = "\x00GAP\x00"

// wholeOutput reads a session's log from offset 0 to its end read by read;
// each gap the log marks (X-Output-Gap) is gapMark in the text.
func wholeOutput(t *testing.T, s *harness.Server, id string) string {
	t.Helper()
	var b strings.Builder
	for from := uint64(0); ; {
		o := readLogAt(t, s, id, from)
		if o.gap {
			b.WriteString(gapMark)
		}
		b.WriteString(o.body)
		if o.end == from && !o.gap {
			return b.String()
		}
		from = o.end
	}
}

// checkTicks says whether out has tick-0, tick-1, … each once, in order,
// where a jump is allowed only across a gap the log marks; it returns the
// last tick, how many lines were skipped across marked gaps, and a
// description of the first fault ("" for none).
func checkTicks(out string) (last, skipped int, fault string) {
	last = -1
	for i, part := range strings.Split(out, gapMark) {
		afterGap := i > 0
		for _, m := range crashTickRE.FindAllStringSubmatch(part, -1) {
			n, _ := strconv.Atoi(m[1])
			switch {
			case n == last+1:
			case afterGap && n > last:
				// The first line after a marked gap may jump ahead.
				skipped += n - last - 1
			default:
				return last, skipped, fmt.Sprintf("tick-%d follows tick-%d with no gap marked", n, last)
			}
			last, afterGap = n, false
		}
	}
	return last, skipped, ""
}

// Sessions not kept in tmux (the agent's own PTY, and a pipe), printing a
// numbered line every 200 ms, across repeated kill -9s of agentic-mgmt at
// different moments and restarts on the same data dir: read back from
// offset 0 afterwards, their output has every line once and in order —
// what the agent sent into a connection that died is sent again and stored
// once — and, should a line ever be lost in a window nothing can close,
// the log marks a gap there, never a silent one.
func TestSessionOutputWholeAcrossServerKills(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir, "PATH="+noTmuxPath(t), quickReconnect)
	bg := restapi.SessionBackground
	ticker := "i=0; while :; do echo tick-$i; i=$((i+1)); sleep 0.2; done"
	ids := map[string]string{
		"pty": createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &bg, Name: ptr("pty-ticker"), Command: "sh",
			Args: ptr([]string{"-c", ticker})}).SessionId,
		"pipe": createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &bg, Name: ptr("pipe-ticker"), Command: "sh",
			Pty: ptr(false), Args: ptr([]string{"-c", ticker})}).SessionId,
	}
	lastOf := func(id string) int {
		last, _, fault := checkTicks(wholeOutput(t, s, id))
		if fault != "" {
			t.Fatalf("session %s: %s:\n%q", id, fault, wholeOutput(t, s, id))
		}
		return last
	}
	waitMore := func(what string, more int) {
		for kind, id := range ids {
			want := lastOf(id) + more
			eventually(t, patience, kind+" ticker writing "+what, func() bool { return lastOf(id) >= want })
		}
	}
	waitMore("at first", 3)

	cycles := 6
	if n, err := strconv.Atoi(os.Getenv("CRASH_CYCLES")); err == nil && n > 0 {
		cycles = n
	}
	for i := range cycles {
		// A different moment each time within the 200 ms between lines.
		time.Sleep(time.Duration(i*37%200) * time.Millisecond)
		s.Kill()
		s = restart(t, s)
		waitAgents(t, s, "host-01")
		for _, id := range ids {
			waitBack(t, s, id)
		}
		waitMore(fmt.Sprintf("after kill %d", i+1), 2+i%3)
	}
	for kind, id := range ids {
		out := wholeOutput(t, s, id)
		last, skipped, fault := checkTicks(out)
		if fault != "" {
			t.Fatalf("%s session after %d kills: %s:\n%q", kind, cycles, fault, out)
		}
		gaps := strings.Count(out, gapMark)
		t.Logf("%s session: %d kill -9 cycles, tick-0…tick-%d read back, %d marked gaps, %d lines lost", kind, cycles, last, gaps, skipped)
		if gaps > 0 || skipped > 0 {
			t.Errorf("%s session: %d lines lost across %d marked gaps: the agent's output must outlive a killed server", kind, skipped, gaps)
		}
	}
}
