package runtimetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/libvirt"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// TestLibvirtRestoresPoolMembers: warm pool members of the tiny image are
// restored from a template guest saved once, not booted. Each clone is its
// own machine: its own id (commands, hostname), its own credential (the
// template holds none), the host's time, its own random numbers; two
// restore at once from one template; a clone stopped and started boots as
// itself; a restarted server recovers clones; nothing is left after.
func TestLibvirtRestoresPoolMembers(t *testing.T) {
	rt, link, cfg, lv := libvirtQEMU(t)
	ctx := context.Background()
	suffix := cfg.Owner[len(cfg.Owner)-6:]
	secrets := map[string]string{}
	var mu sync.Mutex
	provision := func(name string) time.Duration {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		spec := ports.EnvironmentSpec{Name: name, Labels: map[string]string{ports.LabelPool: "vms"}, Agent: link.Bootstrap}
		spec.Agent.ID, spec.Agent.Secret = name, hex.EncodeToString(b)
		mu.Lock()
		secrets[name] = spec.Agent.Secret
		mu.Unlock()
		if err := link.Credentials.Put(name, spec.Agent.Secret); err != nil {
			t.Error(err)
			return 0
		}
		t.Cleanup(func() { _ = rt.Destroy(context.Background(), name) })
		start := time.Now()
		if _, err := rt.Provision(ctx, spec); err != nil {
			t.Errorf("Provision %s: %v", name, err)
			return 0
		}
		return time.Since(start)
	}

	first := "clone-a-" + suffix
	took := provision(first)
	waitReady(t, link, first, true)
	t.Logf("TIMING first member (makes the template): Provision %s", took.Round(time.Millisecond))
	templates, _ := filepath.Glob(filepath.Join(cfg.StateDir, ".templates", "*.sav"))
	if len(templates) != 1 {
		t.Fatalf("templates after the first member: %v", templates)
	}

	// Two at once from the one template.
	names := []string{"clone-b-" + suffix, "clone-c-" + suffix}
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			d := provision(n)
			waitReady(t, link, n, true)
			t.Logf("TIMING restored member %s: Provision %s, agent ready %s", n, d.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	randoms := map[string]string{}
	for _, n := range append([]string{first}, names...) {
		out, _ := runVM(t, link, n, "echo id=$AGENT_ID; hostname; date +%s; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; id -u")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 5 || lines[0] != "id="+n || lines[1] != n || lines[4] != "65534" {
			t.Errorf("%s: %q", n, out)
			continue
		}
		guest, _ := strconv.ParseInt(lines[2], 10, 64)
		if d := time.Now().Unix() - guest; d < -2 || d > 5 {
			t.Errorf("%s: the guest's clock is %d s off the host's", n, d)
		}
		if other, dup := randoms[lines[3]]; dup {
			t.Errorf("%s and %s drew the same random bytes %s", n, other, lines[3])
		}
		randoms[lines[3]] = n
		// Restored, not booted: the console holds no boot of its own.
		b, _ := os.ReadFile(rt.ConsolePath(n))
		if bytes.Contains(b, []byte("agentic-init: userspace up")) {
			t.Errorf("%s booted instead of being restored:\n%s", n, tail(b, 1500))
		}
	}
	sav, err := os.ReadFile(templates[0])
	if err != nil {
		t.Fatal(err)
	}
	for n, s := range secrets {
		if bytes.Contains(sav, []byte(s)) {
			t.Errorf("the template holds %s's secret", n)
		}
	}

	// A clone stopped and started boots, as itself.
	if err := rt.Stop(ctx, first); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitReady(t, link, first, false)
	if err := rt.Start(ctx, first); err != nil {
		t.Fatalf("Start: %v", err)
	}
	waitReady(t, link, first, true)
	if out, _ := runVM(t, link, first, "echo id=$AGENT_ID; hostname"); out != "id="+first+"\n"+first+"\n" {
		t.Errorf("the cold-booted clone: %q", out)
	}

	// A restarted server recovers the clones and their relays.
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	waitReady(t, link, names[0], false)
	rt2, err := libvirt.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt2.Close() })
	rec, err := rt2.Recover(ctx)
	if err != nil || len(rec) != 3 {
		t.Fatalf("Recover: %+v, %v", rec, err)
	}
	for _, n := range names {
		waitReady(t, link, n, true)
		runVM(t, link, n, "echo after-recover")
	}
	for _, n := range append([]string{first}, names...) {
		if err := rt2.Destroy(ctx, n); err != nil {
			t.Errorf("Destroy %s: %v", n, err)
		}
		if left := libvirtLeftovers(rt2, lv)(t, n); len(left) > 0 {
			t.Errorf("Destroy %s left %v", n, left)
		}
	}
	doms, _, _ := lv.ConnectListAllDomains(1, 0)
	for _, d := range doms {
		if strings.HasPrefix(d.Name, "agentic-tmpl-") {
			t.Errorf("a template guest is still there: %s", d.Name)
		}
	}
}

// TestLibvirtRestoresEveryVMWhenAsked (RestoreAll): a VM outside any pool
// is not kept waiting for a template: the first boots and the template is
// made meanwhile; the next is restored.
func TestLibvirtRestoresEveryVMWhenAsked(t *testing.T) {
	_, link, cfg, lv := libvirtQEMU(t)
	cfg.RestoreAll = true
	rt, err := libvirt.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	ctx := context.Background()
	suffix := cfg.Owner[len(cfg.Owner)-6:]
	create := func(name string) {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		spec := ports.EnvironmentSpec{Name: name, Agent: link.Bootstrap}
		spec.Agent.ID, spec.Agent.Secret = name, hex.EncodeToString(b)
		if err := link.Credentials.Put(name, spec.Agent.Secret); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rt.Destroy(context.Background(), name) })
		start := time.Now()
		if _, err := rt.Provision(ctx, spec); err != nil {
			t.Fatalf("Provision %s: %v", name, err)
		}
		waitReady(t, link, name, true)
		t.Logf("TIMING %s: agent ready %s", name, time.Since(start).Round(time.Millisecond))
		if out, _ := runVM(t, link, name, "hostname"); out != name+"\n" {
			t.Errorf("%s: hostname %q", name, out)
		}
	}
	booted, restored := "all-a-"+suffix, "all-b-"+suffix
	create(booted)
	// A Recover while the template is being made (a create can come in
	// before the server's Recover ran) cleans up after crashed processes,
	// not after this one: the template still comes.
	if _, err := rt.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(rt.ConsolePath(booted)); !bytes.Contains(b, []byte("agentic-init: userspace up")) {
		t.Errorf("the first VM did not boot:\n%s", tail(b, 1500))
	}
	for deadline := time.Now().Add(libvirtBootTimeout); ; time.Sleep(100 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(cfg.StateDir, ".templates", "*.sav")); len(m) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no template was made in the background")
		}
	}
	create(restored)
	if b, _ := os.ReadFile(rt.ConsolePath(restored)); bytes.Contains(b, []byte("agentic-init: userspace up")) {
		t.Errorf("the second VM booted instead of being restored:\n%s", tail(b, 1500))
	}
	for _, n := range []string{booted, restored} {
		if err := rt.Destroy(ctx, n); err != nil {
			t.Errorf("Destroy %s: %v", n, err)
		}
		if left := libvirtLeftovers(rt, lv)(t, n); len(left) > 0 {
			t.Errorf("Destroy %s left %v", n, left)
		}
	}
}
