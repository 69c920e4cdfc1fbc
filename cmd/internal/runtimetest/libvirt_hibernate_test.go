package runtimetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/libvirt"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// TestLibvirtHibernate: a running VM hibernates (its memory saved to its
// folder, its QEMU process gone, the domain still defined) and wakes from
// the saved memory: a background counter goes on from where it was, with
// no gap, the same agent process reconnects under the same identity. A
// restarted server sees the VM hibernated and wakes it. A corrupted saved
// state is ErrSavedStateLost and the VM stays down; Destroy removes it all.
func TestLibvirtHibernate(t *testing.T) {
	rt, link, cfg, lv := libvirtQEMU(t)
	ctx := context.Background()
	if c := rt.Capabilities().Hibernate; c != ports.HibernateMemory {
		t.Fatalf("capability hibernate %q, want memory", c)
	}
	name := "hib-" + cfg.Owner[len(cfg.Owner)-8:]
	spec := envSpec(t, link, name)
	spec.Resources = ports.Resources{CPUs: 1, MemoryMB: 512}
	t.Cleanup(func() { _ = rt.Destroy(context.Background(), name) })
	if _, err := rt.Provision(ctx, spec); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	waitReady(t, link, name, true)

	// The counter: one line a tenth of a second, from one shell that
	// lives as long as the guest.
	if _, err := link.Service.Start(ctx, name, ports.CommandSpec{Command: "sh", Args: []string{"-c",
		"i=0; while :; do i=$((i+1)); echo $i >>/tmp/counter.log; sleep 0.1; done"}},
		ports.StartOptions{Detached: true}); err != nil {
		t.Fatalf("start the counter: %v", err)
	}
	counted := func(least int) int {
		t.Helper()
		for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
			out := runOK(t, link, name, "cat /tmp/counter.log 2>/dev/null; true")
			n := contiguous(t, out)
			if n >= least {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatalf("the counter is at %d after %s, want %d", n, patience, least)
			}
		}
	}
	before := counted(5)
	agentPID := strings.TrimSpace(runOK(t, link, name, "pidof agentic-agent"))
	// The guest's clock an hour behind, as after a long hibernation: a
	// woken guest's clock must catch up with the host's.
	runAsRoot(t, link, name, "date -s @$(( $(date +%s) - 3600 ))")
	info1, _ := link.Service.Agent(name)

	hibStart := time.Now()
	h, err := rt.Hibernate(ctx, name)
	hibTook := time.Since(hibStart)
	if err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	if h.Mode != ports.HibernateMemory || h.Bytes <= 0 || h.At.IsZero() {
		t.Errorf("Hibernate returned %+v", h)
	}
	if st, err := os.Stat(rt.SavePath(name)); err != nil || st.Size() != h.Bytes {
		t.Errorf("the saved state %s: %v, %v; want %d bytes", rt.SavePath(name), st, err, h.Bytes)
	}
	t.Logf("TIMING Hibernate %s, saved %.1f MB (TCG, 1 vCPU, 512 MiB)", hibTook.Round(time.Millisecond), float64(h.Bytes)/1e6)
	checkHibernated(t, rt, lv, name, h)
	waitReady(t, link, name, false)
	if again, err := rt.Hibernate(ctx, name); err != nil || again.Bytes != h.Bytes || !again.At.Equal(h.At) {
		t.Errorf("Hibernate of a hibernated VM: %+v, %v; want %+v again", again, err, h)
	}
	if err := rt.Stop(ctx, name); err != nil {
		t.Errorf("Stop of a hibernated VM: %v", err)
	}
	if err := rt.Pause(ctx, name); err == nil {
		t.Error("Pause of a hibernated VM succeeded")
	}

	// A restarted server: the VM is listed hibernated, with no relay.
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	rt2, err := libvirt.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt2.Destroy(context.Background(), name); _ = rt2.Close() })
	rec, err := rt2.Recover(ctx)
	if err != nil || len(rec) != 1 || rec[0].State != ports.EnvHibernated || rec[0].SavedBytes != h.Bytes {
		t.Fatalf("Recover: %+v, %v; want one hibernated VM of %d bytes", rec, err, h.Bytes)
	}
	checkHibernated(t, rt2, lv, name, h)

	wakeStart := time.Now()
	if err := rt2.Wake(ctx, name); err != nil {
		t.Fatalf("Wake: %v", err)
	}
	woken := time.Since(wakeStart)
	ready := waitAgentSince(t, link, name, info1.ConnectedAt)
	out, first := runVM(t, link, name, "echo woke")
	t.Logf("TIMING Wake %s, agent ready %s, first exec output %s after Wake was called",
		woken.Round(time.Millisecond), ready.Sub(wakeStart).Round(time.Millisecond), first.Sub(wakeStart).Round(time.Millisecond))
	if out != "woke\n" {
		t.Errorf("exec after Wake: %q", out)
	}
	checkWoken(t, rt2, link, name, agentPID)
	after := counted(before + 5)
	t.Logf("counter: %d lines before Hibernate, %d after Wake, none missing or repeated", before, after)
	clock := runOK(t, link, name, "date +%s")
	if guest, err := strconv.ParseInt(strings.TrimSpace(clock), 10, 64); err != nil || time.Now().Unix()-guest > 3 || guest-time.Now().Unix() > 3 {
		t.Errorf("guest clock after Wake: %q (%v), host %d; want within 3 s", clock, err, time.Now().Unix())
	}
	if b, err := os.ReadFile(rt2.ConsolePath(name)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "agent stream ended") || strings.Contains(line, "registered with") || strings.Contains(line, "RTC") {
				t.Logf("console: %s", strings.TrimSpace(line))
			}
		}
	}
	if err := rt2.Wake(ctx, name); err != nil {
		t.Errorf("Wake of a running VM: %v", err)
	}

	// Two more rounds, timed: hibernate, wake → first output; the second
	// wakes by Start, which restores a hibernated VM as Wake does.
	for i := range 2 {
		info, _ := link.Service.Agent(name)
		hs := time.Now()
		h, err := rt2.Hibernate(ctx, name)
		if err != nil {
			t.Fatalf("Hibernate %d: %v", i+2, err)
		}
		ht := time.Since(hs)
		waitReady(t, link, name, false)
		ws := time.Now()
		wake := rt2.Wake
		if i == 1 {
			wake = rt2.Start
		}
		if err := wake(ctx, name); err != nil {
			t.Fatalf("Wake %d: %v", i+2, err)
		}
		wt := time.Since(ws)
		ready := waitAgentSince(t, link, name, info.ConnectedAt)
		_, first := runVM(t, link, name, "echo woke")
		t.Logf("TIMING round %d: Hibernate %s (%.1f MB), Wake %s, agent ready %s, first exec output %s after Wake was called",
			i+2, ht.Round(time.Millisecond), float64(h.Bytes)/1e6, wt.Round(time.Millisecond),
			ready.Sub(ws).Round(time.Millisecond), first.Sub(ws).Round(time.Millisecond))
	}
	checkWoken(t, rt2, link, name, agentPID)
	counted(after + 5)

	// A garbled saved state: Wake says it is lost and the VM stays down.
	h, err = rt2.Hibernate(ctx, name)
	if err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	f, err := os.OpenFile(rt2.SavePath(name), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0x5a}, 4096), h.Bytes/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := rt2.Wake(ctx, name); !errors.Is(err, ports.ErrSavedStateLost) {
		t.Errorf("Wake from a garbled saved state: %v, want ErrSavedStateLost", err)
	}
	// Failed with the reason, also for a new adapter (a restarted server).
	rt3, err := libvirt.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt3.Close() })
	for _, rt := range []*libvirt.Runtime{rt2, rt3} {
		if env, err := rt.Inspect(ctx, name); err != nil || env.State != ports.EnvFailed || !strings.Contains(env.Detail, "corrupt") {
			t.Errorf("after a failed Wake: %+v, %v; want failed, saying the saved state is corrupt", env, err)
		}
	}
	if err := rt3.Wake(ctx, name); !errors.Is(err, ports.ErrSavedStateLost) {
		t.Errorf("Wake again: %v, want ErrSavedStateLost", err)
	}
	if running, _ := rt2.Relaying(name); running || qemuRuns(t, rt2.DomainName(name)) {
		t.Errorf("after a failed Wake: relay %v, QEMU %v; want neither", running, qemuRuns(t, rt2.DomainName(name)))
	}
	if err := rt2.Destroy(ctx, name); err != nil {
		t.Fatalf("Destroy of a hibernated VM: %v", err)
	}
	if _, err := os.Stat(rt2.SavePath(name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Destroy left the saved state: %v", err)
	}
	if left := libvirtLeftovers(rt2, lv)(t, name); len(left) > 0 {
		t.Errorf("Destroy left %v", left)
	}
}

// checkHibernated: the domain is defined and shut off, no QEMU runs for it,
// no relay, and Inspect and List say hibernated with the saved size.
func checkHibernated(t *testing.T, rt *libvirt.Runtime, lv *golibvirt.Libvirt, name string, h ports.Hibernation) {
	t.Helper()
	dom, err := lv.DomainLookupByName(rt.DomainName(name))
	if err != nil {
		t.Fatalf("the hibernated domain is not defined: %v", err)
	}
	if st, _, err := lv.DomainGetState(dom, 0); err != nil || golibvirt.DomainState(st) != golibvirt.DomainShutoff {
		t.Errorf("the hibernated domain's state: %d, %v; want shut off", st, err)
	}
	if qemuRuns(t, rt.DomainName(name)) {
		t.Error("a QEMU process still runs for the hibernated domain")
	}
	if running, _ := rt.Relaying(name); running {
		t.Error("the hibernated VM's relay runs")
	}
	env, err := rt.Inspect(context.Background(), name)
	if err != nil || env.State != ports.EnvHibernated || env.SavedBytes != h.Bytes || env.HibernatedAt.Sub(h.At).Abs() > time.Second {
		t.Errorf("Inspect: %+v, %v; want hibernated with %d bytes at %s", env, err, h.Bytes, h.At)
	}
	envs, err := rt.List(context.Background())
	if err != nil || len(envs) != 1 || envs[0].State != ports.EnvHibernated || envs[0].SavedBytes != h.Bytes {
		t.Errorf("List: %+v, %v", envs, err)
	}
}

// checkWoken: the VM runs, its saved state is gone, and the agent that
// answers is the same process as before.
func checkWoken(t *testing.T, rt *libvirt.Runtime, link *Link, name, agentPID string) {
	t.Helper()
	env, err := rt.Inspect(context.Background(), name)
	if err != nil || env.State != ports.EnvRunning || env.SavedBytes != 0 || !env.HibernatedAt.IsZero() {
		t.Errorf("Inspect after Wake: %+v, %v", env, err)
	}
	if _, err := os.Stat(rt.SavePath(name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the saved state is still there after Wake: %v", err)
	}
	if running, connected := rt.Relaying(name); !running || !connected {
		t.Errorf("relay after Wake: running %v, connected %v", running, connected)
	}
	info, ok := link.Service.Agent(name)
	if !ok || info.ID != name {
		t.Errorf("agent after Wake: %+v", info)
	}
	if b, _ := os.ReadFile(rt.ConsolePath(name)); bytes.Count(b, []byte("agentic-init: userspace up")) != 1 {
		t.Errorf("the VM booted again instead of being restored:\n%s", tail(b, 1500))
	}
	if pid := strings.TrimSpace(runOK(t, link, name, "pidof agentic-agent; hostname")); pid != agentPID+"\n"+name {
		t.Errorf("agent process and hostname after Wake: %q, want the same agent (pid %s) on %s", pid, agentPID, name)
	}
}

// waitAgentSince waits for the agent's connection made after since and
// returns when it was seen ready.
func waitAgentSince(t *testing.T, link *Link, name string, since time.Time) time.Time {
	t.Helper()
	for deadline := time.Now().Add(patience); ; time.Sleep(5 * time.Millisecond) {
		info, ok := link.Service.Agent(name)
		if ok && (info.Status == "ready" || info.Status == "busy") && info.ConnectedAt.After(since) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %s did not reconnect within %s: %+v", name, patience, info)
		}
	}
}

// runAsRoot runs a shell command as the guest's root and waits for it.
func runAsRoot(t *testing.T, link *Link, name, script string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cmd, err := link.Service.Start(ctx, name, ports.CommandSpec{Command: "sh", Args: []string{"-c", script}, RunAs: "0:0"}, ports.StartOptions{})
	if err != nil {
		t.Fatalf("%q as root: %v", script, err)
	}
	select {
	case <-cmd.Done():
	case <-ctx.Done():
		t.Fatalf("%q as root did not finish", script)
	}
	if r := cmd.Result(); r.ExitCode != 0 {
		t.Fatalf("%q as root: exit %d (%s)", script, r.ExitCode, r.Error)
	}
}

// runOK runs a shell command through the agent and returns its output.
func runOK(t *testing.T, link *Link, name, script string) string {
	t.Helper()
	r := portstest.RunScript(t, link.Service, name, script, nil)
	if r.Exit != 0 {
		t.Fatalf("command %q on %s: exit %d (%s), output %q", script, name, r.Exit, r.Error, r.Output)
	}
	return r.Output
}

// contiguous checks that a counter's log is 1, 2, 3, … with no gap and no
// repeat, and returns its last number.
func contiguous(t *testing.T, log string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(strings.TrimRight(log, "\n"), "\n") {
		if line == "" {
			continue
		}
		v, err := strconv.Atoi(line)
		if err != nil || v != n+1 {
			t.Fatalf("the counter's log goes %d, %q: it restarted, skipped or repeated", n, line)
		}
		n = v
	}
	return n
}

// qemuRuns reports whether a QEMU process runs for the domain.
func qemuRuns(t *testing.T, domain string) bool {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	want := []byte(fmt.Sprintf("guest=%s,", domain))
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, want) && bytes.Contains(b, []byte("qemu")) {
			return true
		}
	}
	return false
}

// TestLibvirtTestDriverHibernate checks the hibernation bookkeeping on
// libvirt's test driver (no guest, in milliseconds): only a running domain
// hibernates, a hibernated one is listed so with its saved size (also by a
// new adapter, which starts no relay for it), wakes back to running, a
// spoiled saved state is ErrSavedStateLost, and Destroy removes it all.
func TestLibvirtTestDriverHibernate(t *testing.T) {
	ctx := context.Background()
	td := newTestDriver(t)
	rt, lv, dir, owner, cfg := td.rt, td.lv, td.dir, td.owner, td.cfg
	name := "tdh-" + owner[len(owner)-8:]
	spec := ports.EnvironmentSpec{Name: name, Resources: ports.Resources{CPUs: 1, MemoryMB: 128},
		Agent: ports.AgentBootstrap{ID: name, Secret: "s3cret", Socket: filepath.Join(dir, "agent.sock")}}
	t.Cleanup(func() { _ = rt.Destroy(context.Background(), name) })
	if _, err := rt.Provision(ctx, spec); err != nil {
		t.Fatalf("Provision: %v", err)
	}

	// Paused or stopped: refused, nothing saved.
	if err := rt.Pause(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Hibernate(ctx, name); !errors.Is(err, ports.ErrInvalidSpec) {
		t.Errorf("Hibernate of a paused domain: %v, want ErrInvalidSpec", err)
	}
	if err := rt.Wake(ctx, name); !errors.Is(err, ports.ErrInvalidSpec) {
		t.Errorf("Wake of a paused domain: %v, want ErrInvalidSpec", err)
	}
	if err := rt.Resume(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Hibernate(ctx, name); !errors.Is(err, ports.ErrInvalidSpec) {
		t.Errorf("Hibernate of a stopped domain: %v, want ErrInvalidSpec", err)
	}
	if err := rt.Wake(ctx, name); !errors.Is(err, ports.ErrInvalidSpec) {
		t.Errorf("Wake of a stopped domain that never hibernated: %v, want ErrInvalidSpec", err)
	}
	if _, err := os.Stat(rt.SavePath(name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused Hibernate saved something: %v", err)
	}
	if err := rt.Start(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := rt.Wake(ctx, name); err != nil {
		t.Errorf("Wake of a running domain: %v", err)
	}

	h, err := rt.Hibernate(ctx, name)
	if err != nil || h.Mode != ports.HibernateMemory || h.Bytes <= 0 {
		t.Fatalf("Hibernate: %+v, %v", h, err)
	}
	checkHibernated(t, rt, lv, name, h)

	// A new adapter (a restarted server) sees it hibernated, no relay.
	rt2, err := libvirt.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt2.Close() })
	if rec, err := rt2.Recover(ctx); err != nil || len(rec) != 1 || rec[0].State != ports.EnvHibernated || rec[0].SavedBytes != h.Bytes {
		t.Fatalf("Recover: %+v, %v", rec, err)
	}
	checkHibernated(t, rt2, lv, name, h)
	if err := rt2.Wake(ctx, name); err != nil {
		t.Fatalf("Wake: %v", err)
	}
	if env, err := rt2.Inspect(ctx, name); err != nil || env.State != ports.EnvRunning || env.SavedBytes != 0 {
		t.Errorf("after Wake: %+v, %v", env, err)
	}
	if running, _ := rt2.Relaying(name); !running {
		t.Error("no relay after Wake")
	}

	// Cut short: lost, the domain stays shut off and is failed with the
	// reason; Start boots it afresh.
	h, err = rt2.Hibernate(ctx, name)
	if err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	if err := os.Truncate(rt2.SavePath(name), h.Bytes-1); err != nil {
		t.Fatal(err)
	}
	if err := rt2.Wake(ctx, name); !errors.Is(err, ports.ErrSavedStateLost) {
		t.Errorf("Wake from a truncated saved state: %v, want ErrSavedStateLost", err)
	}
	dom, err := lv.DomainLookupByName(rt2.DomainName(name))
	if err != nil {
		t.Fatal(err)
	}
	if st, _, err := lv.DomainGetState(dom, 0); err != nil || golibvirt.DomainState(st) != golibvirt.DomainShutoff {
		t.Errorf("after a failed Wake the domain's state is %d, %v; want shut off", st, err)
	}
	if env, err := rt2.Inspect(ctx, name); err != nil || env.State != ports.EnvFailed || !strings.Contains(env.Detail, "bytes") {
		t.Errorf("after a failed Wake: %+v, %v; want failed saying the save is short", env, err)
	}
	if rec, err := rt2.Recover(ctx); err != nil || len(rec) != 1 || rec[0].State != ports.EnvFailed {
		t.Errorf("Recover after a failed Wake: %+v, %v", rec, err)
	}
	if err := rt2.Wake(ctx, name); !errors.Is(err, ports.ErrSavedStateLost) {
		t.Errorf("Wake again: %v, want ErrSavedStateLost", err)
	}
	if err := rt2.Start(ctx, name); err != nil {
		t.Fatalf("Start after a lost saved state: %v", err)
	}
	if env, err := rt2.Inspect(ctx, name); err != nil || env.State != ports.EnvRunning || env.Detail != "" {
		t.Errorf("after Start: %+v, %v; want running afresh", env, err)
	}
	if err := rt2.Destroy(ctx, name); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if left := libvirtLeftovers(rt2, lv)(t, name); len(left) > 0 {
		t.Errorf("Destroy left %v", left)
	}
}
