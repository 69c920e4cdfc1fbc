package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// Nothing acknowledged is dropped: writers flood a command's stdin with
// 64 KiB chunks, concurrently and as fast as they can, while the process
// first reads nothing (stopped) and then reads everything. Every write is
// either answered 204 or refused (429 stdin_busy, 503); the process must
// receive exactly the accepted chunks, each once, whole, and each writer's
// in the order it wrote them.
func TestStdinFloodLosesNothingAcknowledged(t *testing.T) {
	const (
		writers   = 4
		chunkSize = 64 << 10
		perWriter = 256 // 4 × 256 × 64 KiB = 64 MiB
		// While the process is stopped, this much accepted would be input
		// the agent could not have queued for it: a server that answers 204
		// regardless is let go on here, to show what it lost.
		acceptedWhileStopped = 32 << 20
	)
	s := startServer(t, 1, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	c := s.Client()

	name := fmt.Sprintf("stdin-flood-%d.bin", time.Now().UnixNano())
	started, err := c.StartCommandWithResponse(ctx, "host-01", restapi.ExecRequest{Command: "sh",
		Args: ptr([]string{"-c", `cat > "$1"`, "sh", name})})
	if err != nil || started.JSON202 == nil {
		t.Fatalf("start: %v %s", err, started.Body)
	}
	id := started.JSON202.CommandId
	var failed atomic.Value
	signal := func(sig string) {
		if r, err := c.SignalCommandWithResponse(ctx, id, restapi.SignalRequest{Signal: sig}); err != nil || r.StatusCode() != 204 {
			failed.CompareAndSwap(nil, fmt.Sprintf("signal %s: %v %v", sig, err, r))
		}
	}
	// Stopped, the process reads nothing: the queue must fill and refuse.
	signal("STOP")
	var resumeOnce sync.Once
	resume := func() { resumeOnce.Do(func() { signal("CONT") }) }
	defer resume()

	chunk := func(w, seq int) string {
		head := fmt.Sprintf("W%02d S%06d\n", w, seq)
		fill := byte('a' + (w*7+seq)%26)
		return head + strings.Repeat(string(fill), chunkSize-len(head)-1) + "\n"
	}
	var (
		accepted, refused429, refused503 atomic.Int64
		mu                               sync.Mutex
		acceptedSeqs                     = make([][]int, writers)
		wg                               sync.WaitGroup
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; seq < perWriter; {
				data := chunk(w, seq)
				r, err := c.WriteCommandStdinWithResponse(ctx, id, restapi.StdinRequest{Data: &data})
				if err != nil {
					failed.CompareAndSwap(nil, fmt.Sprintf("writer %d: %v", w, err))
					return
				}
				switch r.StatusCode() {
				case 204:
					mu.Lock()
					acceptedSeqs[w] = append(acceptedSeqs[w], seq)
					mu.Unlock()
					if accepted.Add(int64(len(data))) >= acceptedWhileStopped {
						go resume()
					}
					seq++
				case 429, 503:
					if r.StatusCode() == 429 {
						refused429.Add(1)
						if r.HTTPResponse.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), `"stdin_busy"`) {
							failed.CompareAndSwap(nil, fmt.Sprintf("writer %d: a 429 without Retry-After or code stdin_busy: %s", w, r.Body))
							return
						}
					} else {
						refused503.Add(1)
					}
					// The queue is full until the process reads: wake it (once
					// some refusal was seen), and try again shortly.
					go resume()
					select {
					case <-ctx.Done():
						return
					case <-time.After(5 * time.Millisecond):
					}
				default:
					failed.CompareAndSwap(nil, fmt.Sprintf("writer %d: stdin answered %d: %s", w, r.StatusCode(), r.Body))
					return
				}
			}
		}()
	}
	wg.Wait()
	resume()
	if f := failed.Load(); f != nil {
		t.Fatal(f)
	}
	if r, err := c.WriteCommandStdinWithResponse(ctx, id, restapi.StdinRequest{Eof: ptr(true)}); err != nil || r.StatusCode() != 204 {
		t.Fatalf("eof: %v %s", err, r.Body)
	}
	var st restapi.CommandStatus
	for {
		r, err := c.GetCommandWithResponse(ctx, id, &restapi.GetCommandParams{WaitMs: ptr(2000)})
		if err != nil || r.JSON200 == nil {
			t.Fatalf("get: %v %s", err, r.Body)
		}
		if r.JSON200.State == restapi.CommandStateExited {
			st = *r.JSON200
			break
		}
	}
	if st.Result == nil || st.Result.ExitCode != 0 {
		t.Fatalf("the reader did not end well: %+v", st)
	}
	// What the process received, read back through the agent (the path is
	// relative to its commands' directory).
	file, err := c.ReadFileWithResponse(ctx, "host-01", &restapi.ReadFileParams{Path: name})
	if err != nil || file.StatusCode() != 200 {
		t.Fatalf("the process's input (%q): %v %v", name, err, file.Status())
	}
	got := file.Body
	if r, err := c.DeleteFileWithResponse(ctx, "host-01", &restapi.DeleteFileParams{Path: name}); err != nil || r.StatusCode() >= 300 {
		t.Logf("removing %s: %v %v", name, err, r.Status())
	}
	t.Logf("accepted %d MiB in %d chunks; refused 429 ×%d, 503 ×%d; the process received %d bytes",
		accepted.Load()>>20, accepted.Load()/chunkSize, refused429.Load(), refused503.Load(), len(got))
	if int64(len(got)) != accepted.Load() {
		t.Fatalf("the process received %d bytes, %d were acknowledged (204): %d lost", len(got), accepted.Load(), accepted.Load()-int64(len(got)))
	}
	if refused429.Load() == 0 {
		t.Fatal("a queue that nobody read never refused a write: the flood did not reach the bound")
	}
	// Each chunk whole, each accepted one exactly once, each writer's in order.
	next := make([]int, writers)
	for off := 0; off < len(got); off += chunkSize {
		part := got[off:min(off+chunkSize, len(got))]
		var w, seq int
		if _, err := fmt.Sscanf(string(part[:min(len(part), 12)]), "W%02d S%06d\n", &w, &seq); err != nil || w < 0 || w >= writers {
			t.Fatalf("at byte %d: not the start of a chunk: %q", off, part[:min(len(part), 16)])
		}
		if !bytes.Equal(part, []byte(chunk(w, seq))) {
			t.Fatalf("at byte %d: chunk W%02d S%06d is not whole", off, w, seq)
		}
		if next[w] >= len(acceptedSeqs[w]) || acceptedSeqs[w][next[w]] != seq {
			t.Fatalf("at byte %d: chunk W%02d S%06d out of order or not accepted (expected that writer's accepted chunk #%d)", off, w, seq, next[w])
		}
		next[w]++
	}
	for w := range writers {
		if next[w] != len(acceptedSeqs[w]) || len(acceptedSeqs[w]) != perWriter {
			t.Fatalf("writer %d: %d of its %d accepted chunks arrived (of %d written)", w, next[w], len(acceptedSeqs[w]), perWriter)
		}
	}
}

// Input accepted before and after a restart of agentic-mgmt reaches the
// process, all of it and in order: the restarted server's offsets start
// again at 0, and the agent, which already has input from the earlier one,
// counts them from there (a new input epoch) instead of taking them for a
// resend of what it has.
func TestStdinAcrossAServerRestart(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*patience)
	defer cancel()
	name := fmt.Sprintf("stdin-restart-%d.txt", time.Now().UnixNano())
	started, err := s.Client().StartCommandWithResponse(ctx, "host-01", restapi.ExecRequest{Command: "sh",
		Args: ptr([]string{"-c", `cat > "$1"`, "sh", name})})
	if err != nil || started.JSON202 == nil {
		t.Fatalf("start: %v %s", err, started.Body)
	}
	id := started.JSON202.CommandId
	// write retries what is refused for now (the agent not back yet).
	write := func(c *restapi.ClientWithResponses, req restapi.StdinRequest) {
		t.Helper()
		var last string
		eventually(t, patience, "stdin accepted", func() bool {
			r, err := c.WriteCommandStdinWithResponse(ctx, id, req)
			if err != nil {
				t.Fatal(err)
			}
			last = fmt.Sprintf("%d %s", r.StatusCode(), r.Body)
			switch r.StatusCode() {
			case 204:
				return true
			case 404, 409, 429, 503: // not adopted yet, agent not back, busy
				return false
			}
			t.Fatalf("stdin: %s", last)
			return false
		})
	}
	write(s.Client(), restapi.StdinRequest{Data: ptr("before the restart\n")})
	stop(t, s)
	s2 := restart(t, s)
	waitAgents(t, s2, "host-01")
	c := s2.Client()
	write(c, restapi.StdinRequest{Data: ptr("after\n")})
	write(c, restapi.StdinRequest{Data: ptr("and more\n"), Eof: ptr(true)})
	eventually(t, patience, "the reader to end", func() bool {
		r, err := c.GetCommandWithResponse(ctx, id, &restapi.GetCommandParams{WaitMs: ptr(2000)})
		if err != nil || r.JSON200 == nil {
			t.Fatalf("get: %v %s", err, r.Body)
		}
		return r.JSON200.State == restapi.CommandStateExited
	})
	file, err := c.ReadFileWithResponse(ctx, "host-01", &restapi.ReadFileParams{Path: name})
	if err != nil || file.StatusCode() != 200 {
		t.Fatalf("the process's input: %v %v", err, file.Status())
	}
	_, _ = c.DeleteFileWithResponse(ctx, "host-01", &restapi.DeleteFileParams{Path: name})
	if want := "before the restart\nafter\nand more\n"; string(file.Body) != want {
		t.Fatalf("the process received %q, want %q", file.Body, want)
	}
}
