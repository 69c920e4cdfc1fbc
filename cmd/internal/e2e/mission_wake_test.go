package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A mission is work aimed at an agent like any other (issue 32): one that
// names the agent of a hibernated container wakes it, then runs there, with
// its lifecycle events as the contract says (assigned, started, …,
// completed; the fake aiwg serve checks their order at the end). One that
// names no agent goes to an asleep agent only when no awake one fits. One
// whose wake fails ends as mission.failed with reason wake_failed and why,
// instead of waiting.
func TestAMissionWakesTheHibernatedEnvironmentItIsAimedAt(t *testing.T) {
	host := privateDockerd(t)
	e := newContract(t, copts{agents: 1, env: []string{"DOCKER_HOST=" + host, "AGENTIC_RUNTIMES=docker"}})
	s := e.s()
	name := fmt.Sprintf("mw-%d", time.Now().UnixNano()%100000)
	createReady(t, s, "docker", name, "")
	execOut(t, s, name, "echo kept-before-sleep > /tmp/mark")

	hibernated(t, s, name)
	e.dispatch("m-named", "cat /tmp/mark; echo mission-ran", "executor_filter", map[string]any{"agent_id": name})
	end := e.waitEnd("m-named", patience)
	if end.Event != evCompleted {
		t.Fatalf("the mission named a hibernated environment's agent and ended %s: %v", end.Event, end.Data)
	}
	if sum := fmt.Sprint(end.Data["summary"]); !strings.Contains(sum, "kept-before-sleep") || !strings.Contains(sum, "mission-ran") {
		t.Fatalf("the mission did not run in the woken container: summary %q", sum)
	}
	if got := evNames(e.events("m-named")); len(got) < 3 || got[0] != "assigned" || got[1] != "started" {
		t.Fatalf("events %v, want assigned, started, …, completed", got)
	}
	wokeBy(t, s, name, "exec")

	// No agent named, only a container will do, and the only container
	// sleeps: it is woken rather than the mission refused. The host agent
	// is awake and takes a mission that any agent can run.
	hibernated(t, s, name)
	e.dispatch("m-any", "echo on-any")
	if end := e.waitEnd("m-any", patience); end.Event != evCompleted {
		t.Fatalf("m-any ended %s: %v", end.Event, end.Data)
	}
	if st, env, _ := envCall(t, s, "GET", name, "", ""); st != 200 || env.State != "hibernated" {
		t.Fatalf("a mission any awake agent could run woke %s: %d %s", name, st, env.State)
	}
	e.dispatch("m-container", "echo in-a-container", "executor_filter", map[string]any{"capabilities": []string{"isolation:container"}})
	if end := e.waitEnd("m-container", patience); end.Event != evCompleted || !strings.Contains(fmt.Sprint(end.Data["summary"]), "in-a-container") {
		t.Fatalf("m-container ended %s: %v", end.Event, end.Data)
	}
	wokeBy(t, s, name, "exec")

	// The saved container is gone behind the server's back: the wake fails,
	// and so does the mission, saying why.
	hibernated(t, s, name)
	out, err := exec.Command("docker", "-H", host, "ps", "-aq", "--filter", "label=io.agentic-sandbox.env="+name).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("the hibernated container: %v %s", err, out)
	}
	if out, err := exec.Command("docker", append([]string{"-H", host, "rm", "-f"}, strings.Fields(string(out))...)...).CombinedOutput(); err != nil {
		t.Fatalf("docker rm: %v %s", err, out)
	}
	e.dispatch("m-lost", "echo never", "executor_filter", map[string]any{"agent_id": name})
	end = e.waitEnd("m-lost", patience)
	if end.Event != evFailed || end.Data["reason"] != "wake_failed" || !strings.Contains(fmt.Sprint(end.Data["error"]), "could not be woken") {
		t.Fatalf("a mission whose wake failed ended %s: %v", end.Event, end.Data)
	}
	if got := evNames(e.events("m-lost")); strings.Join(got, ",") != "assigned,failed" {
		t.Fatalf("events of the mission whose wake failed: %v", got)
	}
	if env := waitEnv(t, s, name, "failed"); env.Error == "" {
		t.Fatalf("the environment whose wake failed says no reason: %+v", env)
	}
}
