package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// previewBench (issue 29): the dev server (cmd/internal/devserver) on this
// machine, reached directly and through its preview URL (a host runtime
// environment's agent carries each connection over its link): request
// latency, a 256 MiB download, and 1,000 WebSocket connections held at
// once, each echoing. BENCH_PREVIEW_PROFILE=<file> also takes a CPU
// profile of agentic-mgmt during preview downloads.
func previewBench(bins harness.Binaries) error {
	dataDir, err := os.MkdirTemp("", "agentic-bench-preview-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	defer harness.KillHostAgents(dataDir)

	root, err := harness.ModuleRoot()
	if err != nil {
		return err
	}
	devBin := filepath.Join(dataDir, "devserver")
	build := exec.Command("go", "build", "-o", devBin, "./cmd/internal/devserver")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the dev server: %v %s", err, out)
	}
	devPort, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	dev := exec.Command(devBin, "-addr", "127.0.0.1:"+strconv.Itoa(devPort))
	if err := dev.Start(); err != nil {
		return err
	}
	defer func() { _ = dev.Process.Kill(); _ = dev.Wait() }()

	pprofPort, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	pprofAddr := "127.0.0.1:" + strconv.Itoa(pprofPort)
	srv, err := harness.Start(bins, harness.Options{DataDir: dataDir, Env: []string{"AGENTIC_RUNTIMES=host", "AGENTIC_PPROF_ADDR=" + pprofAddr}})
	if err != nil {
		return err
	}
	defer srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const env = "bench-preview"
	c := srv.Client()
	if r, err := c.CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: "host", Name: env}); err != nil || r.StatusCode() >= 300 {
		return fmt.Errorf("create: %v %s", err, r.Body)
	}
	defer func() { _, _ = c.DeleteEnvironmentWithResponse(context.Background(), env) }()
	for {
		g, err := c.GetEnvironmentWithResponse(ctx, env)
		if err == nil && g.JSON200 != nil && g.JSON200.State == "ready" {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}

	restAddr := strings.TrimPrefix(srv.RESTURL, "http://")
	_, restPort, _ := net.SplitHostPort(restAddr)
	directBase := "http://127.0.0.1:" + strconv.Itoa(devPort)
	previewHost := fmt.Sprintf("%d-%s.localhost:%s", devPort, env, restPort)
	previewBase := "http://" + previewHost
	bearer := "Bearer " + srv.Token
	// Every preview host is the REST listener (Go's resolver need not
	// resolve *.localhost).
	toREST := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", restAddr)
	}
	directClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	previewClient := &http.Client{Transport: &http.Transport{DialContext: toREST, MaxIdleConnsPerHost: 4, DisableCompression: true}}
	get := func(c *http.Client, u, auth string, body func(io.Reader) (int64, error)) (int64, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return 0, fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, b)
		}
		return body(resp.Body)
	}
	discard := func(r io.Reader) (int64, error) { return io.Copy(io.Discard, r) }
	direct := func(path string, body func(io.Reader) (int64, error)) (int64, error) {
		return get(directClient, directBase+path, "", body)
	}
	preview := func(path string, body func(io.Reader) (int64, error)) (int64, error) {
		return get(previewClient, previewBase+path, bearer, body)
	}

	// The preview answers once the agent has the environment.
	for {
		if _, err := preview("/", discard); err == nil {
			break
		} else if ctx.Err() != nil {
			return fmt.Errorf("the preview never answered: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Request latency: a small answer over a kept-alive connection,
	// direct and preview interleaved (the same machine state for both).
	const n = 1000
	small := func(f func(string, func(io.Reader) (int64, error)) (int64, error)) func() error {
		return func() error {
			got, err := f("/download?bytes=64", discard)
			if err == nil && got != 64 {
				err = fmt.Errorf("%d bytes", got)
			}
			return err
		}
	}
	for range 100 { // warm up both paths
		if err := small(direct)(); err != nil {
			return err
		}
		if err := small(preview)(); err != nil {
			return err
		}
	}
	var dl, pl []time.Duration
	for range n {
		for _, m := range []struct {
			f   func() error
			out *[]time.Duration
		}{{small(direct), &dl}, {small(preview), &pl}} {
			start := time.Now()
			if err := m.f(); err != nil {
				return err
			}
			*m.out = append(*m.out, time.Since(start))
		}
	}
	latency := []stats{summarize("direct: GET 64 bytes from the dev server", dl), summarize("preview URL: the same through agentic-mgmt and the host agent", pl)}

	// Throughput: 256 MiB, each path checked whole once against the
	// pattern, then timed (bytes discarded) three times, interleaved.
	const size = 256 << 20
	big := "/download?bytes=" + strconv.Itoa(size)
	for _, f := range []func(string, func(io.Reader) (int64, error)) (int64, error){direct, preview} {
		if got, err := f(big, checkDevPattern); err != nil || got != size {
			return fmt.Errorf("256 MiB: %d bytes, %v", got, err)
		}
	}
	procs := map[string]int{"agentic-mgmt": srv.Cmd.Process.Pid, "devserver": dev.Process.Pid, "benchrun (client)": os.Getpid()}
	if b, err := os.ReadFile(filepath.Join(dataDir, "host-envs", env, "agent.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			procs["agentic-agent"] = pid
		}
	}
	var dmb, pmb []float64
	var dcpu, pcpu map[string]time.Duration
	for range 3 {
		for _, m := range []struct {
			f   func(string, func(io.Reader) (int64, error)) (int64, error)
			out *[]float64
			cpu *map[string]time.Duration
		}{{direct, &dmb, &dcpu}, {preview, &pmb, &pcpu}} {
			before := cpuTimes(procs)
			start := time.Now()
			if got, err := m.f(big, discard); err != nil || got != size {
				return fmt.Errorf("256 MiB: %d bytes, %v", got, err)
			}
			*m.out = append(*m.out, float64(size)/(1<<20)/time.Since(start).Seconds())
			*m.cpu = cpuDelta(before, cpuTimes(procs))
		}
	}

	// A CPU profile of agentic-mgmt while preview downloads run.
	profileNote := ""
	if path := os.Getenv("BENCH_PREVIEW_PROFILE"); path != "" {
		profileNote, err = profilePreview(ctx, pprofAddr, path, procs["agentic-agent"], func() error {
			_, err := preview(big, discard)
			return err
		})
		if err != nil {
			return err
		}
	}

	// 1,000 WebSockets held at once through the preview (and directly, the
	// floor): each opened and echoed once, then every one echoes again
	// while all are open.
	wsDirect, err := holdWebSockets("ws://127.0.0.1:"+strconv.Itoa(devPort)+"/ws", nil, nil, 1000)
	if err != nil {
		return fmt.Errorf("WebSockets direct: %w", err)
	}
	wsPreview, err := holdWebSockets("ws://"+previewHost+"/ws", http.Header{"Authorization": {bearer}}, toREST, 1000)
	if err != nil {
		return fmt.Errorf("WebSockets through the preview: %w", err)
	}

	fmt.Printf("\n## Previews: the dev server through its preview URL vs directly (host runtime, issue 29)\n\n")
	fmt.Println("| request latency | n | p50 | p99 | mean |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, s := range latency {
		fmt.Printf("| %s | %d | %s | %s | %s |\n", s.name, s.n, ms(s.p50), ms(s.p99), ms(s.avg))
	}
	fmt.Printf("\npreview p50 − direct p50 = %s (goal ≤ 1 ms)\n", ms(latency[1].p50-latency[0].p50))
	med := func(v []float64) float64 { c := slices.Clone(v); slices.Sort(c); return c[len(c)/2] }
	fmt.Println("\n| 256 MiB download | MiB/s (median of 3) | runs |")
	fmt.Println("| --- | --- | --- |")
	fmt.Printf("| direct | %.0f | %s |\n", med(dmb), mbList(dmb))
	fmt.Printf("| preview URL | %.0f | %s |\n", med(pmb), mbList(pmb))
	fmt.Printf("\npreview / direct throughput = %.2fx (goal ≥ 0.5x)\n", med(pmb)/med(dmb))
	fmt.Println("\nCPU per process during the last 256 MiB download of each path (ms of CPU per MiB):")
	fmt.Println("\n| process | direct | preview URL |")
	fmt.Println("| --- | --- | --- |")
	names := make([]string, 0, len(procs))
	for name := range procs {
		names = append(names, name)
	}
	slices.Sort(names)
	perMiB := func(d time.Duration) string {
		return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000/float64(size>>20))
	}
	for _, name := range names {
		fmt.Printf("| %s | %s | %s |\n", name, perMiB(dcpu[name]), perMiB(pcpu[name]))
	}
	if profileNote != "" {
		fmt.Println("\n" + profileNote)
	}
	fmt.Println("\n| 1,000 WebSockets held at once | answered | all open after | one echo on every one, all open |")
	fmt.Println("| --- | --- | --- | --- |")
	for _, w := range []struct {
		name string
		r    wsHold
	}{{"direct", wsDirect}, {"preview URL", wsPreview}} {
		fmt.Printf("| %s | %d of %d | %s | %s |\n", w.name, w.r.answered, w.r.n, ms(w.r.open), ms(w.r.round))
	}
	return nil
}

func mbList(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strings.Join(parts, ", ")
}

func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// checkDevPattern reads r whole against the dev server's download pattern
// (the 8-byte word at offset off is off*0x9E3779B97F4A7C15, big-endian).
func checkDevPattern(r io.Reader) (int64, error) {
	buf := make([]byte, 256<<10)
	want := make([]byte, len(buf))
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			for i := 0; i < n; i += 8 {
				binary.BigEndian.PutUint64(want[i:], uint64(off+int64(i))*0x9E3779B97F4A7C15) //nolint:gosec // never negative
			}
			if !bytes.Equal(buf[:n], want[:n]) {
				return off, fmt.Errorf("the download differs from the pattern in [%d, %d)", off, off+int64(n))
			}
			off += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return off, nil
		}
		if err != nil {
			return off, err
		}
	}
}

// cpuTimes is each process's user+system CPU so far (its threads
// included, its children not).
func cpuTimes(procs map[string]int) map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, pid := range procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		// Fields after the name: state is [0], utime [11], stime [12].
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		out[name] = time.Duration(u+s) * 10 * time.Millisecond // USER_HZ = 100
	}
	return out
}

func cpuDelta(before, after map[string]time.Duration) map[string]time.Duration {
	out := map[string]time.Duration{}
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}

// profilePreview takes a 10 s CPU profile of agentic-mgmt while download
// runs again and again, writes it to path, and returns pprof's top lines;
// with perf installed, the agent's (agentPID) too, by perf record.
func profilePreview(ctx context.Context, pprofAddr, path string, agentPID int, download func() error) (string, error) {
	var perfOut []byte
	perfDone := make(chan struct{})
	if perf, err := exec.LookPath("perf"); err == nil && agentPID > 0 {
		go func() {
			defer close(perfDone)
			data := path + ".agent.perf"
			if out, err := exec.CommandContext(ctx, perf, "record", "-q", "-e", "cpu-clock", "-g", "-o", data, "-p", strconv.Itoa(agentPID), "--", "sleep", "10").CombinedOutput(); err != nil {
				perfOut = fmt.Appendf(nil, "perf record: %v %s", err, out)
				return
			}
			for _, sort := range []string{"dso", "dso,symbol"} {
				out, _ := exec.CommandContext(ctx, perf, "report", "-q", "-i", data, "--stdio", "--no-children", "--sort", sort, "-g", "none", "--percent-limit", "1").CombinedOutput()
				for line := range strings.Lines(string(out)) {
					if f := strings.Fields(line); len(f) > 0 {
						perfOut = append(perfOut, strings.Join(slices.DeleteFunc(f, func(s string) bool { return s == "-" }), " ")+"\n"...)
					}
				}
				perfOut = append(perfOut, '\n')
			}
		}()
	} else {
		close(perfDone)
	}
	var stop atomic.Bool
	done := make(chan error, 1)
	go func() {
		for !stop.Load() {
			if err := download(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+pprofAddr+"/debug/pprof/profile?seconds=10", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		stop.Store(true)
		<-done
		return "", err
	}
	prof, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	stop.Store(true)
	if derr := <-done; derr != nil {
		return "", derr
	}
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, prof, 0o644); err != nil {
		return "", err
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", path).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %v %s", err, top)
	}
	cum, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=40", path).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %v %s", err, cum)
	}
	<-perfDone
	note := "agentic-mgmt CPU profile during preview downloads (" + path + "):\n\n```\n" + string(top) + "```\n\nby cumulative time:\n\n```\n" + string(cum) + "```"
	if len(perfOut) > 0 {
		note += "\n\nagentic-agent, perf record -g during the same downloads:\n\n```\n" + string(perfOut) + "```"
	}
	return note, nil
}

type wsHold struct {
	n, answered int
	open, round time.Duration
}

// holdWebSockets opens n WebSockets to u (64 dialing at once), each echoing
// one message as it opens; then, all open, sends one more on every one at
// once and counts the echoes.
func holdWebSockets(u string, h http.Header, dial func(context.Context, string, string) (net.Conn, error), n int) (wsHold, error) {
	d := websocket.Dialer{NetDialContext: dial, HandshakeTimeout: time.Minute, ReadBufferSize: 4 << 10, WriteBufferSize: 4 << 10}
	conns := make([]*websocket.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	echo := func(c *websocket.Conn, msg string) error {
		_ = c.SetWriteDeadline(time.Now().Add(2 * time.Minute))
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		_, got, err := c.ReadMessage()
		if err == nil && string(got) != msg {
			err = fmt.Errorf("echo %q for %q", got, msg)
		}
		return err
	}
	start := time.Now()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, resp, err := d.Dial(u, h)
			if err == nil {
				conns[i] = c
				err = echo(c, "open "+strconv.Itoa(i))
			} else if resp != nil {
				err = fmt.Errorf("%w (status %d)", err, resp.StatusCode)
			}
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("connection %d: %w", i, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r := wsHold{n: n, open: time.Since(start)}
	if firstErr != nil {
		return r, firstErr
	}
	var answered atomic.Int64
	start = time.Now()
	errs := make(chan error, n)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := echo(c, "again "+strconv.Itoa(i)); err != nil {
				errs <- err
				return
			}
			answered.Add(1)
		}()
	}
	wg.Wait()
	r.round = time.Since(start)
	r.answered = int(answered.Load())
	close(errs)
	if err := <-errs; err != nil {
		return r, fmt.Errorf("%d of %d answered; first error: %w", r.answered, n, err)
	}
	return r, nil
}
