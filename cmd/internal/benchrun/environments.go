package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/docker"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

var (
	envN   = flag.Int("env-n", 20, "environments per runtime (host, docker)")
	vmN    = flag.Int("vm-n", 5, "VMs (each boots under TCG)")
	vmDir  = flag.String("vm-image", "build/vm", "tiny VM image (make vm-image)")
	envRTs = flag.String("env-runtimes", "host,docker,libvirt,kubernetes", "runtimes to measure where available (kubernetes: on the test cluster, kubernetes.go)")
)

// envBench measures, per runtime, provision request → agent ready and →
// first command output through the real server, beside the engine's own
// floor measured in the same run: `docker run --rm IMAGE true` for
// containers, a bare qemu-system boot of the same kernel and initramfs for
// VMs.
func envBench(bins harness.Binaries) error {
	dataDir, err := os.MkdirTemp("", "agentic-bench-env-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	want := strings.Split(*envRTs, ",")
	runtimes := []string{"host"}
	var env []string
	var notes []string

	var dockerHost string
	if contains(want, "docker") {
		e, err := harness.StartEngine("docker")
		if err != nil {
			notes = append(notes, "docker not measured: "+err.Error())
		} else {
			defer e.Stop()
			dockerHost = e.Getenv("DOCKER_HOST")
			runtimes = append(runtimes, e.Runtime)
			env = append(env, e.Env...)
		}
	}
	// The uncompressed kernel when the image has it, as the adapter boots.
	kernel, initrd := filepath.Join(*vmDir, "vmlinux"), filepath.Join(*vmDir, "initrd.img")
	if _, err := os.Stat(kernel); err != nil {
		kernel = filepath.Join(*vmDir, "vmlinuz")
	}
	if contains(want, "libvirt") {
		if _, err := os.Stat("/var/run/libvirt/libvirt-sock"); err != nil {
			notes = append(notes, "libvirt not measured: no libvirtd (scripts/libvirt-test-env.sh starts one)")
		} else if _, err := os.Stat(initrd); err != nil {
			notes = append(notes, "libvirt not measured: no VM image (make vm-image)")
		} else {
			abs, _ := filepath.Abs(*vmDir)
			runtimes = append(runtimes, "libvirt")
			env = append(env, "AGENTIC_VM_IMAGE_DIR="+abs, "AGENTIC_LIBVIRT_ACCEL=tcg")
		}
	}
	env = append(env, "AGENTIC_RUNTIMES="+strings.Join(runtimes, ","))
	srv, err := harness.Start(bins, harness.Options{DataDir: dataDir, Env: env})
	if err != nil {
		return err
	}
	defer srv.Kill()

	var rows []stats
	for _, rt := range runtimes {
		n := *envN
		if rt == "libvirt" {
			n = *vmN
		}
		// The first environment of a runtime pays one-time costs (the
		// default image is built on first use): measured apart.
		first, _, err := provisionOnce(srv, rt, rt+"-first")
		if err != nil {
			return fmt.Errorf("%s: %w", rt, err)
		}
		ready, output, err := provisionMany(srv, rt, rt, n)
		if err != nil {
			return fmt.Errorf("%s: %w", rt, err)
		}
		rows = append(rows, stats{name: rt + ": first environment → agent ready", n: 1, p50: first, p99: first, avg: first},
			summarize(rt+": provision → agent ready", ready), summarize(rt+": provision → first command output", output))
		pooled, err := pooledRows(srv, rt, n)
		if err != nil {
			return fmt.Errorf("%s pool: %w", rt, err)
		}
		rows = append(rows, pooled...)
		switch rt {
		case "docker":
			s, err := measure("`docker run --rm --network none "+docker.DefaultTag+" true` (floor)", n, func() error {
				out, err := exec.Command("docker", "-H", dockerHost, "run", "--rm", "--network", "none", docker.DefaultTag, "true").CombinedOutput()
				if err != nil {
					return fmt.Errorf("%v: %s", err, out)
				}
				return nil
			})
			if err != nil {
				return err
			}
			rows = append(rows, s)
		case "libvirt":
			restored, err := restoredRows(bins, env, n)
			if err != nil {
				return fmt.Errorf("libvirt restored: %w", err)
			}
			rows = append(rows, restored...)
			s, err := measure("bare `qemu-system-x86_64 -accel tcg` boot to userspace, same kernel+initrd (floor)", n, func() error {
				return bareQEMUBoot(kernel, initrd)
			})
			if err != nil {
				return err
			}
			rows = append(rows, s)
		}
	}
	fmt.Println("\n| environments | n | p50 | p99 | mean |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, r := range rows {
		fmt.Printf("| %s | %d | %s | %s | %s |\n", r.name, r.n, ms(r.p50), ms(r.p99), ms(r.avg))
	}
	for _, n := range notes {
		fmt.Println(n)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}

// restCall is one REST request with the operator token.
func restCall(srv *harness.Server, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, srv.RESTURL+path, rd)
	req.Header.Set("Authorization", "Bearer "+srv.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// poolSize is the warm pool kept per runtime while its pooled creates are
// measured: VMs under TCG cost a core each while they boot.
func poolSize(runtime string) int {
	if runtime == "libvirt" {
		return 2
	}
	return 3
}

// pooledRows measures creates that take a warm pool's member: create →
// agent ready and → first command output, each with a member idle (the
// wait for one is outside the timing), and the refill (take → the pool
// full again). The pool is deleted at the end.
func pooledRows(srv *harness.Server, runtime string, n int) ([]stats, error) {
	pool := "warm-" + runtime
	size := poolSize(runtime)
	if code, b, err := restCall(srv, http.MethodPut, "/api/v1/pools/"+pool, map[string]any{"runtime": runtime, "size": size}); err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("put pool: %d %s %v", code, b, err)
	}
	defer restCall(srv, http.MethodDelete, "/api/v1/pools/"+pool, nil) //nolint:errcheck // best effort at the end
	idle := func() (int, int, error) {
		code, b, err := restCall(srv, http.MethodGet, "/api/v1/pools/"+pool, nil)
		if err != nil || code != http.StatusOK {
			return 0, 0, fmt.Errorf("get pool: %d %s %v", code, b, err)
		}
		var p struct{ Idle, Hits int }
		err = json.Unmarshal(b, &p)
		return p.Idle, p.Hits, err
	}
	waitIdle := func(want int) error {
		deadline := time.Now().Add(5 * time.Minute)
		for {
			got, _, err := idle()
			if err != nil {
				return err
			}
			if got >= want {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %d idle after 5 min, want %d", pool, got, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var ready, output, refill []time.Duration
	for i := range n {
		if err := waitIdle(size); err != nil {
			return nil, err
		}
		taken := time.Now()
		r, o, err := provisionOnce(srv, runtime, fmt.Sprintf("%s-pooled-%d", runtime, i))
		if err != nil {
			return nil, err
		}
		if err := waitIdle(size); err != nil {
			return nil, err
		}
		ready, output, refill = append(ready, r), append(output, o), append(refill, time.Since(taken))
	}
	if _, hits, err := idle(); err != nil || hits != n {
		return nil, fmt.Errorf("%s: %d hits for %d creates (%v): some were not taken from the pool", pool, hits, n, err)
	}
	// The floor of "→ first command output" once an agent is ready: the
	// same exec in an environment that is ready already.
	floor, err := execFloor(srv, runtime, 20)
	if err != nil {
		return nil, err
	}
	return []stats{
		summarize(fmt.Sprintf("%s: create from a pool of %d → agent ready", runtime, size), ready),
		summarize(fmt.Sprintf("%s: create from a pool of %d → first command output", runtime, size), output),
		summarize(runtime+": pool refill (take → pool full again)", refill),
		floor,
	}, nil
}

// execFloor measures `echo` through REST in an environment that is ready.
func execFloor(srv *harness.Server, runtime string, n int) (stats, error) {
	name := runtime + "-exec-floor"
	if code, b, err := restCall(srv, http.MethodPost, "/api/v1/environments", map[string]any{"runtime": runtime, "name": name}); err != nil || code != http.StatusAccepted {
		return stats{}, fmt.Errorf("create %s: %d %s %v", name, code, b, err)
	}
	defer restCall(srv, http.MethodDelete, "/api/v1/environments/"+name, nil) //nolint:errcheck // best effort at the end
	deadline := time.Now().Add(3 * time.Minute)
	for {
		_, b, err := restCall(srv, http.MethodGet, "/api/v1/environments/"+name, nil)
		if err != nil {
			return stats{}, err
		}
		if bytes.Contains(b, []byte(`"state":"ready"`)) {
			break
		}
		if time.Now().After(deadline) {
			return stats{}, fmt.Errorf("%s not ready: %s", name, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return measure(runtime+": exec `echo` in a ready environment (floor of → first output)", n, func() error {
		code, b, err := restCall(srv, http.MethodPost, "/api/v1/agents/"+name+"/exec", map[string]any{"command": "echo", "args": []string{"first"}})
		if err != nil || code != http.StatusOK || !bytes.Contains(b, []byte("first")) {
			return fmt.Errorf("exec in %s: %d %s %v", name, code, b, err)
		}
		return nil
	})
}

// provisionOnce creates an environment, waits for its agent, runs `echo`
// in it, and deletes it (waiting until it is gone, outside the timings).
func provisionOnce(srv *harness.Server, runtime, name string) (ready, output time.Duration, err error) {
	return provisionOnceHook(srv, runtime, name, nil, nil)
}

// provisionOnceHook is provisionOnce with the create request's other
// fields, calling then, when set, after the first output and before the
// delete (not timed).
func provisionOnceHook(srv *harness.Server, runtime, name string, fields map[string]any, then func()) (ready, output time.Duration, err error) {
	call := func(method, path string, body any) (int, []byte, error) { return restCall(srv, method, path, body) }
	start := time.Now()
	req := map[string]any{"runtime": runtime, "name": name}
	maps.Copy(req, fields)
	code, body, err := call(http.MethodPost, "/api/v1/environments", req)
	if err != nil || code != http.StatusAccepted {
		return 0, 0, fmt.Errorf("create %s: %d %s %v", name, code, body, err)
	}
	defer func() {
		if _, b, derr := call(http.MethodDelete, "/api/v1/environments/"+name, nil); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete %s: %v %s", name, derr, b))
		}
		for range 600 {
			if c, _, _ := call(http.MethodGet, "/api/v1/environments/"+name, nil); c == http.StatusNotFound {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		err = errors.Join(err, fmt.Errorf("%s not gone a minute after delete", name))
	}()
	deadline := start.Add(3 * time.Minute)
	for {
		_, b, err := call(http.MethodGet, "/api/v1/environments/"+name, nil)
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
			return 0, 0, fmt.Errorf("%s: %s (%s)", name, e.State, e.Error)
		}
		time.Sleep(5 * time.Millisecond)
	}
	ready = time.Since(start)
	code, body, err = call(http.MethodPost, "/api/v1/agents/"+name+"/exec", map[string]any{"command": "echo", "args": []string{"first"}})
	if err != nil || code != http.StatusOK || !bytes.Contains(body, []byte("first")) {
		return 0, 0, fmt.Errorf("exec in %s: %d %s %v", name, code, body, err)
	}
	output = time.Since(start)
	if then != nil {
		then()
	}
	return ready, output, nil
}

// bareQEMUBoot boots kernel+initrd under TCG with no libvirt and no agent
// configuration, until the image's init says userspace is up.
func bareQEMUBoot(kernel, initrd string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", "-accel", "tcg", "-m", "256", "-smp", "1",
		"-nographic", "-nodefaults", "-serial", "stdio", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd, "-append", "console=ttyS0 panic=-1 quiet")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "agentic-init: userspace up") {
			return nil
		}
	}
	return fmt.Errorf("qemu boot: no userspace marker (%v)", ctx.Err())
}

// restoredRows measures VM creates restored from a template on a server
// with AGENTIC_LIBVIRT_RESTORE=all: the first create boots and the
// template is made meanwhile (not timed), then n creates are timed.
func restoredRows(bins harness.Binaries, env []string, n int) ([]stats, error) {
	dataDir, err := os.MkdirTemp("", "agentic-bench-restore-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dataDir)
	srv, err := harness.Start(bins, harness.Options{DataDir: dataDir, Env: append(slices.Clone(env), "AGENTIC_LIBVIRT_RESTORE=all")})
	if err != nil {
		return nil, err
	}
	defer srv.Kill()
	if _, _, err := provisionOnce(srv, "libvirt", "libvirt-template-maker"); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(dataDir, "vms", ".templates", "*.sav")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			log := srv.Log()
			return nil, fmt.Errorf("no template after 3 min; the server's log ends:\n%s", log[max(0, len(log)-3000):])
		}
	}
	ready, output, err := provisionMany(srv, "libvirt", "libvirt-restored", n)
	if err != nil {
		return nil, err
	}
	return []stats{
		summarize("libvirt, AGENTIC_LIBVIRT_RESTORE=all: provision → agent ready (restored)", ready),
		summarize("libvirt, AGENTIC_LIBVIRT_RESTORE=all: provision → first command output (restored)", output),
	}, nil
}

// provisionMany runs provisionOnce n times (environments prefix-0 …).
func provisionMany(srv *harness.Server, runtime, prefix string, n int) (ready, output []time.Duration, err error) {
	for i := range n {
		r, o, err := provisionOnce(srv, runtime, fmt.Sprintf("%s-%d", prefix, i))
		if err != nil {
			return nil, nil, err
		}
		ready, output = append(ready, r), append(output, o)
	}
	return ready, output, nil
}
