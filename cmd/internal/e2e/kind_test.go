package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1/sandboxv1connect"
)

// registerAs opens an agent stream declaring kind and returns how the
// registration went: nil once acknowledged.
func registerAs(t *testing.T, s *harness.Server, id, secret string, kind sandboxv1.RuntimeKind) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := sandboxv1connect.NewAgentServiceClient(h2cClient(), s.AgentURL, connect.WithGRPC())
	stream := client.Connect(ctx)
	stream.RequestHeader().Set("x-agent-id", id)
	stream.RequestHeader().Set("x-agent-secret", secret)
	_ = stream.Send(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Registration{Registration: &sandboxv1.Registration{AgentId: id, Runtime: kind}}})
	msg, err := stream.Receive()
	_ = stream.CloseRequest()
	_ = stream.CloseResponse()
	if err != nil {
		return err
	}
	if msg.GetRegistrationAck() == nil {
		return errors.New("no registration ack")
	}
	return nil
}

// The isolation tier is never the agent's say: an environment's agent is of
// its runtime's kind, a hand-written credential keeps the kind of its first
// registration, and another kind is refused with permission_denied, even
// with the right secret.
func TestAnAgentCannotClaimAStrongerTier(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 0, dataDir)
	agentSecret(t, dataDir, "handmade", "handmade-secret")
	if err := registerAs(t, s, "handmade", "handmade-secret", sandboxv1.RuntimeKind_RUNTIME_KIND_CONTAINER); err != nil {
		t.Fatalf("first registration: %v", err)
	}
	if err := registerAs(t, s, "handmade", "handmade-secret", sandboxv1.RuntimeKind_RUNTIME_KIND_VM); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("a container agent registering as vm: %v, want permission_denied", err)
	}
	if err := registerAs(t, s, "handmade", "handmade-secret", sandboxv1.RuntimeKind_RUNTIME_KIND_CONTAINER); err != nil {
		t.Fatalf("registering again as what it is: %v", err)
	}

	// An environment's agent, with its real secret (as a workload that read
	// it would have), cannot become a VM either.
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", "tiered") })
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "host", "tiered"); code != 0 {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	raw, err := os.ReadFile(filepath.Join(dataDir, "host-envs", "tiered", "env.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Secret string }
	if err := json.Unmarshal(raw, &rec); err != nil || rec.Secret == "" {
		t.Fatalf("env record: %v", err)
	}
	if err := registerAs(t, s, "tiered", rec.Secret, sandboxv1.RuntimeKind_RUNTIME_KIND_VM); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("a host environment's agent registering as vm: %v, want permission_denied", err)
	}
	a, err := s.Client().GetAgentWithResponse(context.Background(), "tiered")
	if err != nil || a.JSON200 == nil || a.JSON200.Runtime != "host" {
		t.Fatalf("the environment's agent: %v %s", err, a.Body)
	}
}
