package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestContractMissionEvents: each lifecycle event of a mission that runs to
// its end, with its exact data: assigned, started, progress (at most one per
// 5 s, iteration counting up, summary the last line), completed (summary the
// ANSI-stripped tail, at most 2 KiB), failed with the objective's own exit
// code; AIWG_MISSION_ID is in the objective's environment.
func TestContractMissionEvents(t *testing.T) {
	t.Parallel()
	e := newContract(t, copts{agents: 1})

	accepted := map[string]reply{}
	// A line every 0.5 s for 12 s.
	accepted["m-ev-progress"] = e.dispatch("m-ev-progress", `i=1; while [ $i -le 24 ]; do echo "line $i"; i=$((i+1)); sleep 0.5; done`)
	accepted["m-ev-ok"] = e.dispatch("m-ev-ok", `echo "mission=$AIWG_MISSION_ID"; printf '\033[1;31mred\033[0m and \033[4mplain\033[0m\n'`)
	accepted["m-ev-fail"] = e.dispatch("m-ev-fail", `echo about to fail; exit 7`)
	// Killed by a signal: the shell's own exit code, 128+15.
	accepted["m-ev-signal"] = e.dispatch("m-ev-signal", `echo signalled; kill -TERM $$`)
	accepted["m-ev-big"] = e.dispatch("m-ev-big", `i=0; while [ $i -lt 100 ]; do echo "row-$i-abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"; i=$((i+1)); done`)

	// A session that cannot start (one argument beyond the kernel's 128 KiB
	// limit): assigned → failed, never started.
	nostart := e.dispatch("m-ev-nostart", ": "+strings.Repeat("a", 200<<10))

	// assigned and started, for each.
	for id, acc := range accepted {
		fs := e.events(id)
		if len(fs) == 0 {
			fs = append(fs, e.waitEvent(id, evAssigned, patience))
		}
		a := fs[0]
		if a.Event != evAssigned || a.Data["state"] != "assigned" || a.Data["estimated_start"] != acc.body["estimated_start"] {
			t.Errorf("%s: first event %s %v; dispatch answered %s", id, a.Event, a.Data, acc.raw)
		}
		s := e.waitEvent(id, evStarted, patience)
		if s.Data["state"] != "running" || s.Data["agent_runtime"] != "shell" || !nonEmptyString(s.Data["pty_session_id"]) {
			t.Errorf("%s: started %v", id, s.Data)
		}
	}

	ok := e.waitEnd("m-ev-ok", patience)
	if ok.Event != evCompleted || ok.Data["state"] != "done" || ok.Data["exit_code"] != float64(0) {
		t.Errorf("m-ev-ok ended with %s %v", ok.Event, ok.Data)
	}
	sum, _ := ok.Data["summary"].(string)
	if !strings.Contains(sum, "mission=m-ev-ok") {
		t.Errorf("AIWG_MISSION_ID not seen by the objective: summary %q", sum)
	}
	if !strings.Contains(sum, "red and plain") || strings.ContainsAny(sum, "\x1b") || strings.Contains(sum, "[1;31m") {
		t.Errorf("summary is not the ANSI-stripped output: %q", sum)
	}

	fail := e.waitEnd("m-ev-fail", patience)
	if fail.Event != evFailed || fail.Data["state"] != "failed" || fail.Data["reason"] != "non_zero_exit" ||
		fail.Data["exit_code"] != float64(7) || !nonEmptyString(fail.Data["error"]) {
		t.Errorf("m-ev-fail ended with %s %v, want failed, non_zero_exit, exit_code 7", fail.Event, fail.Data)
	}

	sig := e.waitEnd("m-ev-signal", patience)
	if sig.Event != evFailed || sig.Data["exit_code"] != float64(143) || !nonEmptyString(sig.Data["reason"]) {
		t.Errorf("m-ev-signal ended with %s %v, want failed with exit_code 143", sig.Event, sig.Data)
	}

	ns := e.waitEnd("m-ev-nostart", patience)
	if ns.Event != evFailed || ns.Data["reason"] == "non_zero_exit" || !nonEmptyString(ns.Data["error"]) {
		t.Errorf("m-ev-nostart ended with %s %v, want failed for a session that could not start", ns.Event, ns.Data)
	}
	if got := evNames(e.events("m-ev-nostart")); fmt.Sprint(got) != "[assigned failed]" {
		t.Errorf("m-ev-nostart events %v, want [assigned failed]", got)
	}
	if nostart.body["status"] != "assigned" {
		t.Errorf("m-ev-nostart dispatch: %s", nostart)
	}

	big := e.waitEnd("m-ev-big", patience)
	bs, _ := big.Data["summary"].(string)
	if big.Event != evCompleted || len(bs) > 2048 || len(bs) < 1024 ||
		!strings.HasSuffix(strings.TrimRight(bs, "\r\n "), "row-99-abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz") || strings.Contains(bs, "row-0-") {
		t.Errorf("m-ev-big: %s summary (%d bytes) is not the last 2 KiB of the output: …%q", big.Event, len(bs), clipTail(bs, 200))
	}

	end := e.waitEnd("m-ev-progress", patience)
	if end.Event != evCompleted {
		t.Fatalf("m-ev-progress ended with %s %v", end.Event, end.Data)
	}
	es, _ := end.Data["summary"].(string)
	if !strings.Contains(es, "line 1\n") && !strings.Contains(es, "line 1\r\n") || !strings.HasSuffix(strings.TrimRight(es, "\r\n "), "line 24") {
		t.Errorf("completed summary is not the tail of the output: %q", es)
	}
	progress := onlyEv(e.events("m-ev-progress"), evProgress)
	// 12 s of output, at most one progress per 5 s: 2 or 3 (one at the start, one at ~5 s, ~10 s).
	if len(progress) < 2 || len(progress) > 3 {
		t.Errorf("%d progress events over 12 s of output, want 2 or 3 (at most one per 5 s)", len(progress))
	}
	lineRE := regexp.MustCompile(`^line (\d+)$`)
	var prevTS time.Time
	prevLine := 0
	for i, p := range progress {
		if it, _ := intValue(p.Data["iteration"]); it != i+1 {
			t.Errorf("progress #%d has iteration %v", i+1, p.Data["iteration"])
		}
		if p.Data["phase"] != "execution" {
			t.Errorf("progress phase %v", p.Data["phase"])
		}
		s, _ := p.Data["summary"].(string)
		m := lineRE.FindStringSubmatch(s)
		if m == nil {
			t.Errorf("progress summary %q is not the last line of output", s)
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if n <= prevLine {
			t.Errorf("progress summary %q does not move on from line %d", s, prevLine)
		}
		prevLine = n
		ts, err := time.Parse(time.RFC3339Nano, p.TS)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && ts.Sub(prevTS) < 5*time.Second {
			t.Errorf("progress #%d only %v after the previous one (at most one per 5 s)", i+1, ts.Sub(prevTS))
		}
		prevTS = ts
	}

	// The exact sequences.
	for id, want := range map[string]string{
		"m-ev-ok":   "[assigned started (progress) completed]",
		"m-ev-fail": "[assigned started (progress) failed]",
		"m-ev-big":  "[assigned started (progress) completed]",
	} {
		got := fmt.Sprint(evNames(e.events(id)))
		if got != strings.ReplaceAll(want, "(progress) ", "progress ") && got != strings.ReplaceAll(want, "(progress) ", "") {
			t.Errorf("%s events %s, want %s", id, got, want)
		}
	}
}
