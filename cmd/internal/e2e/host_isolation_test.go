package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// These tests try, from inside a command on a root server's host agents,
// what an attacker would: each attack must find nothing.

// defaultHostUsers undoes the harness's AGENTIC_HOST_USER=root: the
// server's own default, a user of its own for each host agent.
const defaultHostUsers = "AGENTIC_HOST_USER="

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("host agents have users of their own only under a root server")
	}
}

// createHostEnv provisions a host environment and waits for its agent.
func createHostEnv(t *testing.T, s *harness.Server, name string) {
	t.Helper()
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "host", name); code != 0 {
		t.Fatalf("create %s: %d %q %q", name, code, out, errOut)
	}
}

// shell runs script with sh on agent and returns its stdout and stderr.
func shell(t *testing.T, s *harness.Server, agent, script string) (string, string) {
	t.Helper()
	r := execOK(t, s, agent, restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", script})})
	return string(decoded(t, r, r.Stdout)), string(decoded(t, r, r.Stderr))
}

// pidsWhere lists the live processes whose /proc/<pid>/cmdline is cmdline
// (NUL-terminated arguments).
func pidsWhere(cmdline string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && string(b) == cmdline && harness.Alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// processesOfUID lists the live processes whose real uid is uid.
func processesOfUID(uid int) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil || !harness.Alive(pid) {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Uid:" && f[1] == strconv.Itoa(uid) {
				cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				out = append(out, fmt.Sprintf("%d %s", pid, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
			}
		}
	}
	return out
}

func envHome(dataDir, name string) string {
	return hostsup.UserHome(hostsup.AgentTmpDir(filepath.Join(dataDir, "host-envs", name)))
}

func agentPID(t *testing.T, pidFile string) int {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// Two host environments and a supervisor agent: from one, nothing of the
// other is reachable — its tmux server, its commands' /proc files, its
// agent, its home — nor its own agent, nor the data dir.
func TestHostEnvironmentsCannotReachEachOther(t *testing.T) {
	needRoot(t)
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir, defaultHostUsers)
	createHostEnv(t, s, "iso-a")
	createHostEnv(t, s, "iso-b")
	mark := uniqueSleep()

	bg := restapi.SessionBackground
	createSession(t, s, "iso-b", restapi.CreateSessionRequest{Type: &bg, Name: ptr("keys"), Command: "sh",
		Env:  ptr(map[string]string{"ANTHROPIC_API_KEY": "sk-ant-victim-b"}),
		Args: ptr([]string{"-c", "echo private > \"$HOME/secret.txt\"; exec sleep " + mark})})
	var victim int
	eventually(t, patience, "iso-b's command to run", func() bool {
		p := pidsWhere("sleep\x00" + mark + "\x00")
		if len(p) == 1 {
			victim = p[0]
		}
		return victim != 0
	})
	// The attack is not vacuous: the key is there for whoever may read it.
	if env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", victim)); !bytes.Contains(env, []byte("sk-ant-victim-b")) {
		t.Fatalf("iso-b's command has no key to steal: %q", env)
	}
	bHome := envHome(dataDir, "iso-b")
	eventually(t, patience, "iso-b's file", func() bool { _, err := os.Stat(filepath.Join(bHome, "secret.txt")); return err == nil })
	bOut, _ := shell(t, s, "iso-b", "id -u")
	bUID := strings.TrimSpace(bOut)
	aOut, _ := shell(t, s, "iso-a", "id -u")
	hOut, _ := shell(t, s, "host-01", "id -u")
	if uids := map[string]bool{strings.TrimSpace(aOut): true, bUID: true, strings.TrimSpace(hOut): true}; len(uids) != 3 || uids["0"] {
		t.Fatalf("the agents' commands do not run as users of their own: iso-a %s, iso-b %s, host-01 %s", aOut, bUID, hOut)
	}
	bAgent := agentPID(t, filepath.Join(dataDir, "host-envs", "iso-b", "agent.pid"))
	hostAgent := agentPID(t, filepath.Join(dataDir, "host-agents", "host-01.pid"))

	attack := fmt.Sprintf(`
kill -0 %[1]d 2>/dev/null && echo SIGNALLED_OTHER_AGENT
kill -0 %[2]d 2>/dev/null && echo SIGNALLED_OTHER_COMMAND
kill -0 %[3]d 2>/dev/null && echo SIGNALLED_SUPERVISOR_AGENT
kill -0 $PPID 2>/dev/null && echo SIGNALLED_OWN_AGENT
tr '\0' '\n' < /proc/%[2]d/environ 2>/dev/null | grep -q sk-ant && echo READ_OTHER_ENVIRON
tr '\0' '\n' < /proc/%[1]d/environ 2>/dev/null | grep -q . && echo READ_OTHER_AGENT_ENVIRON
tr '\0' '\n' < /proc/$PPID/environ 2>/dev/null | grep -q . && echo READ_OWN_AGENT_ENVIRON
ls /proc/$PPID/fd/ 2>/dev/null | grep -q . && echo LISTED_OWN_AGENT_FDS
head -c1 /proc/$PPID/mem 2>/dev/null && echo READ_OWN_AGENT_MEMORY
cat %[4]s/secret.txt 2>/dev/null && echo READ_OTHER_HOME
ls %[4]s 2>/dev/null && echo LISTED_OTHER_HOME
tmux -S %[4]s/tmux-%[5]s/default list-sessions 2>/dev/null && echo USED_OTHER_TMUX
tmux -S %[4]s/tmux-%[5]s/default new-window 'touch /tmp/iso-owned' 2>/dev/null && echo RAN_IN_OTHER_TMUX
ls %[6]s 2>/dev/null && echo LISTED_DATA_DIR
echo ATTACK_DONE
`, bAgent, victim, hostAgent, bHome, bUID, dataDir)
	out, errOut := shell(t, s, "iso-a", attack)
	if strings.TrimSpace(out) != "ATTACK_DONE" {
		t.Fatalf("from iso-a the attack reached something:\n%s\nstderr: %s", out, errOut)
	}
	// The same from a supervisor's host agent.
	out, errOut = shell(t, s, "host-01", attack)
	if strings.TrimSpace(out) != "ATTACK_DONE" {
		t.Fatalf("from host-01 the attack reached something:\n%s\nstderr: %s", out, errOut)
	}
	if _, err := os.Stat("/tmp/iso-owned"); err == nil {
		os.Remove("/tmp/iso-owned")
		t.Fatal("a window ran in iso-b's tmux server")
	}
	if !harness.Alive(victim) || !harness.Alive(bAgent) || !harness.Alive(hostAgent) {
		t.Fatal("a victim process died")
	}
}

// The agent's secret never passes through an environment or a file a
// workload may read: a workload kept in tmux (it outlives its agent) reads
// every /proc file of every agent process it can while its agent is
// restarted a hundred times, and finds nothing.
func TestAgentSecretUnreadableAcrossRestarts(t *testing.T) {
	needRoot(t)
	dataDir := t.TempDir()
	s := startServer(t, 0, dataDir, defaultHostUsers)
	createHostEnv(t, s, "race")
	bg := restapi.SessionBackground
	// Each look at an agent is counted; whatever is read goes to loot.
	thief := `cd "$HOME"; while :; do
for d in /proc/[0-9]*; do
  c=; read c < $d/comm 2>/dev/null
  if [ "$c" = agentic-agent ]; then
    echo "$d" >> tries
    cat $d/environ >> loot 2>/dev/null
    for f in $d/fd/*; do timeout 1 head -c 4096 "$f" >> loot 2>/dev/null; done
    head -c 4096 $d/mem >> loot 2>/dev/null
  fi
done
done`
	sess := createSession(t, s, "race", restapi.CreateSessionRequest{Type: &bg, Name: ptr("thief"), Command: "sh", Args: ptr([]string{"-c", thief})})
	home := envHome(dataDir, "race")
	triesLog := func() []byte {
		b, _ := os.ReadFile(filepath.Join(home, "tries"))
		return b
	}
	tries := func() int { return bytes.Count(triesLog(), []byte("\n")) }
	eventually(t, patience, "the thief to look at agents", func() bool { return tries() > 0 })
	secret := hostEnvSecret(t, dataDir, "race")
	ctx, cancel := context.WithTimeout(context.Background(), 10*patience)
	defer cancel()
	const restarts = 100
	for i := range restarts {
		// A crash, as the thief's own attack once caused; the runtime's
		// Start brings up a fresh process with the same secret.
		pid := agentPID(t, filepath.Join(dataDir, "host-envs", "race", "agent.pid"))
		if err := syscallKill(pid); err != nil {
			log, _ := os.ReadFile(filepath.Join(dataDir, "host-envs", "race", "agent.log"))
			t.Fatalf("restart %d: kill %d: %v; the agent's log:\n%s", i, pid, err, log)
		}
		eventually(t, patience, "the agent to end", func() bool { return !harness.Alive(pid) })
		r, err := s.Client().StartEnvironmentWithResponse(ctx, "race")
		if err != nil || r.StatusCode() >= 300 {
			t.Fatalf("start %d: %v %s", i, err, r.Body)
		}
		// Every fresh agent process is attacked at least once.
		fresh := agentPID(t, filepath.Join(dataDir, "host-envs", "race", "agent.pid"))
		eventually(t, patience, "the thief to look at the fresh agent", func() bool {
			return bytes.Contains(triesLog(), fmt.Appendf(nil, "/proc/%d\n", fresh))
		})
	}
	if st := sessionState(t, s, sess.SessionId); st != restapi.SessionStateSessionRunning {
		t.Fatalf("the thief's session, kept in tmux, did not outlive its agents: %s", st)
	}
	loot, _ := os.ReadFile(filepath.Join(home, "loot"))
	if bytes.Contains(loot, []byte(secret)) || bytes.Contains(loot, []byte("AGENT_SECRET")) {
		t.Fatalf("the thief read the agent's secret (%d bytes of loot)", len(loot))
	}
	t.Logf("%d looks at agent processes over %d restarts, %d bytes read, no secret", tries(), restarts, len(loot))
}

// Deleting a host environment ends every process of its users: its tmux
// server and sessions, and what its commands left running in the background.
func TestDeletedHostEnvironmentLeavesNoProcess(t *testing.T) {
	needRoot(t)
	dataDir := t.TempDir()
	s := startServer(t, 0, dataDir, defaultHostUsers)
	createHostEnv(t, s, "gone")
	bg := restapi.SessionBackground
	kept, nohup, setsid := uniqueSleep(), uniqueSleep(), uniqueSleep()
	createSession(t, s, "gone", restapi.CreateSessionRequest{Type: &bg, Name: ptr("kept"), Command: "sleep", Args: ptr([]string{kept})})
	out, _ := shell(t, s, "gone", "nohup sleep "+nohup+" >/dev/null 2>&1 & setsid sleep "+setsid+" >/dev/null 2>&1 & id -u")
	uid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || uid == 0 {
		t.Fatalf("id -u: %q", out)
	}
	eventually(t, patience, "the environment's processes to run", func() bool {
		return len(pidsWhere("sleep\x00"+kept+"\x00")) == 1 && len(pidsWhere("sleep\x00"+nohup+"\x00")) == 1 && len(pidsWhere("sleep\x00"+setsid+"\x00")) == 1
	})
	if _, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "rm", "gone"); code != 0 {
		t.Fatalf("rm: %q", errOut)
	}
	// Delete answered once they were ended: nothing is left at once.
	if left := processesOfUID(uid); len(left) > 0 {
		t.Fatalf("processes of the deleted environment's user %d are left: %q", uid, left)
	}
}

// An agent killed while its command runs takes the command with it: what
// the command would have done after, it never does. Its environment's
// runtime says failed, so the exec answers 502 agent_gone at once (not
// after the disconnect grace), and the environment reads failed.
func TestAgentKilledMidCommandLeavesNoSideEffect(t *testing.T) {
	needRoot(t)
	dataDir := t.TempDir()
	s := startServer(t, 0, dataDir, defaultHostUsers)
	createHostEnv(t, s, "mid")
	home := envHome(dataDir, "mid")
	nap := "4." + uniqueSleep()
	type answer struct {
		resp *restapi.ExecCommandResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		r, err := s.Client().ExecCommandWithResponse(ctx, "mid", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c",
			`(sleep ` + nap + `; touch "$HOME/late-child") & sleep ` + nap + `; touch "$HOME/late-parent"`})})
		done <- answer{r, err}
	}()
	var sleepers []int
	eventually(t, patience, "the command to run", func() bool {
		sleepers = pidsWhere("sleep\x00" + nap + "\x00")
		return len(sleepers) == 2
	})
	uid, err := procUID(sleepers[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := syscallKill(agentPID(t, filepath.Join(dataDir, "host-envs", "mid", "agent.pid"))); err != nil {
		t.Fatal(err)
	}
	// Every process of the command is gone, so neither file can come.
	eventually(t, patience, "the command's processes to end with their agent", func() bool { return len(processesOfUID(uid)) == 0 })
	a := testkit.Receive(t, patience, done, "the exec did not answer after its agent was killed")
	if a.err != nil {
		t.Fatalf("exec of the killed agent's command: %v", a.err)
	}
	if a.resp.StatusCode() != 502 || errorCode(a.resp.Body) != "agent_gone" {
		t.Fatalf("exec of the killed agent's command: %d %s, want 502 agent_gone", a.resp.StatusCode(), a.resp.Body)
	}
	if e := getEnv(t, s, "mid"); e.State != restapi.EnvFailed {
		t.Fatalf("mid after its agent was killed: %s, want failed", e.State)
	}
	for _, f := range []string{"late-child", "late-parent"} {
		if _, err := os.Stat(filepath.Join(home, f)); err == nil {
			t.Fatalf("%s was written after the agent died", f)
		}
	}
}

// uniqueSleep is a sleep argument no other process on the machine has.
func uniqueSleep() string { return strconv.Itoa(100000 + rand.IntN(900000)) }

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// procUID is the real uid of pid.
func procUID(pid int) (int, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Uid:" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("no Uid in /proc/%d/status", pid)
}

// A restarted server finds its host agents, running as users of their own
// (their /proc files root's, as they are undumpable), and adopts them
// instead of starting duplicates.
func TestHostAgentsWithTheirOwnUsersAreAdopted(t *testing.T) {
	needRoot(t)
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir, defaultHostUsers)
	createHostEnv(t, s, "kept")
	hostPID := agentPID(t, filepath.Join(dataDir, "host-agents", "host-01.pid"))
	envPID := agentPID(t, filepath.Join(dataDir, "host-envs", "kept", "agent.pid"))
	s.Kill()
	s2 := restart(t, s)
	waitAgents(t, s2, "host-01", "kept")
	out, _ := shell(t, s2, "kept", "id -un")
	if !strings.HasPrefix(out, "agentic-") {
		t.Fatalf("kept's commands run as %q", out)
	}
	if got := agentPID(t, filepath.Join(dataDir, "host-agents", "host-01.pid")); got != hostPID || !harness.Alive(hostPID) {
		t.Fatalf("host-01 was not adopted: pid %d, was %d", got, hostPID)
	}
	if got := agentPID(t, filepath.Join(dataDir, "host-envs", "kept", "agent.pid")); got != envPID || !harness.Alive(envPID) {
		t.Fatalf("kept's agent was not adopted: pid %d, was %d", got, envPID)
	}
	for _, id := range []string{"host-01", "kept"} {
		if n := len(pidsWhere(agentCmdline(dataDir, id))); n > 1 {
			t.Fatalf("%d agent processes for %s", n, id)
		}
	}
}

// agentCmdline is the command line the server starts agent id with.
func agentCmdline(dataDir, id string) string {
	key := filepath.Join(dataDir, "host-agents", id+".pid")
	if !strings.HasPrefix(id, "host-") {
		key = filepath.Join(dataDir, "host-envs", id)
	}
	return filepath.Join(hostsup.AgentTmpDir(key), "agentic-agent") + "\x00--id\x00" + id + "\x00"
}
