package e2e

import (
	"os"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// A claude that a mission's objective runs asks through the permission
// prompt tool (AGENTIC_MCP_CONFIG, exported to every mission): each
// question is a mission.hitl_required naming the tool, its input as the
// context, and the
// answer, "allow" or "deny" over the executor stream or a decision through
// REST, reaches claude as that decision.
func TestContractPermissionPromptIsAMissionHITL(t *testing.T) {
	e := newContract(t, copts{agents: 1, env: []string{"PATH=" + fakeClaudeMCP(t) + ":" + os.Getenv("PATH")}})
	const objective = `cd "$(mktemp -d)" && claude -p "clean up" --output-format stream-json --verbose ` +
		`--permission-prompt-tool mcp__agentic__permission --mcp-config "$AGENTIC_MCP_CONFIG" >/dev/null && cat *.txt`
	expectPermission := func(t *testing.T, id string) string {
		t.Helper()
		h := e.waitEvent(id, evHITLRequired, patience)
		hitlID, _ := h.Data["hitl_id"].(string)
		prompt, _ := h.Data["prompt"].(string)
		input, _ := h.Data["context"].(string)
		if hitlID == "" || !strings.Contains(prompt, "claude asks to use Bash") || !strings.Contains(input, "rm -rf build") {
			t.Fatalf("%s: hitl_required %v", id, h.Data)
		}
		return hitlID
	}
	expectDone := func(t *testing.T, id, want string) {
		t.Helper()
		end := e.waitEnd(id, patience)
		if s, _ := end.Data["summary"].(string); end.Event != evCompleted || !strings.Contains(s, want) {
			t.Errorf("%s: ended %s %v, want completed with %s", id, end.Event, end.Data, want)
		}
		fs := e.events(id)
		if h, r := indexOf(fs, evHITLRequired), indexOf(fs, evResumed); h < 0 || r < h || countEv(fs, evHITLRequired) != 1 {
			t.Errorf("%s: events %v", id, evNames(fs))
		}
	}

	t.Run("allowed over the executor stream", func(t *testing.T) {
		e.dispatch("m-perm-ws", objective)
		hitlID := expectPermission(t, "m-perm-ws")
		if err := e.fake.SendToExecutor(map[string]any{
			"event": "mission.hitl_responded", "data": map[string]any{"hitl_id": hitlID, "text": "allow"},
		}); err != nil {
			t.Fatal(err)
		}
		expectDone(t, "m-perm-ws", `"behavior":"allow"`)
	})

	t.Run("denied through REST with a message", func(t *testing.T) {
		e.dispatch("m-perm-rest", objective)
		hitlID := expectPermission(t, "m-perm-rest")
		ctx, cancel := ctxFor(patience)
		defer cancel()
		list, err := e.op().ListHITLWithResponse(ctx, nil)
		if err != nil || list.JSON200 == nil {
			t.Fatalf("list hitl: %v", err)
		}
		listed := false
		for _, h := range list.JSON200.Requests {
			listed = listed || (h.HitlId == hitlID && deref(h.MissionId) == "m-perm-rest" && deref(h.ToolName) == "Bash" && strings.Contains(deref(h.ToolInput), "rm -rf build"))
		}
		if !listed {
			t.Errorf("GET /api/v1/hitl: %s", list.Body)
		}
		bad, err := e.op().RespondHITLWithResponse(ctx, hitlID, restapi.HITLResponse{Text: "x", Decision: ptr(restapi.HITLResponseDecision("maybe"))})
		if err != nil || bad.StatusCode() != 400 {
			t.Errorf("decision maybe: %v %d %s", err, bad.StatusCode(), bad.Body)
		}
		deny := restapi.HITLResponseDecision("deny")
		ans, err := e.op().RespondHITLWithResponse(ctx, hitlID, restapi.HITLResponse{Text: "not here", Decision: &deny})
		if err != nil || ans.JSON200 == nil {
			t.Fatalf("respond: %v %s", err, ans.Body)
		}
		expectDone(t, "m-perm-rest", `"message":"not here"`)
	})
}
