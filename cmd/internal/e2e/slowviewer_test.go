package e2e

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// The producer prints lines "%09d\n" for 0…lines-1: 10 bytes each, so the
// content at any offset is known without a copy of the whole stream.
const (
	flowLines = 10_000_000
	flowBytes = flowLines * 10
)

// expectedAt returns the stream's bytes [off, off+n).
func expectedAt(off uint64, n int) []byte {
	out := make([]byte, 0, n+20)
	line := off / 10
	skip := int(off % 10)
	for len(out) < n+skip {
		out = fmt.Appendf(out, "%09d\n", line)
		line++
	}
	return out[skip : skip+n]
}

// checkBytes compares a frame's first and last lines with the stream: the
// offsets are checked exactly for every frame, and a byte out of place
// within a frame would shift its last line.
func checkBytes(off uint64, b []byte) bool {
	const edge = 32
	if len(b) <= 2*edge {
		return bytes.Equal(b, expectedAt(off, len(b)))
	}
	tail := uint64(len(b) - edge)
	return bytes.Equal(b[:edge], expectedAt(off, edge)) && bytes.Equal(b[tail:], expectedAt(off+tail, edge))
}

// flowProducer prints the lines a megabyte at a time, paced to about
// 10 MB/s: a viewer that keeps up with that (this test's own, under -race)
// is a fast one; the pacing keeps the test about the server, not the
// speed of the test's JSON decoding.
var flowProducer = fmt.Sprintf(`i=0; while [ $i -lt %d ]; do seq -f %%09.0f $((i*100000)) $((i*100000+99999)); i=$((i+1)); sleep 0.1; done`, flowLines/100000)

type flowFrame struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Offset    uint64 `json:"offset"`
	Data      string `json:"data"`
	Encoding  string `json:"encoding"`
	From      uint64 `json:"from"`
	To        uint64 `json:"to"`
	Role      string `json:"role"`
	Code      string `json:"code"`
	Message   string `json:"message"`
}

func dialFlow(t *testing.T, s *harness.Server) *websocket.Conn {
	t.Helper()
	port, _ := strconv.Atoi(s.AgentURL[strings.LastIndex(s.AgentURL, ":")+1:])
	h := http.Header{"Authorization": {"Bearer " + s.Token}}
	ws, _, err := websocket.DefaultDialer.Dial(fmt.Sprintf("ws://127.0.0.1:%d/ws", port+1), h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

// createFlood starts a background session named name that prints the flow
// on host-01; ws, its creator, watches it from its start (as if it had
// joined from 0: joining again would replay what came before twice).
func createFlood(t *testing.T, ws *websocket.Conn, name string) string {
	t.Helper()
	if err := ws.WriteJSON(map[string]any{"type": "create_session", "id": "c", "agent_id": "host-01", "session_type": "background",
		"pty": false, "name": name, "command": "sh", "args": []string{"-c", flowProducer}}); err != nil {
		t.Fatal(err)
	}
	for {
		var f map[string]any
		if err := ws.ReadJSON(&f); err != nil {
			t.Fatal(err)
		}
		if f["type"] == "error" {
			t.Fatalf("create: %v", f)
		}
		if f["type"] == "session_started" {
			return f["session_id"].(string)
		}
	}
}

// readStream reads one session's frames until session_exited, checking
// that every byte is the right one for its offset and that output and gap
// frames together cover the stream without overlap. It returns the bytes
// received and the bytes reported as gaps.
func readStream(t *testing.T, ws *websocket.Conn, id string, deadline time.Time) (got, gaps uint64) {
	t.Helper()
	got, gaps, next, err := readStreamFrom(t, ws, id, 0, deadline)
	if err != nil {
		t.Fatalf("viewer at offset %d: %v", next, err)
	}
	return got, gaps
}

// readStreamFrom is readStream for a viewer that joined at offset from; a
// connection that ends early is returned as err with the offset reached.
func readStreamFrom(t *testing.T, ws *websocket.Conn, id string, from uint64, deadline time.Time) (got, gaps, next uint64, err error) {
	t.Helper()
	next = from
	_ = ws.SetReadDeadline(deadline)
	for {
		var f flowFrame
		if err := ws.ReadJSON(&f); err != nil {
			return got, gaps, next, err
		}
		if f.SessionID != id && f.Type != "error" {
			continue
		}
		switch f.Type {
		case "output":
			b := []byte(f.Data)
			if f.Encoding == "base64" {
				var err error
				if b, err = base64.StdEncoding.DecodeString(f.Data); err != nil {
					t.Fatal(err)
				}
			}
			if f.Offset != next {
				t.Fatalf("output at %d, want %d: a gap or an overlap without a gap frame", f.Offset, next)
			}
			if !checkBytes(f.Offset, b) {
				t.Fatalf("wrong bytes at offset %d", f.Offset)
			}
			next += uint64(len(b))
			got += uint64(len(b))
		case "gap":
			if f.From != next || f.To <= f.From {
				t.Fatalf("gap %d-%d at offset %d", f.From, f.To, next)
			}
			gaps += f.To - f.From
			next = f.To
		case "session_exited":
			if next != flowBytes {
				t.Fatalf("session ended at offset %d for this viewer, want %d", next, flowBytes)
			}
			return got, gaps, next, nil
		case "error":
			t.Fatalf("error frame: %s %s", f.Code, f.Message)
		}
	}
}

// peakRSS is a process's peak resident memory (VmHWM).
func peakRSS(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// 100 MB through one session with a fast viewer and one that stops reading:
// the fast one gets every byte and the end while the slow one reads
// nothing (one viewer cannot hold up another or the process); the slow one
// then gets every byte the log still holds and an explicit gap for the
// rest; the server's memory stays far below the stream's size.
func TestFastAndStalledViewersOf100MB(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir, privateTmux(t)...)
	fast, slow := dialFlow(t, s), dialFlow(t, s)
	id := createFlood(t, fast, "flood")
	// The slow viewer joins from the start and then reads nothing.
	if err := slow.WriteJSON(map[string]any{"type": "join_session", "session_id": id, "role": "observer", "replay_from": 0}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	got, gaps := readStream(t, fast, id, time.Now().Add(3*time.Minute))
	elapsed := time.Since(start)
	if got != flowBytes || gaps != 0 {
		t.Fatalf("fast viewer: %d bytes and %d in gaps, want all %d", got, gaps, flowBytes)
	}
	t.Logf("fast viewer: %d MB in %v (%.0f MB/s) with a stalled viewer on the same session", flowBytes/1_000_000, elapsed.Round(time.Millisecond),
		float64(flowBytes)/1e6/elapsed.Seconds())
	if st := sessionState(t, s, id); st != "exited" {
		t.Fatalf("session %s after the fast viewer saw its end", st)
	}

	got, gaps = readStream(t, slow, id, time.Now().Add(3*time.Minute))
	if got+gaps != flowBytes || gaps == 0 {
		t.Fatalf("slow viewer: %d bytes + %d in gaps, want %d with a gap notice (the log holds 64 MiB)", got, gaps, flowBytes)
	}
	t.Logf("slow viewer: %d bytes received, %d reported as a gap", got, gaps)

	for name, pid := range map[string]int{"agentic-mgmt": s.Cmd.Process.Pid, "agentic-agent": harness.HostAgentPIDs(dataDir)["host-01"]} {
		rss := peakRSS(t, pid)
		t.Logf("%s peak RSS %d MiB", name, rss>>20)
		if rss > 160<<20 {
			t.Errorf("%s peak RSS %d MiB for a %d MB stream: memory is not bounded", name, rss>>20, flowBytes/1_000_000)
		}
	}
}

// A viewer that leaves its stream unread longer than the stall timeout is
// disconnected, visibly (its connection closes; it is not left waiting on a
// silent socket), and rejoining from the offset it reached gets the rest:
// every byte the log still holds and a gap notice for what it dropped.
func TestStalledViewerIsDisconnectedAndRejoins(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir, "AGENTIC_VIEWER_STALL_TIMEOUT=2s")
	ws := dialFlow(t, s)
	id := createFlood(t, ws, "stall")
	time.Sleep(6 * time.Second) // stalled: three times the timeout
	got, gaps, reached, err := readStreamFrom(t, ws, id, 0, time.Now().Add(time.Minute))
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("stalled viewer: read %d bytes, then %v; want its connection closed by the server", got, err)
	}
	t.Logf("stalled viewer: %d bytes (+%d in gaps) before the server closed it: %v", got, gaps, err)

	again := dialFlow(t, s)
	if err := again.WriteJSON(map[string]any{"type": "join_session", "session_id": id, "role": "observer", "replay_from": reached}); err != nil {
		t.Fatal(err)
	}
	got2, gaps2, end, err := readStreamFrom(t, again, id, reached, time.Now().Add(3*time.Minute))
	if err != nil || end != flowBytes || reached+got2+gaps2 != flowBytes {
		t.Fatalf("rejoined at %d: %d bytes + %d in gaps, ended at %d (%v); want the rest up to %d", reached, got2, gaps2, end, err, flowBytes)
	}
}
