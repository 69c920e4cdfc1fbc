package e2e

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

// plainOutput is one plain read of a session's output.
type plainOutput struct {
	body             string
	start, end, lost uint64
	gap              bool
	reason           string
}

func readLogAt(t *testing.T, s *harness.Server, id string, from uint64) plainOutput {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.RESTURL+"/api/v1/sessions/"+id+"/output?from="+strconv.FormatUint(from, 10), nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("reading output from %d: %d %s %v", from, resp.StatusCode, b, err)
	}
	u := func(h string) uint64 {
		n, err := strconv.ParseUint(resp.Header.Get(h), 10, 64)
		if err != nil {
			t.Fatalf("header %s: %q", h, resp.Header.Get(h))
		}
		return n
	}
	return plainOutput{body: string(b), start: u("X-Output-Start"), end: u("X-Output-End"), lost: u("X-Output-Lost"),
		gap: resp.Header.Get("X-Output-Gap") == "true", reason: resp.Header.Get("X-Output-Gap-Reason")}
}

// untilLogAt reads from `from` until cond holds, for patience.
func untilLogAt(t *testing.T, s *harness.Server, id string, from uint64, what string, cond func(plainOutput) bool) plainOutput {
	t.Helper()
	for deadline := time.Now().Add(patience); ; time.Sleep(100 * time.Millisecond) {
		o := readLogAt(t, s, id, from)
		if cond(o) {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s; last read from %d: %+v", what, from, o)
		}
	}
}

// sseGapFrame reads the session's SSE stream from 0 up to its first gap
// frame and returns that frame's data.
func sseGapFrame(t *testing.T, s *harness.Server, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.RESTURL+"/api/v1/sessions/"+id+"/output?from=0", nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "gap":
			return strings.TrimPrefix(line, "data: ")
		case line == "":
			event = ""
		}
	}
	t.Fatalf("the SSE stream ended without a gap frame: %v", sc.Err())
	return ""
}

// Session output on a full disk (the session log dir on a tiny tmpfs):
// what cannot be stored is a gap, with its reason and count in the output
// endpoint's headers and in a gap frame of the live stream, shown in the
// dashboard's log view; the server logs the episode once, and storing
// resumes once there is room again.
func TestSessionOutputOnAFullDisk(t *testing.T) {
	testreq.Root(t, "mounting a small tmpfs")
	dataDir := t.TempDir()
	logs := filepath.Join(dataDir, "sessions")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", logs).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v %s", err, out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(logs, syscall.MNT_DETACH) }) // after the server's own cleanup
	s := startServer(t, 1, dataDir)

	gates := t.TempDir()
	burst, resume := filepath.Join(gates, "burst"), filepath.Join(gates, "resume")
	const lostBytes = 300_000
	bg := restapi.SessionBackground
	sess := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &bg, Name: ptr("fills"), Command: "sh", Args: ptr([]string{"-c",
		"echo BEFORE; while [ ! -e " + burst + " ]; do sleep 0.1; done; head -c " + strconv.Itoa(lostBytes) + " /dev/zero | tr '\\0' x; " +
			"while [ ! -e " + resume + " ]; do sleep 0.1; done; echo AFTER; sleep 600"})})
	id := sess.SessionId
	untilLogAt(t, s, id, 0, "BEFORE", func(o plainOutput) bool { return o.body == "BEFORE\r\n" })

	// Fill the tmpfs to the last byte, then make the session print.
	filler := filepath.Join(logs, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for buf := make([]byte, 4096); ; {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
	}
	f.Close()
	touch(t, burst)

	// What fit in the log's last page is stored; a read from there meets
	// the hole: a gap up to the end, not_stored, and the count.
	stored := readLogAt(t, s, id, 0).end
	full := untilLogAt(t, s, id, stored, "the burst to take its offsets", func(o plainOutput) bool { return o.start >= 8+lostBytes })
	if !full.gap || full.reason != "not_stored" || full.body != "" || full.start != 8+lostBytes || stored > 8+4096 {
		t.Fatalf("read from %d on the full disk: %+v", stored, full)
	}
	if full.lost != 8+lostBytes-stored {
		t.Fatalf("X-Output-Lost %d, want %d (bytes %d to %d)", full.lost, 8+lostBytes-stored, stored, 8+lostBytes)
	}
	if g := sseGapFrame(t, s, id); g != `{"from":`+strconv.FormatUint(stored, 10)+`,"to":`+strconv.Itoa(8+lostBytes)+`,"reason":"not_stored","lost":`+strconv.FormatUint(full.lost, 10)+`}` {
		t.Fatalf("SSE gap frame %s", g)
	}

	// Room again: what the session prints next is stored, after the gap.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	touch(t, resume)
	after := untilLogAt(t, s, id, stored, "AFTER, stored again", func(o plainOutput) bool { return o.body != "" })
	if after.body != "AFTER\r\n" || !after.gap || after.reason != "not_stored" || after.start != 8+lostBytes || after.lost != full.lost {
		t.Fatalf("read across the gap with room again: %+v", after)
	}
	if before := readLogAt(t, s, id, 0); before.body != "BEFORE\r\n"+strings.Repeat("x", int(stored)-8) || before.gap {
		t.Fatalf("the bytes stored before the disk filled: %+v", before)
	}

	// One log line when the episode began, one when storing resumed.
	log := s.Log()
	if n, m := strings.Count(log, "session output cannot be stored"), strings.Count(log, "session output stored again"); n != 1 || m != 1 {
		t.Fatalf("%d lines for the episode's start, %d for its end, want 1 and 1:\n%s", n, m, log)
	}

	// The dashboard's log view marks the place.
	b := newBrowser(t)
	p := b.newPage()
	signInAs(p, s.RESTURL+"/", s.Token, "")
	p.do("the session's log", chromedp.Navigate(s.RESTURL+"/#/log/"+id), chromedp.WaitVisible(testid("output-gap")))
	p.waitJS("the log around the gap", `document.querySelector('[data-testid="session-log"]').textContent.includes("AFTER")`)
	marker := p.eval(`document.querySelector('[data-testid="output-gap"]').textContent`)
	if !strings.Contains(marker, strconv.FormatUint(full.lost, 10)+" bytes not stored") {
		t.Fatalf("gap marker %q", marker)
	}
	if lost := p.eval(`document.querySelector('[data-testid="output-lost"]').textContent`); !strings.Contains(lost, strconv.FormatUint(full.lost, 10)) {
		t.Fatalf("lost notice %q", lost)
	}
	p.shot("session-log-gap")
}
