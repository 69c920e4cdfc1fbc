package main

// Terminal benchmarks (issue 4, "Performance"): PTY throughput from a
// process on the agent to a WebSocket viewer beside a local PTY and
// `ssh -tt`, the keystroke echo round trip beside a local PTY and `ssh -tt`,
// and the memory of idle sessions and idle viewers.

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

var (
	termMiB      = flag.Int("term-mib", 32, "MiB of PTY output per terminal throughput run")
	termReps     = flag.Int("term-reps", 3, "runs per terminal throughput measurement (median reported)")
	termEchoN    = flag.Int("term-echo-n", 1000, "keystroke echo round trips")
	termSessions = flag.Int("term-sessions", 120, "idle sessions (and idle viewers) for the memory measurement; below the 128 live sessions an agent may have")
	termHops     = flag.Bool("term-hops", true, "time each hop of the WebSocket keystroke echo (AGENTIC_HOP_TRACE in agentic-mgmt and the agent) and print the per-hop table")
)

// terminalBench starts its own agentic-mgmt so the memory figures start
// from a fresh process.
func terminalBench(bins harness.Binaries) error {
	dataDir, err := os.MkdirTemp("", "agentic-bench-term-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	defer harness.KillHostAgents(dataDir)
	// The agent's tmux server of its own, to count its memory.
	tmuxDir := filepath.Join(dataDir, "tmux")
	if err := os.Mkdir(tmuxDir, 0o700); err != nil {
		return err
	}
	env := []string{"TMUX_TMPDIR=" + tmuxDir}
	var hops *hopTrace
	if *termHops {
		if hops, err = newHopTrace(); err != nil {
			return err
		}
		defer hops.remove()
		env = append(env, hops.env())
	}
	srv, err := harness.Start(bins, harness.Options{HostAgents: 1, DataDir: dataDir, Env: env})
	if err != nil {
		return err
	}
	defer srv.Kill()
	defer func() { _ = exec.Command("env", "TMUX_TMPDIR="+tmuxDir, "tmux", "kill-server").Run() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.WaitAgents(ctx, "host-01"); err != nil {
		return err
	}
	// Every step below is bounded by this deadline.
	deadline := time.Now().Add(3 * time.Minute)

	// 3. Memory, measured first so both processes start fresh, printed last.
	memReport, err := memoryBench(srv, dataDir, tmuxDir, *termSessions, deadline)
	if err != nil {
		return fmt.Errorf("memory: %w", err)
	}

	size := int64(*termMiB) << 20
	script := fmt.Sprintf(`head -c %d /dev/zero | tr '\0' a`, size)
	sshRun, sshStop, sshErr := startSSHD()
	if sshErr == nil {
		defer sshStop()
	}

	// 1. Throughput.
	type tput struct {
		name string
		mbs  []float64
		note string
	}
	rows := []*tput{
		{name: "local PTY, no network (floor)"},
		{name: "agent PTY → agentic-mgmt → WebSocket viewer (headless session, plain PTY)"},
		{name: "`ssh -tt 127.0.0.1 CMD` (local sshd)"},
		{name: "agent PTY kept in tmux → agentic-mgmt → WebSocket viewer (background session, pane log)"},
	}
	for range *termReps { // interleaved, so all see the same machine state
		mbs, err := localPTYThroughput(script, size)
		if err != nil {
			return fmt.Errorf("local PTY throughput: %w", err)
		}
		rows[0].mbs = append(rows[0].mbs, mbs)
		for i, typ := range map[int]string{1: "headless", 3: "background"} {
			mbs, total, err := wsThroughput(srv, typ, script, size, deadline)
			if err != nil {
				return fmt.Errorf("WebSocket throughput (%s): %w", typ, err)
			}
			rows[i].mbs = append(rows[i].mbs, mbs)
			rows[i].note = fmt.Sprintf("create_session → session_exited %.0f ms in the last run", total.Seconds()*1000)
		}
		if sshErr != nil {
			rows[2].note = "skipped: " + sshErr.Error()
			continue
		}
		if mbs, err := sshThroughput(sshRun, script, size, deadline); err != nil {
			rows[2].note = "failed: " + err.Error()
		} else {
			rows[2].mbs = append(rows[2].mbs, mbs)
		}
	}
	fmt.Printf("\n## Terminals\n\nPTY throughput, %d MiB of `a` (command `sh -c \"%s\"`), 200×50, %d runs each, MB/s from the first byte to the end (MB = 10^6 B):\n\n", *termMiB, script, *termReps)
	fmt.Println("| path | median MB/s | runs | note |")
	fmt.Println("| --- | --- | --- | --- |")
	med := func(x []float64) float64 {
		if len(x) == 0 {
			return 0
		}
		y := slices.Clone(x)
		slices.Sort(y)
		return y[len(y)/2]
	}
	for _, r := range rows {
		runs := make([]string, len(r.mbs))
		for i, v := range r.mbs {
			runs[i] = fmt.Sprintf("%.0f", v)
		}
		m := "—"
		if len(r.mbs) > 0 {
			m = fmt.Sprintf("%.0f", med(r.mbs))
		}
		fmt.Printf("| %s | %s | %s | %s |\n", r.name, m, strings.Join(runs, ", "), r.note)
	}
	floor, ws := med(rows[0].mbs), med(rows[1].mbs)
	fmt.Printf("\nkept in tmux / local PTY = %.2f (the price of sessions that outlive the agent)\n", med(rows[3].mbs)/floor)
	if floor > 0 && len(rows[3].mbs) > 0 {
		notePath("pty-tmux", fmt.Sprintf("%.0f MB/s", med(rows[3].mbs)), fmt.Sprintf("%.0f MB/s", floor), med(rows[3].mbs)/floor)
	}
	fmt.Printf("\nWebSocket / local PTY = %.2f (goal ≥ 0.5)\n", ws/floor)
	if s := med(rows[2].mbs); s > 0 {
		fmt.Printf("WebSocket / ssh -tt = %.2f\n", ws/s)
	}

	// 2. Keystroke echo.
	n := *termEchoN
	var echo []stats
	s, err := localPTYEcho(n)
	if err != nil {
		return fmt.Errorf("local PTY echo: %w", err)
	}
	echo = append(echo, s)
	s, err = wsEcho(srv, n, deadline, hops)
	if err != nil {
		return fmt.Errorf("WebSocket echo: %w", err)
	}
	echo = append(echo, s)
	sshEchoNote := ""
	if sshErr != nil {
		sshEchoNote = "ssh echo skipped: " + sshErr.Error()
	} else if s, err := sshEcho(sshRun, n, deadline); err != nil {
		sshEchoNote = "ssh echo failed: " + err.Error()
	} else {
		echo = append(echo, s)
	}
	fmt.Printf("\nKeystroke echo round trip (one byte in, the PTY's echo of it out; `cat` in canonical mode):\n\n")
	fmt.Println("| path | n | p50 | p99 | mean |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, r := range echo {
		fmt.Printf("| %s | %d | %s | %s | %s |\n", r.name, r.n, ms(r.p50), ms(r.p99), ms(r.avg))
	}
	fmt.Printf("\nWebSocket echo p50 %s (goal < 1 ms)\n", ms(echo[1].p50))
	if len(echo) > 2 && echo[2].p50 > 0 {
		ratio := float64(echo[1].p50) / float64(echo[2].p50)
		fmt.Printf("WebSocket echo / ssh -tt echo (p50) = %.2f× (goal ≤ 1.5×)\n", ratio)
		notePath("echo-tmux", "p50 "+ms(echo[1].p50), "p50 "+ms(echo[2].p50), ratio)
	}
	if sshEchoNote != "" {
		fmt.Println(sshEchoNote)
	}
	hops.print()

	fmt.Print(memReport)
	return nil
}

func wsThroughput(srv *harness.Server, typ, script string, size int64, deadline time.Time) (mbs float64, total time.Duration, err error) {
	c, err := dialTerm(srv)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	start := time.Now()
	id, err := c.create(typ, "sh", []string{"-c", script}, deadline)
	if err != nil {
		return 0, 0, err
	}
	var got int64
	var first time.Time
	for {
		f, err := c.next(deadline)
		if err != nil {
			return 0, 0, fmt.Errorf("after %d bytes: %w", got, err)
		}
		if f.SessionID != id {
			continue
		}
		switch f.Type {
		case "output":
			if first.IsZero() {
				first = time.Now()
			}
			if f.Offset != uint64(got) {
				return 0, 0, fmt.Errorf("output at offset %d, expected %d", f.Offset, got)
			}
			if f.Encoding != "" || strings.Trim(f.Data, "a") != "" {
				return 0, 0, fmt.Errorf("unexpected output %.40q (encoding %q)", f.Data, f.Encoding)
			}
			got += int64(len(f.Data))
		case "gap":
			return 0, 0, fmt.Errorf("gap %d..%d: the session log dropped output before the viewer read it", f.From, f.To)
		case "session_exited":
			end := time.Now()
			if got != size {
				return 0, 0, fmt.Errorf("got %d bytes, want %d (state %s)", got, size, f.State)
			}
			return float64(size) / end.Sub(first).Seconds() / 1e6, end.Sub(start), nil
		}
	}
}

func localPTYThroughput(script string, size int64) (float64, error) {
	cmd, m, err := startInPTY("sh", "-c", script)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	timer := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	got, first := readTimed(m) // ends at EIO once the last slave fd is closed
	end := time.Now()
	_ = cmd.Wait()
	if got != size {
		return 0, fmt.Errorf("got %d bytes, want %d", got, size)
	}
	return float64(size) / end.Sub(first).Seconds() / 1e6, nil
}

func sshThroughput(sshCmd func(...string) *exec.Cmd, script string, size int64, deadline time.Time) (float64, error) {
	c := sshCmd("-tt", script)
	stdin, err := c.StdinPipe() // kept open: EOF would end the remote side early
	if err != nil {
		return 0, err
	}
	defer stdin.Close()
	out, err := c.StdoutPipe()
	if err != nil {
		return 0, err
	}
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		return 0, err
	}
	timer := time.AfterFunc(time.Until(deadline), func() { _ = c.Process.Kill() })
	defer timer.Stop()
	got, first := readTimed(out)
	end := time.Now()
	_ = c.Wait()
	if got != size {
		return 0, fmt.Errorf("got %d bytes, want %d: %s", got, size, errb.String())
	}
	return float64(size) / end.Sub(first).Seconds() / 1e6, nil
}

func localPTYEcho(n int) (stats, error) {
	cmd, m, err := startInPTY("cat")
	if err != nil {
		return stats{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); m.Close() }()
	timer := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill(); m.Close() })
	defer timer.Stop()
	br := &byteReader{r: m, buf: make([]byte, 4096)}
	return echoLoop("local PTY running `cat`, no network (floor)", n,
		func(b byte) error { _, err := m.Write([]byte{b}); return err }, br.expect)
}

func wsEcho(srv *harness.Server, n int, deadline time.Time, hops *hopTrace) (stats, error) {
	c, err := dialTerm(srv)
	if err != nil {
		return stats{}, err
	}
	defer c.Close()
	id, err := c.create("interactive", "cat", nil, deadline)
	if err != nil {
		return stats{}, err
	}
	defer func() { _ = c.WriteJSON(map[string]any{"type": "kill_session", "session_id": id}) }()
	if _, err := c.waitType("role_changed", deadline); err != nil {
		return stats{}, err
	}
	input, readBack := c.echo(id, deadline)
	if hops != nil {
		input, readBack = hops.timed(input, readBack)
	}
	return echoLoop("WebSocket `input` → agent PTY `cat` in tmux → `output`", n, input, readBack)
}

func sshEcho(sshCmd func(...string) *exec.Cmd, n int, deadline time.Time) (stats, error) {
	// The remote login shell's start-up files run before cat; wait for the
	// marker so the round trips (and the kill at the end) only meet cat.
	c := sshCmd("-tt", "echo cat-ready; exec cat")
	stdin, err := c.StdinPipe()
	if err != nil {
		return stats{}, err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		return stats{}, err
	}
	if err := c.Start(); err != nil {
		return stats{}, err
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	timer := time.AfterFunc(time.Until(deadline), func() { _ = c.Process.Kill() })
	defer timer.Stop()
	br := &byteReader{r: out, buf: make([]byte, 4096)}
	for _, b := range []byte("cat-ready\r\n") {
		if err := br.expect(b); err != nil {
			return stats{}, fmt.Errorf("waiting for the remote cat: %w", err)
		}
	}
	return echoLoop("`ssh -tt 127.0.0.1 cat` (stdin → stdout)", n,
		func(b byte) error { _, err := stdin.Write([]byte{b}); return err }, br.expect)
}

func memoryBench(srv *harness.Server, dataDir, tmuxDir string, n int, deadline time.Time) (string, error) {
	var out strings.Builder
	mgmtPID := srv.Cmd.Process.Pid
	agentPID := harness.HostAgentPIDs(dataDir)["host-01"]
	if agentPID == 0 {
		return "", fmt.Errorf("no host agent pid in %s", dataDir)
	}
	// The tmux server holds each kept session's pane (grid, history);
	// it is counted with the agent's. Zero while it does not run.
	tmuxRSS := func() int64 {
		out, err := exec.Command("env", "TMUX_TMPDIR="+tmuxDir, "tmux", "display-message", "-p", "#{pid}").Output()
		if err != nil {
			return 0
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		kib, _ := rssKiB(pid)
		return kib
	}
	sample := func() ([3]int64, error) {
		time.Sleep(time.Second) // let the last frames and goroutines settle
		m, err := rssKiB(mgmtPID)
		if err != nil {
			return [3]int64{}, err
		}
		a, err := rssKiB(agentPID)
		return [3]int64{m, a, tmuxRSS()}, err
	}
	before, err := sample()
	if err != nil {
		return "", err
	}

	// n idle background sessions, created on one connection that then goes
	// away (sessions outlive it), so they carry no viewer.
	creator, err := dialTerm(srv)
	if err != nil {
		return "", err
	}
	ids := make([]string, 0, n)
	killAll := func() {
		k, err := dialTerm(srv)
		if err != nil {
			return
		}
		defer k.Close()
		for _, id := range ids {
			_ = k.WriteJSON(map[string]any{"type": "kill_session", "session_id": id})
		}
		// Each kill is answered only on error; a ping after them all comes
		// back once they have been handled.
		_ = k.WriteJSON(map[string]any{"type": "ping", "id": "done"})
		_, _ = k.waitType("pong", time.Now().Add(30*time.Second))
	}
	defer func() { killAll() }()
	createStart := time.Now()
	for range n {
		id, err := creator.create("background", "sleep", []string{"300"}, deadline)
		if err != nil {
			creator.Close()
			return "", fmt.Errorf("session %d: %w", len(ids)+1, err)
		}
		ids = append(ids, id)
	}
	createTime := time.Since(createStart)
	creator.Close()
	// Kept sessions start in tmux one after another: wait for them all.
	running := 0
	for running < n && time.Now().Before(deadline) {
		if running, err = countRunning(srv, ids, deadline); err != nil {
			return "", err
		}
		time.Sleep(100 * time.Millisecond)
	}
	allRunning := time.Since(createStart)
	withSessions, err := sample()
	if err != nil {
		return "", err
	}

	// n idle viewers, one connection each, each joined to one session.
	viewers := make([]*wsConn, 0, n)
	defer func() {
		for _, v := range viewers {
			v.Close()
		}
	}()
	for _, id := range ids {
		v, err := dialTerm(srv)
		if err != nil {
			return "", fmt.Errorf("viewer %d: %w", len(viewers)+1, err)
		}
		viewers = append(viewers, v)
		if err := v.WriteJSON(map[string]any{"type": "join_session", "session_id": id, "role": "observer"}); err != nil {
			return "", err
		}
		if _, err := v.waitType("role_changed", deadline); err != nil {
			return "", fmt.Errorf("viewer %d: %w", len(viewers), err)
		}
	}
	withViewers, err := sample()
	if err != nil {
		return "", err
	}

	// Kill the sessions; every viewer must hear of it.
	killAll()
	exited := 0
	for _, v := range viewers {
		if _, err := v.waitType("session_exited", time.Now().Add(10*time.Second)); err == nil {
			exited++
		}
	}
	ids = nil // killed

	per := func(a, b int64) string { return fmt.Sprintf("%.1f", float64(b-a)/float64(n)) }
	fmt.Fprintf(&out, "\nMemory (VmRSS), %d idle background sessions (`sleep 300`, PTY 200×50, kept in tmux, no viewer; created in %.2f s, all running after %.2f s), then %d idle viewers (one WebSocket each, joined as observer to one session):\n\n", n, createTime.Seconds(), allRunning.Seconds(), n)
	fmt.Fprintln(&out, "| process | before | + sessions | + viewers | KiB per session | KiB per viewer |")
	fmt.Fprintln(&out, "| --- | --- | --- | --- | --- | --- |")
	for i, name := range []string{"agentic-mgmt", "agentic-agent (host-01)", "the agent's tmux server"} {
		viewer := per(withSessions[i], withViewers[i])
		if i > 0 {
			viewer += " (not involved)"
		}
		fmt.Fprintf(&out, "| %s | %d KiB | %d KiB | %d KiB | %s | %s |\n", name, before[i], withSessions[i], withViewers[i],
			per(before[i], withSessions[i]), viewer)
	}
	fmt.Fprintf(&out, "\n%d of %d sessions were running when sampled; %d of %d viewers got session_exited after kill_session.\n", running, n, exited, n)
	return out.String(), nil
}

// countRunning asks list_sessions how many of ids are running.
func countRunning(srv *harness.Server, ids []string, deadline time.Time) (int, error) {
	c, err := dialTerm(srv)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if err := c.WriteJSON(map[string]any{"type": "list_sessions", "id": "l", "agent_id": "host-01"}); err != nil {
		return 0, err
	}
	f, err := c.waitType("sessions", deadline)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range f.Sessions {
		if s.State == "running" && slices.Contains(ids, s.SessionID) {
			n++
		}
	}
	return n, nil
}
