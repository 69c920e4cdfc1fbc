package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// procsWith lists the processes whose command line holds token.
func procsWith(token string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(token)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killProcsWith kills, with their process groups, the processes whose
// command line holds token: a command whose agent was killed outlives it.
func killProcsWith(token string) {
	for _, pid := range procsWith(token) {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// A command whose agent process is killed (SIGKILL; the host supervisor
// starts a new one, which does not know it) is lost: the waiting exec
// answers 502 agent_gone, and so does GET on a background command, not a
// result with exit code -1.
func TestCommandsOfAKilledAgentAnswerAgentGone(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir)
	token := fmt.Sprintf("agent-gone-%d", time.Now().UnixNano())
	t.Cleanup(func() { killProcsWith(token) })
	c := s.Client()

	type answer struct {
		resp *restapi.ExecCommandResponse
		err  error
	}
	execDone := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*patience)
		defer cancel()
		r, err := c.ExecCommandWithResponse(ctx, "host-01", restapi.ExecRequest{
			Command: "sh", Args: ptr([]string{"-c", "sleep 600; : exec-" + token})})
		execDone <- answer{r, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*patience)
	defer cancel()
	bg, err := c.StartCommandWithResponse(ctx, "host-01", restapi.ExecRequest{
		Command: "sh", Args: ptr([]string{"-c", "echo started; sleep 600; : bg-" + token})})
	if err != nil || bg.JSON202 == nil {
		t.Fatalf("start: %v %s", err, bg.Body)
	}
	id := bg.JSON202.CommandId
	eventually(t, patience, "both commands run on the agent", func() bool {
		return len(procsWith("exec-"+token)) > 0 && len(procsWith("bg-"+token)) > 0
	})
	eventually(t, patience, "the background command's output", func() bool {
		r, err := c.GetCommandWithResponse(ctx, id, &restapi.GetCommandParams{WaitMs: ptr(1000)})
		return err == nil && r.JSON200 != nil && r.JSON200.Stdout == "started\n"
	})

	old := harness.HostAgentPIDs(dataDir)["host-01"]
	since := connectedAt(t, s, "host-01")
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	a := testkit.Receive(t, 3*patience, execDone, "the exec did not answer after its agent was killed")
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.resp.StatusCode() != 502 || errorCode(a.resp.Body) != "agent_gone" {
		t.Fatalf("exec of a killed agent's command: %d %s, want 502 agent_gone", a.resp.StatusCode(), a.resp.Body)
	}
	// The background command reads running until the new agent's report
	// says it is gone, then agent_gone: never a made-up exit.
	var last string
	eventually(t, patience, "GET of the background command answers agent_gone", func() bool {
		r, err := c.GetCommandWithResponse(ctx, id, &restapi.GetCommandParams{WaitMs: ptr(2000)})
		if err != nil {
			t.Fatal(err)
		}
		last = fmt.Sprintf("%d %s", r.StatusCode(), r.Body)
		switch {
		case r.StatusCode() == 502 && errorCode(r.Body) == "agent_gone":
			return true
		case r.JSON200 != nil && r.JSON200.State == restapi.CommandStateRunning:
			return false
		}
		t.Fatalf("GET of a killed agent's background command: %s, want running, then 502 agent_gone", last)
		return false
	})
	waitReconnected(t, s, "host-01", since)
}

// A background command outlives a restart of agentic-mgmt on its host
// agent: the restarted server adopts it from the agent's report under the
// same id, its status and new output read again, it is killed through
// REST, and its agent is no longer busy. An exec whose caller went with
// the restart is killed by the restarted server.
func TestBackgroundCommandSurvivesServerRestart(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir)
	token := fmt.Sprintf("survivor-%d", time.Now().UnixNano())
	t.Cleanup(func() { killProcsWith(token) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*patience)
	defer cancel()
	start, err := s.Client().StartCommandWithResponse(ctx, "host-01", restapi.ExecRequest{
		Command: "sh", Args: ptr([]string{"-c", "i=0; while :; do echo tick-$i; i=$((i+1)); sleep 0.2; done # " + token})})
	if err != nil || start.JSON202 == nil {
		t.Fatalf("start: %v %s", err, start.Body)
	}
	id := start.JSON202.CommandId
	eventually(t, patience, "ticks before the restart", func() bool {
		r, err := s.Client().GetCommandWithResponse(ctx, id, &restapi.GetCommandParams{WaitMs: ptr(1000)})
		return err == nil && r.JSON200 != nil && strings.Contains(r.JSON200.Stdout, "tick-3\n")
	})

	// An exec running when the server stops: its caller goes with it.
	go func() {
		_, _ = s.Client().ExecCommandWithResponse(ctx, "host-01", restapi.ExecRequest{
			Command: "sh", Args: ptr([]string{"-c", "sleep 600; : exec-" + token})})
	}()
	eventually(t, patience, "the exec runs on the agent", func() bool { return len(procsWith("exec-"+token)) > 0 })

	stop(t, s)
	s2 := restart(t, s)
	waitAgents(t, s2, "host-01")
	c := s2.Client()
	var st restapi.CommandStatus
	var last string
	eventually(t, patience, "the command readable on the restarted server", func() bool {
		r, err := c.GetCommandWithResponse(ctx, id, &restapi.GetCommandParams{WaitMs: ptr(1000)})
		if err != nil {
			t.Fatal(err)
		}
		last = fmt.Sprintf("%d %s", r.StatusCode(), r.Body)
		if r.JSON200 == nil {
			return false
		}
		st = *r.JSON200
		return true
	})
	if st.State != restapi.CommandStateRunning || st.CommandId != id || st.AgentId != "host-01" {
		t.Fatalf("after the restart: %s", last)
	}
	// New output comes, at the agent's offsets (past what the earlier
	// server held).
	eventually(t, patience, "new ticks after the restart", func() bool {
		r, err := c.GetCommandWithResponse(ctx, id, &restapi.GetCommandParams{WaitMs: ptr(1000)})
		if err != nil || r.JSON200 == nil {
			t.Fatalf("GET after the restart: %v %s", err, r.Body)
		}
		st = *r.JSON200
		return st.StdoutOffset > 0 && strings.Count(st.Stdout, "tick-") >= 3
	})
	eventually(t, patience, "the orphaned exec killed by the restarted server", func() bool { return len(procsWith("exec-"+token)) == 0 })
	eventually(t, patience, "the agent busy with the adopted command", func() bool { return agentStatus(t, s2, "host-01") == restapi.Busy })

	kill, err := c.KillCommandWithResponse(ctx, id)
	if err != nil || kill.JSON202 == nil {
		t.Fatalf("kill after the restart: %v %d %s", err, kill.StatusCode(), kill.Body)
	}
	eventually(t, patience, "the command ended by the kill", func() bool {
		r, err := c.GetCommandWithResponse(ctx, id, &restapi.GetCommandParams{WaitMs: ptr(2000), StdoutFrom: ptr(int64(1) << 60)})
		if err != nil || r.JSON200 == nil {
			t.Fatalf("GET after the kill: %v %s", err, r.Body)
		}
		st = *r.JSON200
		return st.State == restapi.CommandStateExited
	})
	// The agent's kill ends the group with SIGTERM, then SIGKILL.
	if st.Result == nil || st.Result.Success || st.Result.Signal == nil {
		t.Fatalf("result after the kill: %+v", st.Result)
	}
	eventually(t, patience, "the agent no longer busy", func() bool { return agentStatus(t, s2, "host-01") == restapi.Ready })
	if pids := procsWith(token); len(pids) > 0 {
		t.Fatalf("the killed command still runs: %v", pids)
	}
}
