package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

var (
	k8sN     = flag.Int("k8s-n", 10, "kubernetes: environments and `kubectl run` floors (interleaved), and warm pool takes")
	k8sBurst = flag.Int("k8s-burst", 50, "kubernetes: environments created at once")
	k8sTrace = flag.Bool("k8s-trace", false, "kubernetes: print the containerd and kubelet log lines of the last timed environment and floor pod")
)

// kubernetesBench is `-only k8s`, and the kubernetes part of `-only env`
// (-env-runtimes): on the Kubernetes test cluster (harness.StartEngine, the
// run's cluster and a namespace of its own), through a real agentic-mgmt:
//
//   - create → agent ready → first output of a pod environment, interleaved
//     with its floor: `kubectl run` of the same image (the default workload
//     image) to its first log line, timed from the start of kubectl;
//   - a warm pool take → first output (pooledRows, as for the other runtimes);
//   - k8sBurst environments created at once: all ready, p50 and the last.
//
// Each timed environment's own record (its events) and the server's log
// say where the time went: the steps are printed as offsets from the request.
func kubernetesBench(bins harness.Binaries) error {
	fmt.Println("\n## kubernetes")
	t0 := time.Now()
	// The shared cluster stops with StopEngines, after the namespace (e.Stop)
	// and the server (deferred below, so first).
	defer harness.StopEngines()
	e, err := harness.StartEngine("kubernetes")
	if m := (*harness.Missing)(nil); errors.As(err, &m) {
		fmt.Println("kubernetes not measured:", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubernetes engine: %w", err)
	}
	defer e.Stop()
	engineUp := time.Since(t0)
	kubeconfig, ns, image := e.Getenv("KUBECONFIG"), e.Getenv("AGENTIC_K8S_NAMESPACE"), e.Getenv("AGENTIC_K8S_IMAGE")
	buildDir, err := harness.KubernetesBuildDir()
	if err != nil {
		return err
	}
	kubectl := filepath.Join(buildDir, "bin", "kubectl")
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 200, 400 // the floor's log polling is not to wait on client-side throttling
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		return err
	}
	fmt.Printf("engine up (cluster up, project images built and imported, namespace %s): %s\n", ns, engineUp.Round(time.Millisecond))

	dataDir, err := os.MkdirTemp("", "agentic-bench-k8s-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	srv, err := harness.Start(bins, harness.Options{DataDir: dataDir, Env: append(e.Env, "AGENTIC_RUNTIMES=kubernetes")})
	if err != nil {
		return err
	}
	defer srv.Kill()
	const rt = "kubernetes"
	floor := func(name string) (created, firstLog time.Duration, err error) {
		return kubectlRunFirstLog(cs, kubectl, kubeconfig, ns, image, name)
	}

	// One-time costs (the node's first pod of each image, the server's
	// first watch and TLS handshakes), measured apart.
	firstRun, err := provisionTraced(srv, rt+"-first")
	if err != nil {
		return err
	}
	_, floorFirst, err := floor("kubectl-run-first")
	if err != nil {
		return err
	}

	// (a) Interleaved, so both see the same machine.
	var runs []tracedRun
	var floorCreated, floorOutput []time.Duration
	var lastFloor, lastFloorEnd time.Time
	for i := range *k8sN {
		r, err := provisionTraced(srv, fmt.Sprintf("%s-%d", rt, i))
		if err != nil {
			return err
		}
		runs = append(runs, r)
		lastFloor = time.Now()
		c, f, err := floor(fmt.Sprintf("kubectl-run-%d", i))
		if err != nil {
			return err
		}
		lastFloorEnd = lastFloor.Add(f)
		floorCreated, floorOutput = append(floorCreated, c), append(floorOutput, f)
	}
	var ready, output []time.Duration
	for _, r := range runs {
		ready, output = append(ready, r.ready), append(output, r.output)
	}
	rows := []stats{
		{name: rt + ": first environment → first command output", n: 1, p50: firstRun.output, p99: firstRun.output, avg: firstRun.output},
		summarize(rt+": provision → agent ready", ready),
		summarize(rt+": provision → first command output", output),
		{name: "`kubectl run` → first log line, first pod (floor)", n: 1, p50: floorFirst, p99: floorFirst, avg: floorFirst},
		summarize("`kubectl run --restart=Never --image-pull-policy=Never IMAGE -- echo first` → kubectl returned", floorCreated),
		summarize("`kubectl run … -- echo first` → first log line (floor)", floorOutput),
	}
	pooled, err := pooledRows(srv, rt, *k8sN)
	if err != nil {
		return fmt.Errorf("kubernetes pool: %w", err)
	}
	rows = append(rows, pooled...)

	fmt.Println("\n| kubernetes environments | n | p50 | p99 | mean |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, r := range rows {
		fmt.Printf("| %s | %d | %s | %s | %s |\n", r.name, r.n, ms(r.p50), ms(r.p99), ms(r.avg))
	}
	fmt.Printf("\nkubernetes create → first output p50 / `kubectl run` → first log line p50 = %.2fx (goal ≤ 1.2x)\n",
		float64(rows[2].p50)/float64(rows[5].p50))
	fmt.Printf("kubernetes pool take → first output p50 = %s (goal ≤ 50 ms)\n", ms(pooled[1].p50))
	printSteps(runs, srv.Log())
	if *k8sTrace && len(runs) > 0 {
		last := runs[len(runs)-1]
		fmt.Printf("\ntrace of %s (offsets from its request):\n", last.name)
		printClusterLog(kubeconfig, last.start, last.start.Add(last.output+time.Second))
		fmt.Printf("\ntrace of the last `kubectl run` floor (offsets from its start):\n")
		printClusterLog(kubeconfig, lastFloor, lastFloorEnd.Add(time.Second))
	}

	// (c) Many at once.
	if err := burstRows(srv, rt, *k8sBurst); err != nil {
		return err
	}
	return nil
}

// kubectlRunFirstLog is the floor of a pod environment's first output: the
// cluster's own kubectl runs a pod of image that echoes a line, and the
// pod's log is read through the API every 10 ms until the line is there.
// Timed from kubectl's start; the pod is deleted afterwards (not timed).
func kubectlRunFirstLog(cs k8s.Interface, kubectl, kubeconfig, ns, image, name string) (created, firstLog time.Duration, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pods := cs.CoreV1().Pods(ns)
	defer func() {
		zero := int64(0)
		if derr := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); derr != nil && !apierrors.IsNotFound(derr) {
			err = errors.Join(err, derr)
			return
		}
		for ctx.Err() == nil {
			if _, gerr := pods.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(gerr) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		err = errors.Join(err, fmt.Errorf("pod %s not gone after delete", name))
	}()
	start := time.Now()
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig="+kubeconfig, "-n", ns, "run", name,
		"--restart=Never", "--image="+image, "--image-pull-policy=Never", "--", "echo", "first").CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("kubectl run: %v: %s", err, out)
	}
	created = time.Since(start)
	for {
		b, lerr := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if lerr == nil && bytes.Contains(b, []byte("first")) {
			return created, time.Since(start), nil
		}
		if ctx.Err() != nil {
			return 0, 0, fmt.Errorf("pod %s: no log line within 3 min (%v)", name, lerr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tracedRun is one timed environment and what its record says.
type tracedRun struct {
	name          string
	start         time.Time
	ready, output time.Duration
	// steps are the environment's events (and the server's "agent
	// connected") as offsets from the request.
	steps map[string]time.Duration
}

// provisionTraced is provisionOnce, and the environment's events read back
// while it is ready (before the delete).
func provisionTraced(srv *harness.Server, name string) (tracedRun, error) {
	run := tracedRun{name: name, start: time.Now()}
	ready, output, err := provisionOnceThen(srv, "kubernetes", name, func() (err error) {
		run.steps, err = envSteps(srv, name, run.start)
		return err
	})
	run.ready, run.output = ready, output
	return run, err
}

// envSteps reads an environment's events: the first time of each step, as
// an offset from start.
func envSteps(srv *harness.Server, name string, start time.Time) (map[string]time.Duration, error) {
	_, b, err := restCall(srv, http.MethodGet, "/api/v1/environments/"+name, nil)
	if err != nil {
		return nil, err
	}
	var e struct {
		Events []struct {
			At   time.Time `json:"at"`
			Step string    `json:"step"`
		} `json:"events"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("%s: %w: %s", name, err, b)
	}
	steps := map[string]time.Duration{}
	for _, ev := range e.Events {
		if _, seen := steps[ev.Step]; !seen {
			steps[ev.Step] = ev.At.Sub(start)
		}
	}
	return steps, nil
}

// provisionOnceThen is provisionOnce with then called after the first
// output, before the delete (not timed).
func provisionOnceThen(srv *harness.Server, runtime, name string, then func() error) (ready, output time.Duration, err error) {
	var thenErr error
	ready, output, err = provisionOnceHook(srv, runtime, name, nil, func() { thenErr = then() })
	return ready, output, errors.Join(err, thenErr)
}

var agentConnected = regexp.MustCompile(`^time=(\S+) level=INFO msg="agent connected" agent_id=(\S+)`)

// printSteps prints, per step of the runs' records, the median offset
// from the request, and the server's "agent connected" line beside them.
func printSteps(runs []tracedRun, log string) {
	connected := map[string]time.Time{}
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		if m := agentConnected.FindStringSubmatch(sc.Text()); m != nil {
			if at, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
				if _, seen := connected[strings.Trim(m[2], `"`)]; !seen {
					connected[strings.Trim(m[2], `"`)] = at
				}
			}
		}
	}
	by := map[string][]time.Duration{}
	for _, r := range runs {
		for step, d := range r.steps {
			by[step] = append(by[step], d)
		}
		if at, ok := connected[r.name]; ok {
			by["(server log) agent connected"] = append(by["(server log) agent connected"], at.Sub(r.start))
		}
		by["(client) ready seen"] = append(by["(client) ready seen"], r.ready)
		by["(client) exec echo returned"] = append(by["(client) exec echo returned"], r.output)
	}
	type row struct {
		step       string
		p50, lo, h time.Duration
	}
	var out []row
	for step, d := range by {
		sortDurations(d)
		out = append(out, row{step, d[len(d)/2], d[0], d[len(d)-1]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].p50 < out[j].p50 })
	fmt.Println("\n| step of a kubernetes create (offset from the request) | p50 | min | max |")
	fmt.Println("| --- | --- | --- | --- |")
	for _, r := range out {
		fmt.Printf("| %s | %s | %s | %s |\n", r.step, ms(r.p50), ms(r.lo), ms(r.h))
	}
}

var (
	containerdTime = regexp.MustCompile(`^time="([^"]+)" level=\w+ msg="(.*)"`)
	kubeletTime    = regexp.MustCompile(`^[IWE](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})\s+\d+ (\S+)\] (.*)`)
)

// printClusterLog prints the containerd and kubelet log lines between from
// and to, as offsets from from (the test cluster's logs are beside its
// admin kubeconfig).
func printClusterLog(kubeconfig string, from, to time.Time) {
	dir := filepath.Join(filepath.Dir(kubeconfig), "log")
	type line struct {
		at  time.Time
		txt string
	}
	var lines []line
	for _, f := range []string{"containerd", "kubelet"} {
		data, err := os.ReadFile(filepath.Join(dir, f+".log"))
		if err != nil {
			fmt.Println("  ", err)
			continue
		}
		for _, l := range strings.Split(string(data), "\n") {
			var at time.Time
			var txt string
			if m := containerdTime.FindStringSubmatch(l); m != nil {
				at, _ = time.Parse(time.RFC3339Nano, m[1])
				txt = "containerd: " + m[2]
			} else if m := kubeletTime.FindStringSubmatch(l); m != nil {
				t, err := time.Parse("0102 15:04:05.000000", m[1])
				if err != nil {
					continue
				}
				at = time.Date(from.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.Local)
				txt = "kubelet " + m[2] + ": " + m[3]
			} else {
				continue
			}
			if at.Before(from) || at.After(to) {
				continue
			}
			lines = append(lines, line{at, txt})
		}
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at.Before(lines[j].at) })
	for _, l := range lines {
		fmt.Printf("  +%8s  %s\n", ms(l.at.Sub(from)), truncate(l.txt, 220))
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// burstRows creates n environments at once (n requests in flight), each
// followed to ready and its first `echo`; it prints p50 and the last of
// both, then deletes them all (not timed).
func burstRows(srv *harness.Server, runtime string, n int) error {
	type result struct {
		ready, output time.Duration
		steps         map[string]time.Duration
		err           error
	}
	results := make([]result, n)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-burst-%d", runtime, i)
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			if r.ready, r.output, r.err = createAndFollow(srv, runtime, names[i], start); r.err == nil {
				r.steps, r.err = envSteps(srv, names[i], start)
			}
		}()
	}
	wg.Wait()
	all := time.Since(start)
	// Delete them all at once, and wait until they are gone.
	var errs []error
	var mu sync.Mutex
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := deleteAndWait(srv, name); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	var ready, output []time.Duration
	var runs []tracedRun
	failed := 0
	for i, r := range results {
		if r.err != nil {
			failed++
			if failed <= 3 {
				errs = append(errs, fmt.Errorf("%s: %w", names[i], r.err))
			}
			continue
		}
		ready, output = append(ready, r.ready), append(output, r.output)
		runs = append(runs, tracedRun{name: names[i], start: start, ready: r.ready, output: r.output, steps: r.steps})
	}
	fmt.Printf("\n%d kubernetes environments created at once: %d ready, %d failed; all done after %s\n", n, len(ready), failed, all.Round(time.Millisecond))
	if len(ready) > 0 {
		r, o := summarize("", ready), summarize("", output)
		sortDurations(ready)
		sortDurations(output)
		fmt.Println("\n| kubernetes, created at once | n | p50 | last | mean |")
		fmt.Println("| --- | --- | --- | --- | --- |")
		fmt.Printf("| all created at once → agent ready | %d | %s | %s | %s |\n", len(ready), ms(r.p50), ms(ready[len(ready)-1]), ms(r.avg))
		fmt.Printf("| all created at once → first command output | %d | %s | %s | %s |\n", len(output), ms(o.p50), ms(output[len(output)-1]), ms(o.avg))
		printSteps(runs, srv.Log())
	}
	return errors.Join(errs...)
}

// createAndFollow creates one environment and follows it (GET every 20 ms,
// gentler than provisionOnce's 5 ms with many in flight) to ready and its
// first `echo`, timed from start.
func createAndFollow(srv *harness.Server, runtime, name string, start time.Time) (ready, output time.Duration, err error) {
	code, body, err := restCall(srv, http.MethodPost, "/api/v1/environments", map[string]any{"runtime": runtime, "name": name})
	if err != nil || code != http.StatusAccepted {
		return 0, 0, fmt.Errorf("create: %d %s %v", code, body, err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		_, b, err := restCall(srv, http.MethodGet, "/api/v1/environments/"+name, nil)
		if err != nil {
			return 0, 0, err
		}
		var e struct {
			State string `json:"state"`
			Error string `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		if e.State == "ready" {
			break
		}
		if e.State == "failed" || time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("%s (%s)", e.State, e.Error)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ready = time.Since(start)
	code, body, err = restCall(srv, http.MethodPost, "/api/v1/agents/"+name+"/exec", map[string]any{"command": "echo", "args": []string{"first"}})
	if err != nil || code != http.StatusOK || !bytes.Contains(body, []byte("first")) {
		return 0, 0, fmt.Errorf("exec: %d %s %v", code, body, err)
	}
	return ready, time.Since(start), nil
}

// deleteAndWait deletes an environment and waits (up to 3 min) until the
// server no longer knows it.
func deleteAndWait(srv *harness.Server, name string) error {
	if code, b, err := restCall(srv, http.MethodDelete, "/api/v1/environments/"+name, nil); err != nil || code >= 300 && code != http.StatusNotFound {
		return fmt.Errorf("delete %s: %d %s %v", name, code, b, err)
	}
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if c, _, _ := restCall(srv, http.MethodGet, "/api/v1/environments/"+name, nil); c == http.StatusNotFound {
			return nil
		}
	}
	return fmt.Errorf("%s not gone 3 min after delete", name)
}

// envAndKubernetesBench is the env part: envBench, then kubernetesBench
// when -env-runtimes names kubernetes (its server and cluster are its own).
func envAndKubernetesBench(bins harness.Binaries) error {
	if err := envBench(bins); err != nil {
		return err
	}
	if contains(strings.Split(*envRTs, ","), "kubernetes") {
		return kubernetesBench(bins)
	}
	return nil
}
