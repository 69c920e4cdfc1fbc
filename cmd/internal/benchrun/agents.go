package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1/sandboxv1connect"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// agentsBench: N simulated agents — real Connect clients, each on its own
// connection, with real credentials (written as a provisioning tool writes
// them) and the real registration, heartbeat and metrics protocol — against
// one agentic-mgmt that also runs one real host agent. For each N
// (BENCH_AGENT_COUNTS, default 1000,5000,10000): the connect storm until all
// are registered, the server's RSS and CPU at steady state (5 s
// heartbeats), REST exec `true` on the real agent beside the bare
// fork/exec floor, and the time until the server shows them stale once
// they fall silent.
func agentsBench(bins harness.Binaries) error {
	counts := []int{0, 1000, 5000, 10000} // 0: the same server with no simulated agent
	if v := os.Getenv("BENCH_AGENT_COUNTS"); v != "" {
		counts = counts[:0]
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 {
				return fmt.Errorf("BENCH_AGENT_COUNTS %q: want counts like 1000,5000", v)
			}
			counts = append(counts, n)
		}
	}
	floor, err := measure("bare fork/exec `true`", 200, func() error { return exec.Command("true").Run() })
	if err != nil {
		return err
	}
	fmt.Printf("\n## Many agents on one server (simulated agents, 5 s heartbeats)\n\n")
	fmt.Println("| agents | connect storm: all registered | server RSS | RSS per agent | server CPU, steady state | REST exec `true` p50 (× floor) | dispatch → completed p50 | silent → all stale |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, n := range counts {
		r, err := manyAgents(bins, n)
		if err != nil {
			return fmt.Errorf("%d agents: %w", n, err)
		}
		fmt.Printf("| %d | %s | %.0f MiB | %.1f KiB | %.1f %% of a core | %s (%.1f×) | %s | %s |\n", n, r.storm.Round(time.Millisecond),
			float64(r.rss)/(1<<20), float64(r.rss-r.rssBefore)/1024/float64(max(n, 1)), r.cpu*100, ms(r.exec.p50), float64(r.exec.p50)/float64(floor.p50),
			ms(r.dispatch.p50), r.stale.Round(100*time.Millisecond))
	}
	fmt.Printf("\nbare fork/exec `true` p50: %s\n", ms(floor.p50))
	return nil
}

type manyResult struct {
	storm, stale   time.Duration
	rss, rssBefore int64
	cpu            float64 // cores
	exec, dispatch stats
}

func manyAgents(bins harness.Binaries, n int) (manyResult, error) {
	var res manyResult
	// The credentials, as a provisioning tool writes them before the
	// agents start: hashes only.
	ids := make([]string, n)
	hashes := make(map[string]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("sim-%05d", i)
		sum := sha256.Sum256([]byte("secret-of-" + ids[i]))
		hashes[ids[i]] = hex.EncodeToString(sum[:])
	}
	writeHashes := func(dataDir string) error {
		secrets := filepath.Join(dataDir, "secrets")
		if err := os.MkdirAll(secrets, 0o700); err != nil {
			return err
		}
		b, _ := json.Marshal(hashes)
		return os.WriteFile(filepath.Join(secrets, "agent-hashes.json"), b, 0o600)
	}
	fake, err := fakeaiwg.Start()
	if err != nil {
		return res, err
	}
	defer fake.Close()
	env := []string{"AIWG_SERVE_ENDPOINT=" + fake.URL()}
	if a := os.Getenv("BENCH_PPROF_ADDR"); a != "" {
		env = append(env, "AGENTIC_PPROF_ADDR="+a) // to profile the server under the fleet
	}
	srv, stop, err := hostServer(bins, "many", env, writeHashes)
	if err != nil {
		return res, err
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.Event == "executor.resync" }); err != nil {
		return res, err
	}
	pid := srv.Cmd.Process.Pid
	res.rssBefore = rssOf(pid)

	fleet := &simFleet{url: srv.AgentURL, silent: make(chan struct{})}
	defer fleet.stop()
	start := time.Now()
	if err := fleet.connect(ctx, ids); err != nil {
		return res, err
	}
	res.storm = time.Since(start)
	fmt.Fprintf(os.Stderr, "%d agents registered in %s\n", n, res.storm)

	// Steady state: a full heartbeat round to settle, then CPU over 20 s.
	time.Sleep(6 * time.Second)
	cpu0, t0 := cpuOf(pid), time.Now()
	time.Sleep(20 * time.Second)
	res.cpu = (cpuOf(pid) - cpu0) / time.Since(t0).Seconds()
	res.rss = rssOf(pid)
	if lost := fleet.lost.Load(); lost > 0 {
		return res, fmt.Errorf("%d simulated agents lost their stream: %v", lost, fleet.firstErr())
	}

	c := srv.Client()
	res.exec, err = measure("REST exec `true` on host-01", 50, func() error {
		r, err := c.ExecCommandWithResponse(ctx, "host-01", restapi.ExecRequest{Command: "true"})
		if err != nil {
			return err
		}
		if r.JSON200 == nil {
			return fmt.Errorf("exec: %d %s", r.StatusCode(), r.Body)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	// A mission to the real agent (routed by id: the simulated ones run
	// nothing), dispatch → mission.completed, with every agent a candidate.
	var seq atomic.Int64
	res.dispatch, err = measure("dispatch → mission.completed on host-01", 30, func() error {
		id := fmt.Sprintf("many-%d-%d", n, seq.Add(1))
		if err := dispatchMission(ctx, http.DefaultClient, srv, fake, map[string]any{"mission_id": id, "objective": "true",
			"executor_filter": map[string]any{"agent_id": "host-01"}}); err != nil {
			return err
		}
		_, err := fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.MissionID == id && f.Event == "mission.completed" })
		return err
	})
	if err != nil {
		return res, err
	}

	// Silence: the streams stay open, the heartbeats stop.
	close(fleet.silent)
	silentAt := time.Now()
	for {
		stale, err := countStatus(ctx, srv, "sim-", "stale")
		if err != nil {
			return res, err
		}
		if stale == n || n == 0 {
			res.stale = time.Since(silentAt)
			break
		}
		if time.Since(silentAt) > 2*time.Minute {
			return res, fmt.Errorf("%d of %d stale after 2 min", stale, n)
		}
		time.Sleep(250 * time.Millisecond)
	}
	return res, nil
}

// simFleet is the simulated agents: one HTTP/2 connection and one Connect
// stream each.
type simFleet struct {
	url     string
	silent  chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	cancels []context.CancelFunc
	clients []*http.Transport
	conns   []net.Conn
	lost    atomic.Int64
	err     error
}

func (f *simFleet) firstErr() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// connect registers every agent, at most 256 connecting at once, and
// returns when all have their registration acknowledged.
func (f *simFleet) connect(ctx context.Context, ids []string) error {
	sem := make(chan struct{}, 256)
	errs := make(chan error, len(ids))
	var acked sync.WaitGroup
	for _, id := range ids {
		sem <- struct{}{}
		acked.Add(1)
		go func() {
			defer func() { <-sem }()
			errs <- f.run(ctx, id, acked.Done)
		}()
	}
	done := make(chan struct{})
	go func() { acked.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case err := <-errs:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is one agent: register, then heartbeat every 5 s (with metrics,
// phase spread at random) and answer pings, until stopped.
func (f *simFleet) run(ctx context.Context, id string, acked func()) error {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	// The connection is kept to be closed at the end: cancelling a stream's
	// context does not always end a Receive blocked on an idle stream.
	tr := &http.Transport{Protocols: p, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
		}
		return c, err
	}}
	sctx, cancel := context.WithCancel(ctx)
	f.mu.Lock()
	f.cancels = append(f.cancels, cancel)
	f.clients = append(f.clients, tr)
	f.mu.Unlock()
	client := sandboxv1connect.NewAgentServiceClient(&http.Client{Transport: tr}, f.url, connect.WithGRPC())
	stream := client.Connect(sctx)
	stream.RequestHeader().Set("x-agent-id", id)
	stream.RequestHeader().Set("x-agent-secret", "secret-of-"+id)
	send := func(m *sandboxv1.ConnectRequest) error { return stream.Send(m) }
	if err := send(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Registration{Registration: &sandboxv1.Registration{
		AgentId: id, Hostname: id, Runtime: sandboxv1.RuntimeKind_RUNTIME_KIND_CONTAINER, AgentVersion: "sim",
		SystemInfo: &sandboxv1.SystemInfo{Os: "linux", Arch: "amd64", CpuCores: 2, MemoryBytes: 1 << 30},
	}}}); err != nil {
		_, rerr := stream.Receive()
		return fmt.Errorf("%s: register: %v (%v)", id, err, rerr)
	}
	first, err := stream.Receive()
	if err != nil || first.GetRegistrationAck() == nil {
		return fmt.Errorf("%s: no registration ack: %v %v", id, first, err)
	}
	acked()
	var sendMu sync.Mutex
	f.wg.Add(1)
	go func() { // pings
		defer f.wg.Done()
		for {
			m, err := stream.Receive()
			if err != nil {
				if sctx.Err() == nil {
					f.lose(fmt.Errorf("%s: %w", id, err))
				}
				return
			}
			if ping := m.GetPing(); ping != nil {
				sendMu.Lock()
				_ = send(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Pong{Pong: &sandboxv1.Pong{Nonce: ping.GetNonce()}}})
				sendMu.Unlock()
			}
		}
	}()
	f.wg.Add(1)
	go func() { // heartbeats
		defer f.wg.Done()
		timer := time.NewTimer(time.Duration(rand.Int64N(int64(5 * time.Second))))
		defer timer.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-f.silent:
				return
			case <-timer.C:
			}
			sendMu.Lock()
			err := send(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Heartbeat{Heartbeat: &sandboxv1.Heartbeat{
				Status: sandboxv1.AgentStatus_AGENT_STATUS_READY,
				Metrics: &sandboxv1.Metrics{CpuPercent: rand.Float64() * 100, MemoryUsedBytes: 300 << 20, MemoryTotalBytes: 1 << 30,
					DiskUsedBytes: 1 << 30, DiskTotalBytes: 10 << 30, LoadAvg_1: 0.5},
			}}})
			sendMu.Unlock()
			if err != nil && sctx.Err() == nil {
				f.lose(fmt.Errorf("%s: heartbeat: %w", id, err))
				return
			}
			timer.Reset(5 * time.Second)
		}
	}()
	return nil
}

func (f *simFleet) lose(err error) {
	f.lost.Add(1)
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}

func (f *simFleet) stop() {
	f.mu.Lock()
	for _, c := range f.cancels {
		c()
	}
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	f.mu.Lock()
	for _, tr := range f.clients {
		tr.CloseIdleConnections()
	}
	f.mu.Unlock()
}

// countStatus counts the agents with the id prefix in a status, from the
// REST list (all pages).
func countStatus(ctx context.Context, srv *harness.Server, prefix, status string) (int, error) {
	r, err := srv.Client().ListAgentsWithResponse(ctx, nil)
	if err != nil {
		return 0, err
	}
	if r.JSON200 == nil {
		return 0, fmt.Errorf("agents: %d", r.StatusCode())
	}
	n := 0
	for _, a := range r.JSON200.Agents {
		if strings.HasPrefix(a.Id, prefix) && string(a.Status) == status {
			n++
		}
	}
	return n, nil
}

// rssOf is a process's resident set, in bytes.
func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpuOf is a process's CPU time (user + system) so far, in seconds.
func cpuOf(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) start after ")".
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}
