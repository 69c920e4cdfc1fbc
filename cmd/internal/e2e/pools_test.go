package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/docker"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// waitPool waits until the pool has idle members, returning it.
func waitPool(t *testing.T, s *harness.Server, name string, idle int, d time.Duration) restapi.Pool {
	t.Helper()
	var p restapi.Pool
	eventually(t, d, name+" with idle members", func() bool {
		got, err := s.Client().GetPoolWithResponse(context.Background(), name)
		if err != nil || got.JSON200 == nil {
			return false
		}
		p = *got.JSON200
		return p.Idle == idle && len(p.Members) == idle
	})
	return p
}

func memberNames(p restapi.Pool) []string {
	var out []string
	for _, m := range p.Members {
		out = append(out, m.Name)
	}
	return out
}

// hostEnvSecret reads the secret the host runtime gave an environment's
// agent at its start, as someone with the server's files would.
func hostEnvSecret(t *testing.T, dataDir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "host-envs", name, "env.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Secret string }
	if err := json.Unmarshal(b, &rec); err != nil || rec.Secret == "" {
		t.Fatalf("env.json of %s: %v", name, err)
	}
	return rec.Secret
}

// A warm pool on the host runtime through the real server and agents:
// members come up idle and hidden, a matching create takes one ready under
// the caller's name (the agent renamed, its commands see the new id, the
// member's credential revoked), the pool refills, a killed server finds
// the taken environment and the idle members again, a member is used once,
// and bad definitions are refused.
func TestWarmPoolOnTheHostRuntime(t *testing.T) {
	dataDir := t.TempDir()
	// As a root server runs them by default: as another user, whose temp
	// dir is root's (a rename once failed to be kept there).
	s := startServer(t, 0, dataDir, "AGENTIC_POOLS=warm=host:2", "AGENTIC_HOST_USER=agentic-host")
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", "mine") })

	before := waitPool(t, s, "warm", 2, 60*time.Second)
	if envs, _ := s.Client().ListEnvironmentsWithResponse(context.Background(), nil); envs.JSON200 == nil || len(envs.JSON200.Environments) != 0 {
		t.Fatalf("idle members are listed as environments: %s", envs.Body)
	}
	for _, m := range before.Members {
		if got, _ := s.Client().GetEnvironmentWithResponse(context.Background(), m.Name); got.StatusCode() != 404 {
			t.Fatalf("an idle member is reachable as an environment: %d %s", got.StatusCode(), got.Body)
		}
		// Nobody's commands or files reach a member before it is taken:
		// whoever takes it gets it as it was made.
		exe, err := s.Client().ExecCommandWithResponse(context.Background(), m.Name, restapi.ExecRequest{Command: "touch", Args: ptr([]string{"planted"})})
		if err != nil || exe.StatusCode() != 409 || !strings.Contains(string(exe.Body), "agent_reserved") {
			t.Fatalf("exec on an idle member: %v %d %s", err, exe.StatusCode(), exe.Body)
		}
		if _, errOut, code := ctl(t, s.RESTURL, s.Token, "ls", m.Name+":/"); code == 0 || !strings.Contains(errOut, "agent_reserved") {
			t.Fatalf("ls on an idle member: %d %q", code, errOut)
		}
	}

	out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "host", "mine")
	if code != 0 || !strings.Contains(out, "mine: ready") || !strings.Contains(errOut, "taken") {
		t.Fatalf("create from the pool: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	got, err := s.Client().GetEnvironmentWithResponse(context.Background(), "mine")
	if err != nil || got.JSON200 == nil || got.JSON200.State != restapi.EnvReady || got.JSON200.AgentId != "mine" {
		t.Fatalf("the taken environment: %v %s", err, got.Body)
	}
	var taken string
	for _, ev := range got.JSON200.Events {
		if ev.Step == "taken" && ev.Message != nil {
			for _, m := range memberNames(before) {
				if strings.Contains(*ev.Message, m) {
					taken = m
				}
			}
		}
	}
	if taken == "" {
		t.Fatalf("no taken event naming a member of %v: %+v", memberNames(before), got.JSON200.Events)
	}
	res := execOK(t, s, "mine", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "echo id=$AGENT_ID"})})
	if strings.TrimSpace(res.Stdout) != "id=mine" {
		t.Fatalf("the renamed agent's command sees %q", res.Stdout)
	}
	// The member's own identity is gone: not an agent any more, and its
	// credential (which its environment's files hold) no longer admits it.
	eventually(t, patience, "the member's agent forgotten", func() bool {
		a, _ := s.Client().GetAgentWithResponse(context.Background(), taken)
		return a != nil && a.StatusCode() == 404
	})
	if err := connectAs(t, s, taken, hostEnvSecret(t, dataDir, taken)); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("the member's old credential: %v, want unauthenticated", err)
	}

	// Its agent restarted (stop, start) comes back under the caller's
	// name: the rename is kept where the agent's user can write.
	stopAndStart(t, s, "mine")

	// The pool refills with new members; the hit is counted.
	after := waitPool(t, s, "warm", 2, 60*time.Second)
	if slices.Contains(memberNames(after), taken) || after.Hits != 1 || after.Misses != 0 {
		t.Fatalf("after the take: %+v", after)
	}
	metrics := readMetrics(t, s.RESTURL)
	for _, want := range []string{`agentic_pool_hits_total{pool="warm"} 1`, `agentic_pool_size{pool="warm"} 2`, `agentic_pool_refill_seconds_count{pool="warm"}`} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("no %s in /metrics:\n%s", want, metrics)
		}
	}
	out, _, _ = ctl(t, s.RESTURL, s.Token, "pool", "list")
	if !strings.Contains(out, "warm") || !strings.Contains(out, "host") {
		t.Fatalf("pool list: %q", out)
	}

	// A member whose agent dies is replaced.
	dead := after.Members[0].Name
	pid, err := os.ReadFile(filepath.Join(dataDir, "host-envs", dead, "agent.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("kill", "-KILL", strings.TrimSpace(string(pid))).CombinedOutput(); err != nil {
		t.Fatalf("kill %s: %v %s", pid, err, out)
	}
	eventually(t, patience, "the dead member replaced", func() bool {
		got, err := s.Client().GetPoolWithResponse(context.Background(), "warm")
		return err == nil && got.JSON200 != nil && got.JSON200.Idle == 2 && !slices.Contains(memberNames(*got.JSON200), dead)
	})
	after = waitPool(t, s, "warm", 2, 10*time.Second)

	// Killed and restarted: the taken environment is the caller's still,
	// the idle members are the same ones, idle again.
	s.Kill()
	s2 := restart(t, s)
	waitEnvState(t, s2.Client(), "mine", restapi.EnvReady)
	recovered := waitPool(t, s2, "warm", 2, 60*time.Second)
	if !slices.Equal(memberNames(recovered), memberNames(after)) {
		t.Fatalf("members after the restart %v, before %v", memberNames(recovered), memberNames(after))
	}
	res = execOK(t, s2, "mine", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "echo id=$AGENT_ID"})})
	if strings.TrimSpace(res.Stdout) != "id=mine" {
		t.Fatalf("after the restart the command sees %q", res.Stdout)
	}

	// Used once: deleting the caller's environment destroys it; the
	// pool's members are not touched.
	if out, errOut, code := ctl(t, s2.RESTURL, s2.Token, "env", "rm", "mine"); code != 0 {
		t.Fatalf("rm: %q %q", out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "host-envs", taken)); !os.IsNotExist(err) {
		t.Fatalf("the taken member's environment is still on the runtime: %v", err)
	}
	if p := waitPool(t, s2, "warm", 2, 30*time.Second); !slices.Equal(memberNames(p), memberNames(after)) {
		t.Fatalf("deleting a taken environment changed the pool: %v", memberNames(p))
	}

	// Bad definitions are refused with their reasons.
	for _, c := range []struct {
		name string
		body restapi.PoolRequest
		code string
	}{
		{"x", restapi.PoolRequest{Runtime: "docker", Size: 1}, "unknown_runtime"},
		{"x", restapi.PoolRequest{Runtime: "host", Size: 65}, "invalid_request"},
		{"x", restapi.PoolRequest{Runtime: "host", Size: -1}, "invalid_request"},
		{"bad..name/", restapi.PoolRequest{Runtime: "host", Size: 1}, ""},
		{"x", restapi.PoolRequest{Runtime: "host", Size: 1, Spec: &restapi.PoolSpec{Resources: &restapi.Resources{MemoryMb: ptr(256)}}}, "invalid_request"},
	} {
		r, err := s2.Client().PutPoolWithResponse(context.Background(), c.name, c.body)
		if err != nil || r.StatusCode() < 400 || r.StatusCode() >= 500 || (c.code != "" && !strings.Contains(string(r.Body), c.code)) {
			t.Fatalf("put %q %+v: %v %d %s", c.name, c.body, err, r.StatusCode(), r.Body)
		}
	}
	if r, _ := s2.Client().GetPoolWithResponse(context.Background(), "x"); r.StatusCode() != 404 || !strings.Contains(string(r.Body), "pool_not_found") {
		t.Fatalf("a refused pool exists: %d %s", r.StatusCode(), r.Body)
	}

	// Shrunk to none, then deleted: the members go.
	if _, errOut, code := ctl(t, s2.RESTURL, s2.Token, "pool", "put", "--runtime", "host", "--size", "0", "warm"); code != 0 {
		t.Fatalf("pool put: %q", errOut)
	}
	waitPool(t, s2, "warm", 0, 30*time.Second)
	for _, m := range memberNames(after) {
		if _, err := os.Stat(filepath.Join(dataDir, "host-envs", m)); !os.IsNotExist(err) {
			t.Fatalf("a dropped member %s is still on the runtime: %v", m, err)
		}
	}
	if out, errOut, code := ctl(t, s2.RESTURL, s2.Token, "pool", "rm", "warm"); code != 0 || !strings.Contains(out, "deleted") {
		t.Fatalf("pool rm: %q %q", out, errOut)
	}
	if r, _ := s2.Client().GetPoolWithResponse(context.Background(), "warm"); r.StatusCode() != 404 {
		t.Fatalf("after rm: %d %s", r.StatusCode(), r.Body)
	}
	// No pool: a create provisions as always.
	out, errOut, code = ctl(t, s2.RESTURL, s2.Token, "env", "create", "--runtime", "host", "mine")
	if code != 0 || strings.Contains(errOut, "taken") {
		t.Fatalf("create without a pool: %d %q %q", code, out, errOut)
	}
}

// A warm pool of containers: a take answers ready under the caller's name;
// the renamed identity is kept where the agent alone can read it, so the
// container stopped and started comes back as the caller's agent; a
// proxy-network create does not match a pool of the default network.
func TestWarmPoolInDocker(t *testing.T) {
	host := privateDockerd(t)
	s := startServer(t, 0, t.TempDir(), "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=docker", "AGENTIC_POOLS=dk=docker:1")
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", "dk-mine") })
	waitPool(t, s, "dk", 1, 2*time.Minute)

	out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "docker", "dk-mine")
	if code != 0 || !strings.Contains(out, "dk-mine: ready") || !strings.Contains(errOut, "taken") {
		t.Fatalf("create from the pool: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	run := func(script string) restapi.ExecResult {
		return execOK(t, s, "dk-mine", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", script})})
	}
	if got := run("echo id=$AGENT_ID; id -u"); got.Stdout != "id=dk-mine\n65534\n" {
		t.Fatalf("the taken container's command: %q", got.Stdout)
	}
	// The workload (nobody) cannot read the identity the agent keeps.
	if got := run("cat " + docker.IdentityPath + " 2>&1; echo rc=$?"); strings.Contains(got.Stdout, "AGENT_SECRET") || !strings.Contains(got.Stdout, "rc=1") {
		t.Fatalf("the workload reads the agent's identity: %q", got.Stdout)
	}
	// Stopped and started: the agent comes back under the caller's name.
	stopAndStart(t, s, "dk-mine")
	if got := run("echo id=$AGENT_ID"); got.Stdout != "id=dk-mine\n" {
		t.Fatalf("after a restart of the container: %q", got.Stdout)
	}
	waitPool(t, s, "dk", 1, 2*time.Minute)

	// Another spec is not the pool's: provisioned, a miss of no pool.
	out, errOut, code = ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "docker", "--memory", "128", "dk-other")
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", "dk-other") })
	if code != 0 || strings.Contains(errOut, "taken") {
		t.Fatalf("create with another spec: %d %q %q", code, out, errOut)
	}
	if p := waitPool(t, s, "dk", 1, 10*time.Second); p.Hits != 1 || p.Misses != 0 {
		t.Fatalf("pool after a create of another spec: %+v", p)
	}
}

// A warm pool of VMs under TCG: a take answers ready at once, its agent
// renamed over the virtio-serial link, and the pool boots a replacement.
func TestWarmPoolInLibvirt(t *testing.T) {
	s := startLibvirtServer(t, "AGENTIC_POOLS=vms=libvirt:1")
	name := fmt.Sprintf("vm-pooled-%d", time.Now().UnixNano()%100000)
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", name) })
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "pool", "rm", "vms") })
	before := waitPool(t, s, "vms", 1, 3*time.Minute)

	out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "libvirt", name)
	if code != 0 || !strings.Contains(out, name+": ready") || !strings.Contains(errOut, "taken") {
		t.Fatalf("create from the pool: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	res := execOK(t, s, name, restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "echo id=$AGENT_ID; id -u; hostname"})})
	if res.Stdout != "id="+name+"\n65534\n"+name+"\n" {
		t.Fatalf("the taken VM's command: %q", res.Stdout)
	}
	after := waitPool(t, s, "vms", 1, 3*time.Minute)
	if after.Members[0].Name == before.Members[0].Name || after.Hits != 1 {
		t.Fatalf("after the take: %+v", after)
	}
}

// A task whose environment matches a pool runs in a member taken for it.
func TestTaskTakesAPoolMember(t *testing.T) {
	e := newTaskEnv(t, "AGENTIC_POOLS=tasks=host:1")
	waitPool(t, e.s, "tasks", 1, time.Minute)
	tk := e.run(`
version: "1"
kind: Task
metadata: {name: pooled}
repository: {url: ` + e.repo + `, branch: main}
claude: {prompt: happy, model: fake, max_turns: 5}
environment: {runtime: host}
lifecycle: {timeout: 5m}
`)
	if tk.State != "completed" {
		t.Fatalf("task: %+v (reason %v, error %v)", tk, deref(tk.Reason), deref(tk.Error))
	}
	p := waitPool(t, e.s, "tasks", 1, time.Minute)
	if p.Hits != 1 || p.Misses != 0 {
		t.Fatalf("the task's environment was not taken from the pool: %+v", p)
	}
}

// stopAndStart stops an environment and starts it again, waiting for each.
func stopAndStart(t *testing.T, s *harness.Server, name string) {
	t.Helper()
	if _, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "stop", name); code != 0 {
		t.Fatalf("stop %s: %q", name, errOut)
	}
	waitEnvState(t, s.Client(), name, restapi.EnvStopped)
	if _, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "start", name); code != 0 {
		t.Fatalf("start %s: %q", name, errOut)
	}
	waitEnvState(t, s.Client(), name, restapi.EnvReady)
}
