package main

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

var clientTimes = regexp.MustCompile(`STATUS 200 BYTES (\d+) READERR <nil> .* TTFB_US (\d+) ELAPSED_US (\d+)`)

// egressBench: a 256 MiB HTTPS download and a small request from inside a
// network-less Docker container through the agent's proxy and tunnel,
// beside the same client on the host going straight to loopback.
func egressBench(bins harness.Binaries) error {
	engine, err := harness.StartEngine("docker")
	if err != nil {
		fmt.Println("\n## Egress: not measured (no private dockerd:", err, ")")
		return nil
	}
	defer engine.Stop()
	dataDir, err := os.MkdirTemp("", "agentic-bench-egress-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	const size = 256 << 20
	chunk := make([]byte, 1<<20)
	site := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", strconv.Itoa(size))
			for i := 0; i < size/len(chunk); i++ {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			return
		}
		fmt.Fprint(w, "ok")
	}))
	site.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	site.StartTLS()
	defer site.Close()
	_, port, _ := net.SplitHostPort(site.Listener.Addr().String())

	srv, err := harness.Start(bins, harness.Options{DataDir: dataDir, Env: append(engine.Env, "AGENTIC_RUNTIMES=docker",
		"AGENTIC_ALLOWED_NETWORKS=none,proxy", "AGENTIC_TEST_RESOLVE=example.com=127.0.0.1")})
	if err != nil {
		return err
	}
	defer srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := srv.Client()
	proxyNet := "proxy"
	allowed := []string{"example.com:" + port, "127.0.0.1:" + port}
	if r, err := c.CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: "docker", Name: "bench-egress", Network: &proxyNet, AllowedHosts: &allowed}); err != nil || r.StatusCode() >= 300 {
		return fmt.Errorf("create: %v %s", err, r.Body)
	}
	defer func() { _, _ = c.DeleteEnvironmentWithResponse(context.Background(), "bench-egress") }()
	for {
		g, err := c.GetEnvironmentWithResponse(ctx, "bench-egress")
		if err == nil && g.JSON200 != nil && g.JSON200.State == "ready" {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		return err
	}
	client := filepath.Join(dataDir, "egressclient")
	build := exec.Command("go", "build", "-o", client, "./cmd/internal/e2e/testdata/egressclient")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the client: %v %s", err, out)
	}
	ca := filepath.Join(dataDir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: site.Certificate().Raw}), 0o644); err != nil {
		return err
	}
	for local, remote := range map[string]string{client: "/tmp/egressclient", ca: "/tmp/ca.pem"} {
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.RESTURL+"/api/v1/agents/bench-egress/files/content?path="+remote+"&mode=0755", f)
		req.Header.Set("Authorization", "Bearer "+srv.Token)
		resp, err := http.DefaultClient.Do(req)
		f.Close()
		if err != nil || resp.StatusCode >= 300 {
			return fmt.Errorf("upload %s: %v %v", remote, err, resp)
		}
		resp.Body.Close()
	}
	inside := func(url string) (string, error) {
		r, err := c.ExecCommandWithResponse(ctx, "bench-egress", restapi.ExecRequest{Command: "/tmp/egressclient", Args: &[]string{url, "/tmp/ca.pem"}})
		if err != nil || r.JSON200 == nil {
			return "", fmt.Errorf("exec: %v %s", err, r.Body)
		}
		return r.JSON200.Stdout, nil
	}
	direct := func(url string) (string, error) {
		cmd := exec.Command(client, url, ca)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.Output()
		return string(out), err
	}
	measureOne := func(run func(string) (string, error), url string) (ttfb, elapsed time.Duration, err error) {
		out, err := run(url)
		if err != nil {
			return 0, 0, err
		}
		m := clientTimes.FindStringSubmatch(out)
		if m == nil {
			return 0, 0, fmt.Errorf("client said %q", strings.TrimSpace(out))
		}
		t, _ := strconv.Atoi(m[2])
		e, _ := strconv.Atoi(m[3])
		return time.Duration(t) * time.Microsecond, time.Duration(e) * time.Microsecond, nil
	}
	type row struct {
		name  string
		ttfbs []time.Duration
		mbs   []float64
	}
	var rows []row
	for _, path := range []struct {
		name string
		run  func(string) (string, error)
		url  string
	}{
		{"direct, host → loopback", direct, "https://127.0.0.1:" + port},
		{"container → agent proxy → tunnel → server → loopback", inside, "https://example.com:" + port},
	} {
		r := row{name: path.name}
		for range 20 {
			t, _, err := measureOne(path.run, path.url+"/small")
			if err != nil {
				return err
			}
			r.ttfbs = append(r.ttfbs, t)
		}
		big := 3
		if n, err := strconv.Atoi(os.Getenv("BENCH_EGRESS_BIG")); err == nil && n > 0 {
			big = n // more, to profile the tunnel under load
		}
		for range big {
			_, e, err := measureOne(path.run, path.url+"/big")
			if err != nil {
				return err
			}
			r.mbs = append(r.mbs, float64(size)/(1<<20)/e.Seconds())
		}
		rows = append(rows, r)
	}
	// A terminal on the same agent, idle and while downloads run through
	// the tunnel: the tunnel is a stream of its own with its own window, so
	// a download must not queue the echo behind its bytes.
	deadline := time.Now().Add(2 * time.Minute)
	idleEcho, err := wsShellEcho(srv, "bench-egress", "terminal echo on the environment's agent (start_shell), idle", 200, deadline)
	if err != nil {
		return fmt.Errorf("echo, idle: %w", err)
	}
	downloads := make(chan []float64, 1)
	go func() {
		var mbs []float64
		for range 3 {
			_, e, err := measureOne(inside, "https://example.com:"+port+"/big")
			if err != nil {
				break
			}
			mbs = append(mbs, float64(size)/(1<<20)/e.Seconds())
		}
		downloads <- mbs
	}()
	time.Sleep(200 * time.Millisecond) // the first download under way
	busyEcho, err := wsShellEcho(srv, "bench-egress", "the same, while 256 MiB downloads run through the tunnel", 200, deadline)
	if err != nil {
		return fmt.Errorf("echo during downloads: %w", err)
	}
	during := <-downloads
	// The floor: the same echo while the machine is as busy with the same
	// downloads straight over loopback (no tunnel): on two cores, the
	// CPU a download takes delays an echo whatever path it takes.
	go func() {
		for range 6 {
			if _, _, err := measureOne(direct, "https://127.0.0.1:"+port+"/big"); err != nil {
				break
			}
		}
		downloads <- nil
	}()
	time.Sleep(200 * time.Millisecond)
	floorEcho, err := wsShellEcho(srv, "bench-egress", "floor: the same, while the same downloads run on the host, not through the tunnel", 200, deadline)
	if err != nil {
		return fmt.Errorf("echo during direct downloads: %w", err)
	}
	<-downloads
	fmt.Printf("\n## Egress: HTTPS through the agent link vs direct (Docker, `none` network)\n\n")
	fmt.Println("| path | small request: TTFB p50 (20) | 256 MiB download MiB/s (median of 3) |")
	fmt.Println("| --- | --- | --- |")
	med := func(v []float64) float64 { c := slices.Clone(v); slices.Sort(c); return c[len(c)/2] }
	for _, r := range rows {
		sortDurations(r.ttfbs)
		fmt.Printf("| %s | %s | %.0f |\n", r.name, ms(r.ttfbs[len(r.ttfbs)/2]), med(r.mbs))
	}
	sortDurations(rows[0].ttfbs)
	notePath("egress", fmt.Sprintf("%.0f MiB/s", med(rows[1].mbs)), fmt.Sprintf("%.0f MiB/s", med(rows[0].mbs)), med(rows[1].mbs)/med(rows[0].mbs))
	fmt.Printf("\ntunnel / direct throughput = %.2f (goal ≥ 0.6); TTFB tunnel − direct = %s (goal ≤ 2 ms)\n",
		med(rows[1].mbs)/med(rows[0].mbs), ms(rows[1].ttfbs[len(rows[1].ttfbs)/2]-rows[0].ttfbs[len(rows[0].ttfbs)/2]))
	fmt.Println("\n| terminal on the same agent | n | p50 | p99 | mean |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, s := range []stats{idleEcho, busyEcho, floorEcho} {
		fmt.Printf("| %s | %d | %s | %s | %s |\n", s.name, s.n, ms(s.p50), ms(s.p99), ms(s.avg))
	}
	if len(during) > 0 {
		fmt.Printf("\ndownloads meanwhile: %.0f MiB/s (median of %d)\n", med(during), len(during))
	}
	return nil
}
