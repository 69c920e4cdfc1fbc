package agentrpc

import (
	"context"
	"fmt"
	"testing"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A kept session's command (interactive or background) is counted among
// the agent's running commands and apart, as KeptSessions, whether it was
// started here or bound again after its agent came back (its type then
// comes from the agent's report): an idle policy does not take a shell
// left open for work. A headless run and a plain command are work.
func TestKeptSessionsAreCountedApart(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	counts := func() string {
		i := agentInfoOf(t, h.svc, "agent-a")
		return fmt.Sprintf("%d running, %d kept", i.RunningCommands, i.KeptSessions)
	}
	ctx := context.Background()
	var ids []string
	for _, spec := range []ports.CommandSpec{
		{SessionType: ports.SessionInteractive, PTY: true},
		{Command: "npm", SessionType: ports.SessionBackground},
		{Command: "claude", SessionType: ports.SessionHeadless},
		{Command: "make"},
	} {
		cmd, err := h.svc.Start(ctx, "agent-a", spec, ports.StartOptions{Detached: true})
		if err != nil {
			t.Fatal(err)
		}
		a.recv()
		ids = append(ids, cmd.ID())
	}
	if got := counts(); got != "4 running, 2 kept" {
		t.Fatalf("%s, want 4 running, 2 kept", got)
	}
	for _, id := range []string{ids[0], ids[2]} {
		a.send(result(id, ports.CommandResult{ExitCode: 0}))
	}
	eventually(t, "the ended ones uncounted", func() bool { return counts() == "2 running, 1 kept" })

	// Bound again by Attach (a restarted server's session), it is a kept
	// session once the agent's report says so.
	h.svc.Attach("agent-a", "sess-9", ports.StartOptions{})
	if got := counts(); got != "3 running, 1 kept" {
		t.Fatalf("attached: %s", got)
	}
	a.hangUp()
	b := h.connectAgent("agent-a")
	rep := &sandboxv1.SessionReport{RequestId: "connect:" + b.ack.GetConfig()[ConfigConnectionID]}
	for _, si := range []struct {
		id  string
		typ sandboxv1.SessionType
	}{{"sess-9", sandboxv1.SessionType_SESSION_TYPE_INTERACTIVE}, {ids[1], sandboxv1.SessionType_SESSION_TYPE_BACKGROUND}, {ids[3], sandboxv1.SessionType_SESSION_TYPE_UNSPECIFIED}} {
		rep.Sessions = append(rep.Sessions, &sandboxv1.SessionInfo{CommandId: si.id, Type: si.typ, Name: si.id, State: sandboxv1.SessionState_SESSION_STATE_RUNNING})
	}
	b.send(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_SessionReport{SessionReport: rep}})
	eventually(t, "the reported session counted as kept, once", func() bool { return counts() == "3 running, 2 kept" })
	for _, id := range []string{"sess-9", ids[1], ids[3]} {
		b.send(result(id, ports.CommandResult{ExitCode: 0}))
	}
	eventually(t, "nothing counted", func() bool { return counts() == "0 running, 0 kept" })
}
