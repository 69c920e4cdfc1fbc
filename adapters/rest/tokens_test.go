package rest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentic-sandbox/agentic-sandbox/core/access"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// TestEveryOperationHasARule reads openapi.yaml: every operation has a rule
// in core/access (a new endpoint without one fails here), every rule names
// an operation of the spec, and a viewer gets exactly the reads: every GET
// but forwardPort (which reaches into an environment) and nothing else.
func TestEveryOperationHasARule(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(restapi.Spec)
	if err != nil {
		t.Fatal(err)
	}
	inSpec := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			id := op.OperationID
			inSpec[id] = true
			if _, ok := access.Rules[id]; !ok {
				t.Errorf("%s %s (%s) has no rule in core/access", method, path, id)
				continue
			}
			for _, role := range access.Roles {
				_ = access.Allowed(role, id)
			}
			if !access.Allowed(access.Admin, id) {
				t.Errorf("admin may not %s", id)
			}
			if id == "signIn" || id == "signOut" || !strings.HasPrefix(path, "/api/") {
				continue
			}
			tokenOp := strings.HasPrefix(path, "/api/v1/tokens") || strings.HasPrefix(path, "/api/v1/audit")
			wantRead := method == http.MethodGet && id != "forwardPort" && !tokenOp
			if got := access.Allowed(access.Viewer, id); got != wantRead {
				t.Errorf("viewer on %s %s (%s): %v, want %v", method, path, id, got, wantRead)
			}
			if got := access.Allowed(access.Operator, id); got == tokenOp {
				t.Errorf("operator on %s %s (%s): %v", method, path, id, got)
			}
		}
	}
	for id := range access.Rules {
		if !inSpec[id] {
			t.Errorf("core/access has a rule for %s, which openapi.yaml does not have", id)
		}
	}
}

// namedToken creates a token with the operator token and returns its secret.
func (e *env) namedToken(name, role, extra string) string {
	e.t.Helper()
	r := e.call("POST", "/api/v1/tokens", fmt.Sprintf(`{"name":%q,"role":%q%s}`, name, role, extra))
	expect(e.t, r, 201, "")
	var c restapi.TokenCreated
	r.decode(e.t, &c)
	if c.Name != name || string(c.Role) != role || !strings.HasPrefix(c.Id, "tok_") || !strings.HasPrefix(c.Token, "ast_") || len(c.Token) != 4+43 {
		e.t.Fatalf("created %+v", c)
	}
	return c.Token
}

func withTokens(d *Deps) { d.Tokens = portsfake.NewTokens() }

// TestRoleMatrix: each role over a representative set of operations, 403
// forbidden naming the role and the operation otherwise.
func TestRoleMatrix(t *testing.T) {
	e := newEnv(t, withTokens)
	sec := map[string]string{}
	for _, role := range access.Roles {
		sec[role] = e.namedToken("t-"+role, role, "")
	}
	e.dispatchOK("m-0", "")
	type call struct{ method, path, body string }
	listAgents := call{"GET", "/api/v1/agents", ""}
	getAgent := call{"GET", "/api/v1/agents/a1", ""}
	createEnv := call{"POST", "/api/v1/environments", `{"name":"dev"}`}
	exec := call{"POST", "/api/v1/agents/a1/exec", `{"command":"true"}`}
	listMissions := call{"GET", "/api/v1/missions", ""}
	getMission := call{"GET", "/api/v1/missions/m-0", ""}
	listHITL := call{"GET", "/api/v1/hitl", ""}
	aiwgStatus := call{"GET", "/api/v1/aiwg/status", ""}
	listTokens := call{"GET", "/api/v1/tokens", ""}
	createToken := call{"POST", "/api/v1/tokens", `{"name":"x-%s","role":"viewer"}`}
	deleteToken := call{"DELETE", "/api/v1/tokens/nope", ""}
	hibernate := call{"POST", "/api/v1/environments/box/hibernate", ""}
	wake := call{"POST", "/api/v1/environments/box/wake", ""}
	allowed := map[string][]call{
		access.Viewer:   {listAgents, getAgent, listMissions, getMission, listHITL, aiwgStatus},
		access.Operator: {listAgents, getAgent, createEnv, listMissions, getMission, listHITL, aiwgStatus, exec, hibernate, wake},
		access.Admin:    {listAgents, getAgent, createEnv, listMissions, getMission, listHITL, aiwgStatus, exec, listTokens, createToken, deleteToken, hibernate, wake},
		access.Executor: {listMissions, getMission, listHITL, aiwgStatus},
	}
	all := []call{listAgents, getAgent, createEnv, exec, listMissions, getMission, listHITL, aiwgStatus, listTokens, createToken, deleteToken, hibernate, wake}
	for _, role := range access.Roles {
		ok := map[call]bool{}
		for _, c := range allowed[role] {
			ok[c] = true
		}
		for _, c := range all {
			body := c.body
			if strings.Contains(body, "%s") {
				body = fmt.Sprintf(body, role)
			}
			if c == exec && ok[c] {
				go func() { e.nextCommand().Finish(ports.CommandResult{}) }()
			}
			r := e.callAuth(c.method, c.path, body, "Bearer "+sec[role])
			if !ok[c] {
				if r.status != 403 || r.code(t) != "forbidden" {
					t.Errorf("%s: %s %s = %d %s, want 403 forbidden", role, c.method, c.path, r.status, r.body)
					continue
				}
				var er restapi.Error
				r.decode(t, &er)
				if !strings.Contains(er.Error, role) || !strings.Contains(er.Error, "t-"+role) {
					t.Errorf("%s: the 403 does not name the role and token: %s", role, er.Error)
				}
				continue
			}
			// Allowed: past the auth step (a handler may still refuse
			// the request itself: no environments here, no such token).
			if r.status == 401 || r.status == 403 {
				t.Errorf("%s: %s %s = %d %s, want it allowed", role, c.method, c.path, r.status, r.body)
			}
		}
	}
	// A 403 names the operation.
	r := e.callAuth("POST", "/api/v1/environments", `{"name":"dev"}`, "Bearer "+sec[access.Viewer])
	if !strings.Contains(string(r.body), "createEnvironment") {
		t.Errorf("403 does not name the operation: %s", r.body)
	}
	// An executor token dispatches; aiwg's own token still does, the
	// operator token still does not; a viewer's is refused with 403.
	expect(t, e.dispatch("s-1", `{"mission_id":"m-1","objective":"echo"}`, "Bearer "+sec[access.Executor]), 202, "")
	expect(t, e.dispatch("s-1", `{"mission_id":"m-2","objective":"echo"}`, execAuth), 202, "")
	expect(t, e.dispatch("s-1", `{"mission_id":"m-3","objective":"echo"}`, "Bearer "+testToken), 401, "unauthorized")
	expect(t, e.dispatch("s-1", `{"mission_id":"m-3","objective":"echo"}`, "Bearer "+sec[access.Viewer]), 403, "forbidden")
	// The operator token is an admin; HITL answers are the executor's.
	expect(t, e.callAuth("POST", "/api/v1/hitl/h-none/respond", `{"text":"y"}`, "Bearer "+sec[access.Viewer]), 403, "forbidden")
	if r := e.callAuth("POST", "/api/v1/hitl/h-none/respond", `{"text":"y"}`, "Bearer "+sec[access.Executor]); r.status == 403 || r.status == 401 {
		t.Errorf("executor's HITL answer refused: %d %s", r.status, r.body)
	}
}

// TestTokenLifecycle: create, list without secrets, revoke by name and by
// id (refused at once), expiry (refused at once, by the clock), and the
// errors.
func TestTokenLifecycle(t *testing.T) {
	e := newEnv(t, withTokens)
	exp := e.clock.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	ci := e.namedToken("ci", "viewer", `,"labels":{"team":"payments"}`)
	bot := e.namedToken("bot", "operator", fmt.Sprintf(`,"expires_at":%q`, exp))
	adm := e.namedToken("root2", "admin", "")
	expect(t, e.callAuth("GET", "/api/v1/agents", "", "Bearer "+ci), 200, "")
	expect(t, e.callAuth("GET", "/api/v1/agents", "", "Bearer "+bot), 200, "")

	r := e.callAuth("GET", "/api/v1/tokens", "", "Bearer "+adm)
	expect(t, r, 200, "")
	for _, s := range []string{ci, bot, adm} {
		if strings.Contains(string(r.body), s) || strings.Contains(string(r.body), s[4:]) {
			t.Fatalf("GET /api/v1/tokens shows a secret: %s", r.body)
		}
	}
	var list restapi.TokenList
	r.decode(t, &list)
	if len(list.Tokens) != 3 || list.Tokens[0].Name != "bot" || list.Tokens[1].Name != "ci" || list.Tokens[2].Name != "root2" {
		t.Fatalf("tokens = %s", r.body)
	}
	if l := list.Tokens[1].Labels; l == nil || (*l)["team"] != "payments" {
		t.Errorf("ci's labels = %v", l)
	}
	if x := list.Tokens[0].ExpiresAt; x == nil || x.Format(time.RFC3339) != exp {
		t.Errorf("bot's expires_at = %v, want %s", x, exp)
	}
	var raw map[string][]map[string]any
	_ = json.Unmarshal(r.body, &raw)
	for _, tok := range raw["tokens"] {
		if _, ok := tok["token"]; ok {
			t.Fatalf("a listed token has a token member: %s", r.body)
		}
	}

	// Errors.
	expect(t, e.call("POST", "/api/v1/tokens", `{"name":"ci","role":"admin"}`), 409, "token_exists")
	expect(t, e.call("POST", "/api/v1/tokens", `{"name":"x","role":"root"}`), 400, "")
	expect(t, e.call("POST", "/api/v1/tokens", `{"name":"Bad Name","role":"viewer"}`), 400, "")
	expect(t, e.call("POST", "/api/v1/tokens", `{"name":"tok_abc","role":"viewer"}`), 400, "invalid_request")
	expect(t, e.call("POST", "/api/v1/tokens", `{"name":"x","role":"viewer","labels":{"a b":"c"}}`), 400, "invalid_request")
	past := e.clock.Now().Add(-time.Second).UTC().Format(time.RFC3339)
	expect(t, e.call("POST", "/api/v1/tokens", fmt.Sprintf(`{"name":"x","role":"viewer","expires_at":%q}`, past)), 400, "invalid_request")
	expect(t, e.call("DELETE", "/api/v1/tokens/nope", ""), 404, "token_not_found")

	// Revocation by name takes effect on the next request.
	expect(t, e.call("DELETE", "/api/v1/tokens/ci", ""), 204, "")
	expect(t, e.callAuth("GET", "/api/v1/agents", "", "Bearer "+ci), 401, "unauthorized")
	expect(t, e.call("DELETE", "/api/v1/tokens/ci", ""), 404, "token_not_found")
	// By id too, by an admin token.
	for _, tok := range list.Tokens {
		if tok.Name == "root2" {
			expect(t, e.callAuth("DELETE", "/api/v1/tokens/"+tok.Id, "", "Bearer "+adm), 204, "")
		}
	}
	expect(t, e.callAuth("GET", "/api/v1/tokens", "", "Bearer "+adm), 401, "unauthorized")

	// Expiry: good a moment before, refused at its instant.
	e.clock.Advance(time.Hour - time.Second)
	expect(t, e.callAuth("GET", "/api/v1/agents", "", "Bearer "+bot), 200, "")
	e.clock.Advance(time.Second)
	expect(t, e.callAuth("GET", "/api/v1/agents", "", "Bearer "+bot), 401, "unauthorized")

	// No secret in the log.
	for _, s := range []string{ci, bot, adm} {
		if strings.Contains(e.logs.String(), s) || strings.Contains(e.logs.String(), s[4:]) {
			t.Fatal("a token's secret appears in the log")
		}
	}
	if !strings.Contains(e.logs.String(), "token revoked") {
		t.Error("the revocation is not logged")
	}
}

// TestCallerInContext: the auth step tells handlers who called, and the
// audit log names the token and its role, for its refusals too.
func TestCallerInContext(t *testing.T) {
	audit := portsfake.NewAuditLog()
	e := newEnv(t, withTokens, func(d *Deps) { d.Audit = audit })
	sec := e.namedToken("ops", "admin", "")
	e.namedTokenBy(sec, "made-by-ops")
	if !strings.Contains(e.logs.String(), "by=ops") {
		t.Errorf("the creation is not attributed to its caller: %s", e.logs.String())
	}
	view := e.namedToken("watcher", "viewer", "")
	expect(t, e.callAuth("POST", "/api/v1/tokens", `{"name":"x","role":"admin"}`, "Bearer "+view), 403, "forbidden")
	entries, _, err := audit.Query(ports.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, en := range entries {
		if en.Operation == "createToken" {
			got = append(got, fmt.Sprintf("%s/%s %d %s", en.Actor, en.Role, en.Status, en.Code))
		}
	}
	want := []string{"operator/admin 201 ", "ops/admin 201 ", "operator/admin 201 ", "watcher/viewer 403 forbidden"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("audit of createToken:\n got %q\nwant %q", got, want)
	}
}

func (e *env) namedTokenBy(secret, name string) {
	e.t.Helper()
	expect(e.t, e.callAuth("POST", "/api/v1/tokens", fmt.Sprintf(`{"name":%q,"role":"viewer"}`, name), "Bearer "+secret), 201, "")
}

// Without a token store, only the operator token works, and creating a
// token answers 503.
func TestNoTokenStore(t *testing.T) {
	e := newEnv(t)
	expect(t, e.call("POST", "/api/v1/tokens", `{"name":"ci","role":"viewer"}`), 503, "store_unavailable")
	expect(t, e.call("GET", "/api/v1/tokens", ""), 200, "")
	expect(t, e.callAuth("GET", "/api/v1/agents", "", "Bearer ast_nothing"), 401, "unauthorized")
}
