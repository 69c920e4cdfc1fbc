package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// TestOutputWhileDisconnectedArrivesAfterReconnect cuts the agent's network
// in the middle of a command: the command goes on, and everything it printed
// reaches the server once the agent is back, once and in order.
func TestOutputWhileDisconnectedArrivesAfterReconnect(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 0, dataDir)
	proxy, _ := remoteAgent(t, dataDir, s.AgentURL, "remote-01")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := s.WaitAgents(ctx, "remote-01"); err != nil {
		t.Fatal(err)
	}
	c := s.Client()
	start, err := c.StartCommandWithResponse(ctx, "remote-01", restapi.ExecRequest{
		Command: "sh", Args: ptr([]string{"-c", "i=1; while [ $i -le 8 ]; do echo line$i; i=$((i+1)); sleep 1; done"}),
	})
	if err != nil || start.JSON202 == nil {
		t.Fatalf("start: %v %s", err, start.Body)
	}
	id := start.JSON202.CommandId
	for {
		r, err := c.GetCommandWithResponse(ctx, id, &restapi.GetCommandParams{WaitMs: ptr(2000)})
		if err != nil || r.JSON200 == nil {
			t.Fatalf("get: %v", err)
		}
		if strings.Contains(r.JSON200.Stdout, "line1") {
			break
		}
	}
	proxy.cut()
	deadline := time.Now().Add(10 * time.Second)
	for agentStatus(t, s, "remote-01") != restapi.Disconnected {
		if time.Now().After(deadline) {
			t.Fatalf("agent not seen as disconnected after the cut: %s", agentStatus(t, s, "remote-01"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	var final restapi.CommandStatus
	for {
		r, err := c.GetCommandWithResponse(ctx, id, &restapi.GetCommandParams{WaitMs: ptr(2000)})
		if err != nil || r.JSON200 == nil {
			t.Fatalf("get: %v", err)
		}
		if r.JSON200.State == restapi.CommandStateExited {
			final = *r.JSON200
			break
		}
	}
	var want strings.Builder
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&want, "line%d\n", i)
	}
	if final.Stdout != want.String() || final.StdoutOffset != 0 {
		t.Fatalf("output after reconnect:\n%q\nwant\n%q", final.Stdout, want.String())
	}
	if final.Result == nil || final.Result.ExitCode != 0 {
		t.Fatalf("result %+v", final.Result)
	}
	if st := agentStatus(t, s, "remote-01"); st != restapi.Ready && st != restapi.Busy {
		t.Fatalf("agent status after reconnect: %s", st)
	}
}
