// Command benchrun is `make bench`: it starts the real agentic-mgmt with a
// host agent and measures, in one run, the exec round trip through the stack
// beside the floors it should be compared with (a bare fork/exec, ssh to
// localhost) and output throughput beside a local cat.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

func main() {
	binDir := flag.String("bin", "bin", "directory with the built binaries")
	n := flag.Int("n", 1000, "round trips per measurement")
	sshN := flag.Int("ssh-n", 100, "ssh round trips (each is slow)")
	sustained := flag.Int("sustained", 2000, "missions in the sustained-rate run")
	flag.StringVar(&only, "only", "", "run one part only: exec, missions, env, k8s, term, files, tasks, dashboard, egress, preview, inject, execstream, sleep or agents; or paths: exec and the parts of issue 33's byte paths (term, files, egress), for their table")
	beforeDir := flag.String("before", "", "directory with the binaries of an earlier build: compare its REST exec round trip with -bin's, interleaved, and nothing else")
	rounds := flag.Int("rounds", 40, "with -before: alternating rounds")
	batch := flag.Int("batch", 100, "with -before: calls of each build per round")
	flag.Parse()
	if *beforeDir != "" {
		if err := compareExec(binaries(*binDir), binaries(*beforeDir), *rounds, *batch); err != nil {
			fmt.Fprintln(os.Stderr, "benchrun:", err)
			os.Exit(1)
		}
		return
	}
	err := run(*binDir, *n, *sshN, *sustained)
	printBytePaths()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchrun:", err)
		os.Exit(1)
	}
}

type stats struct {
	name          string
	n             int
	p50, p99, avg time.Duration
}

func measure(name string, n int, f func() error) (stats, error) {
	d := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := f(); err != nil {
			return stats{}, fmt.Errorf("%s: %w", name, err)
		}
		d = append(d, time.Since(start))
	}
	sortDurations(d)
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return stats{name: name, n: n, p50: d[n/2], p99: d[(n*99)/100], avg: sum / time.Duration(n)}, nil
}

var only string

var mibN = flag.Int("mib-n", 50, "1 MiB output calls of each form in the exec part")

var execHops = flag.Bool("exec-hops", false, "time each hop of the REST exec `true` round trip (AGENTIC_HOP_TRACE in agentic-mgmt and the agent) and print the per-hop table")

func run(binDir string, n, sshN, sustained int) error {
	abs, err := filepath.Abs(binDir)
	if err != nil {
		return err
	}
	bins := harness.Binaries{Mgmt: filepath.Join(abs, "agentic-mgmt"), Agent: filepath.Join(abs, "agentic-agent"), Ctl: filepath.Join(abs, "agenticctl")}
	// The parts after the exec one, in the order a full run takes them
	// (agents only when asked for).
	var floor stats // the bare fork/exec row, once the exec part measured it
	parts := []struct {
		name string
		run  func(harness.Binaries) error
		full bool
	}{
		{"missions", func(b harness.Binaries) error { return missionBench(b, n/2, sustained, floor) }, true},
		{"term", terminalBench, true},
		{"env", envAndKubernetesBench, true},
		{"k8s", kubernetesBench, false}, // in a full run, env's (-env-runtimes)
		{"files", filesBench, true},
		{"tasks", tasksBench, true},
		{"dashboard", dashboardBench, true},
		{"egress", egressBench, true},
		{"preview", previewBench, true},
		{"inject", injectBench, true},
		{"execstream", execStreamBench, true},
		{"sleep", sleepBench, true},
		{"agents", agentsBench, false},
	}
	for _, p := range parts {
		if p.name == only {
			return p.run(bins)
		}
	}
	var hops *hopTrace
	var env []string
	if *execHops {
		if hops, err = newExecHopTrace(); err != nil {
			return err
		}
		defer hops.remove()
		env = append(env, hops.env())
	}
	srv, stop, err := hostServer(bins, "main", env, nil)
	if err != nil {
		return err
	}
	defer stop()

	post := execPoster(srv)
	exec1 := func(body string) ([]byte, error) {
		resp, err := post(body, "")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
	restTrue := func() error { _, err := exec1(`{"command":"true"}`); return err }
	bareTrue := func() error { return exec.Command("sh", "-c", "true").Run() }
	timedTrue := restTrue
	if hops != nil {
		timedTrue = hops.trip(restTrue)
	}
	for range 50 { // warm up connections, caches and the agent
		if err := restTrue(); err != nil {
			return err
		}
		_ = bareTrue()
	}

	var rows []stats
	// Interleave so both see the same machine state.
	for _, m := range []struct {
		name string
		f    func() error
	}{
		{"bare fork/exec `sh -c true` (floor)", bareTrue},
		{"REST exec `true` via host agent", timedTrue},
	} {
		s, err := measure(m.name, n, m.f)
		if err != nil {
			return err
		}
		rows = append(rows, s)
	}
	sshNote := ""
	if sshN <= 0 {
		sshNote = "ssh baseline skipped (-ssh-n 0)"
	} else if build, stop, err := startSSHD(); err != nil {
		sshNote = "ssh baseline skipped: " + err.Error()
	} else {
		s, err := measure("`ssh localhost true` (local sshd, key auth)", sshN, sshTrue(build))
		stop()
		if err != nil {
			sshNote = "ssh baseline failed: " + err.Error()
		} else {
			rows = append(rows, s)
		}
	}

	fmt.Printf("# agentic-sandbox bench, %s, %d cores, %s\n\n", time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), runtime.Version())
	fmt.Println("| measurement | n | p50 | p99 | mean |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, r := range rows {
		fmt.Printf("| %s | %d | %s | %s | %s |\n", r.name, r.n, ms(r.p50), ms(r.p99), ms(r.avg))
	}
	floor = rows[0]
	rest := rows[1]
	fmt.Printf("\nREST exec p50 / bare fork/exec p50 = %.2fx (goal ≤ 3x)\n", float64(rest.p50)/float64(floor.p50))
	notePath("exec-true", "p50 "+ms(rest.p50), "p50 "+ms(floor.p50), float64(rest.p50)/float64(floor.p50))
	if len(rows) > 2 {
		fmt.Printf("REST exec p50 / ssh p50 = %.3f (goal < 0.1)\n", float64(rest.p50)/float64(rows[2].p50))
	}
	if sshNote != "" {
		fmt.Println(sshNote)
	}
	hops.print()
	if err := throughput(exec1, post, hops); err != nil {
		return err
	}
	if only == "exec" {
		return nil
	}
	srv.Kill()
	for _, p := range parts {
		if !p.full || (only == "paths" && !slices.Contains(byteParts, p.name)) {
			continue
		}
		if err := p.run(bins); err != nil {
			return err
		}
	}
	return nil
}

// throughput sends 1 MiB of text through the stack and compares with cat,
// interleaved call by call: the JSON answer (received, and its decoding
// timed apart) and the raw multipart/mixed stream (received and parsed to
// the bytes), the best form a client can ask for, which the byte paths'
// row takes.
func throughput(exec1 func(string) ([]byte, error), post func(body, accept string) (*http.Response, error), hops *hopTrace) error {
	const size = 1 << 20
	raw := make([]byte, size*3/4)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	text := []byte(base64.StdEncoding.EncodeToString(raw))[:size]
	f, err := os.CreateTemp("", "agentic-bench-1mib-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(text); err != nil {
		return err
	}
	f.Close()
	body := fmt.Sprintf(`{"command":"cat","args":[%q]}`, f.Name())
	reps, warm := *mibN, 5
	check := func(b []byte) error {
		var r struct {
			Stdout string `json:"stdout"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return err
		}
		if !bytes.Equal([]byte(r.Stdout), text) {
			return fmt.Errorf("output differs: %d bytes", len(r.Stdout))
		}
		return nil
	}
	var last []byte
	jsonTrace := hops.sub("REST exec `cat` of 1 MiB, JSON answer", exec1MiBSteps, warm)
	jsonCall := jsonTrace.trip(func() error {
		b, err := exec1(body)
		last = b
		return err
	})
	out := make([]byte, 0, 2*size)
	mpTrace := hops.sub("REST exec `cat` of 1 MiB, `Accept: multipart/mixed`", exec1MiBSteps, warm)
	mpCall := mpTrace.trip(func() error {
		resp, err := post(body, "multipart/mixed")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		stdout, code, err := readMultipartExec(resp, out[:0])
		if err != nil {
			return err
		}
		// To its end (the chunked body's last chunk), or the transport
		// would not keep the connection for the next call.
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if code != 0 || !bytes.Equal(stdout, text) {
			return fmt.Errorf("exit %d, %d bytes of output", code, len(stdout))
		}
		return nil
	})
	localCat := func() error {
		var buf bytes.Buffer
		c := exec.Command("cat", f.Name())
		c.Stdout = &buf
		if err := c.Run(); err != nil {
			return err
		}
		if buf.Len() != size {
			return fmt.Errorf("short read")
		}
		return nil
	}
	// Call by call, so that all see the same machine state.
	names := []string{"1 MiB local `cat` into a buffer (floor)", "1 MiB via REST exec `cat`, JSON answer received", "1 MiB via REST exec `cat`, `Accept: multipart/mixed`, received and parsed to the bytes"}
	calls := []func() error{localCat, jsonCall, mpCall}
	times := make([][]time.Duration, len(calls))
	for r := range reps + warm {
		for i, c := range calls {
			start := time.Now()
			if err := c(); err != nil {
				return fmt.Errorf("%s: %w", names[i], err)
			}
			if r >= warm {
				times[i] = append(times[i], time.Since(start))
			}
		}
	}
	if err := check(last); err != nil {
		return err
	}
	decode, err := measure("  + decoding the JSON answer with encoding/json (client side)", reps, func() error { return check(last) })
	if err != nil {
		return err
	}
	rows := make([]stats, len(calls))
	for i, d := range times {
		sortDurations(d)
		rows[i] = stats{name: names[i], n: len(d), p50: d[len(d)/2]}
	}
	local, viaJSON, viaMP := rows[0], rows[1], rows[2]
	fmt.Println("\n| throughput | n | p50 | MiB/s at p50 |")
	fmt.Println("| --- | --- | --- | --- |")
	for _, s := range []stats{local, viaJSON, decode, viaMP} {
		fmt.Printf("| %s | %d | %s | %.0f |\n", s.name, s.n, ms(s.p50), 1/s.p50.Seconds())
	}
	notePath("exec-1mib", fmt.Sprintf("%.0f MiB/s (p50 %s, `Accept: multipart/mixed`, received and parsed)", 1/viaMP.p50.Seconds(), ms(viaMP.p50)),
		fmt.Sprintf("%.0f MiB/s", 1/local.p50.Seconds()), float64(local.p50)/float64(viaMP.p50))
	fmt.Printf("\nREST exec 1 MiB / local cat throughput: multipart/mixed %.2fx received and parsed; JSON %.2fx received, %.2fx received and decoded (goal ≥ 0.5x)\n",
		float64(local.p50)/float64(viaMP.p50), float64(local.p50)/float64(viaJSON.p50), float64(local.p50)/float64(viaJSON.p50+decode.p50))
	jsonTrace.print()
	mpTrace.print()
	return nil
}

// readMultipartExec reads a multipart/mixed exec answer (openapi.yaml,
// execCommand) with the standard MIME reader: stdout's bytes appended to
// out, and the exit code of the end part.
func readMultipartExec(resp *http.Response, out []byte) ([]byte, int, error) {
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/mixed" {
		return nil, 0, fmt.Errorf("content type %q", resp.Header.Get("Content-Type"))
	}
	mr := multipart.NewReader(resp.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if err != nil {
			return nil, 0, fmt.Errorf("the answer ended before its end part: %w", err)
		}
		_, disp, _ := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		switch disp["name"] {
		case "end":
			var end struct {
				ExitCode *int   `json:"exit_code"`
				Code     string `json:"code"`
			}
			if err := json.NewDecoder(p).Decode(&end); err != nil {
				return nil, 0, err
			}
			if end.ExitCode == nil {
				return nil, 0, fmt.Errorf("no exit status (%s)", end.Code)
			}
			return out, *end.ExitCode, nil
		case "stdout":
			for {
				if len(out) == cap(out) {
					out = slices.Grow(out, 64<<10)
				}
				n, err := p.Read(out[len(out):cap(out)])
				out = out[:len(out)+n]
				if err == io.EOF {
					break
				}
				if err != nil {
					return nil, 0, err
				}
			}
		default:
			if _, err := io.Copy(io.Discard, p); err != nil {
				return nil, 0, err
			}
		}
	}
}

func sortDurations(d []time.Duration) { slices.Sort(d) }

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d.Microseconds())/1000) }

// hostServer runs agentic-mgmt with one host agent, host-01, in a data dir
// of its own, and waits for the agent. prepare, when set, fills the data
// dir first; stop kills it all and removes the dir.
// binaries are the three binaries in dir.
func binaries(dir string) harness.Binaries {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	return harness.Binaries{Mgmt: filepath.Join(abs, "agentic-mgmt"), Agent: filepath.Join(abs, "agentic-agent"), Ctl: filepath.Join(abs, "agenticctl")}
}

func hostServer(bins harness.Binaries, name string, env []string, prepare func(dataDir string) error) (srv *harness.Server, stop func(), err error) {
	dataDir, err := os.MkdirTemp("", "agentic-bench-"+name+"-")
	if err != nil {
		return nil, nil, err
	}
	removeDir := func() {
		harness.KillHostAgents(dataDir)
		_ = os.RemoveAll(dataDir)
	}
	if prepare != nil {
		if err := prepare(dataDir); err != nil {
			removeDir()
			return nil, nil, err
		}
	}
	srv, err = harness.Start(bins, harness.Options{HostAgents: 1, DataDir: dataDir, Env: env})
	if err != nil {
		removeDir()
		return nil, nil, err
	}
	stop = func() {
		srv.Kill()
		removeDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.WaitAgents(ctx, "host-01"); err != nil {
		stop()
		return nil, nil, err
	}
	return srv, stop, nil
}
