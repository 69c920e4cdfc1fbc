package e2e

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1/sandboxv1connect"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// A rogue agent with a valid credential of its own, against the real
// server: its connect report names host-01's command and thousands of
// sessions. host-01's command runs on, and the server keeps at most the
// per-agent quota of the rogue's sessions.
func TestARogueAgentsReportIsContained(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir)
	agentSecret(t, dataDir, "rogue", "rogue-secret")
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	victim, err := s.Client().StartCommandWithResponse(ctx, "host-01", restapi.ExecRequest{Command: "sleep", Args: ptr([]string{"60"})})
	if err != nil || victim.JSON202 == nil {
		t.Fatalf("start: %v %s", err, victim.Body)
	}

	client := sandboxv1connect.NewAgentServiceClient(h2cClient(), s.AgentURL, connect.WithGRPC())
	stream := client.Connect(ctx)
	stream.RequestHeader().Set("x-agent-id", "rogue")
	stream.RequestHeader().Set("x-agent-secret", "rogue-secret")
	defer func() { _ = stream.CloseRequest(); _ = stream.CloseResponse() }()
	if err := stream.Send(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Registration{Registration: &sandboxv1.Registration{
		AgentId: "rogue", Runtime: sandboxv1.RuntimeKind_RUNTIME_KIND_CONTAINER}}}); err != nil {
		t.Fatal(err)
	}
	ack, err := stream.Receive()
	if err != nil || ack.GetRegistrationAck() == nil {
		t.Fatalf("registration: %v", err)
	}
	rep := &sandboxv1.SessionReport{RequestId: "connect:" + ack.GetRegistrationAck().GetConfig()[agentrpc.ConfigConnectionID]}
	rep.Sessions = append(rep.Sessions, &sandboxv1.SessionInfo{CommandId: victim.JSON202.CommandId, Name: "stolen",
		Type: sandboxv1.SessionType_SESSION_TYPE_BACKGROUND, State: sandboxv1.SessionState_SESSION_STATE_RUNNING})
	for i := range 3000 {
		rep.Sessions = append(rep.Sessions, &sandboxv1.SessionInfo{CommandId: fmt.Sprintf("rogue-%d", i), Name: fmt.Sprintf("as-r%d", i),
			Type: sandboxv1.SessionType_SESSION_TYPE_BACKGROUND, State: sandboxv1.SessionState_SESSION_STATE_RUNNING})
	}
	if err := stream.Send(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_SessionReport{SessionReport: rep}}); err != nil {
		t.Fatal(err)
	}
	// The report is taken on in one go, after the refusals: once the
	// rogue's sessions are listed, it has been dealt with.
	rogue := "rogue"
	var list *restapi.ListSessionsResponse
	eventually(t, patience, "the rogue's sessions taken on", func() bool {
		var err error
		list, err = s.Client().ListSessionsWithResponse(ctx, &restapi.ListSessionsParams{AgentId: &rogue})
		return err == nil && list.JSON200 != nil && len(list.JSON200.Sessions) > 0
	})
	got, err := s.Client().GetCommandWithResponse(ctx, victim.JSON202.CommandId, nil)
	if err != nil || got.JSON200 == nil || got.JSON200.State != restapi.CommandStateRunning {
		t.Fatalf("host-01's command after the rogue report: %v %s", err, got.Body)
	}
	if n := len(list.JSON200.Sessions); n > 128 {
		t.Fatalf("the server keeps %d of the rogue's sessions, want at most the quota of 128", n)
	}
	for _, sess := range list.JSON200.Sessions {
		if sess.Name == "stolen" {
			t.Fatal("the rogue adopted host-01's command as its session")
		}
	}
}
