package rest

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// scopeEnv is a server with two environments (and their agents) of two
// teams, a host agent a1 in none, a session and a background command on
// each team's agent, a mission on a1, and a token scoped to each team.
type scopeEnv struct {
	*env
	envs                      *fakeEnvironments
	sessions                  *resttest.Sessions
	pay, search               string // the scoped tokens' secrets
	paySession, searchSession string
	payCommand, searchCommand string
}

func newScopeEnv(t *testing.T) *scopeEnv {
	envs := newFakeEnvironments()
	ss := resttest.NewSessions(resttest.NewSessionLog(0))
	e := newEnv(t, func(d *Deps) {
		d.Tokens = portsfake.NewTokens()
		d.Environments = envs
		d.Sessions = ss
		d.SessionLog = resttest.NewSessionLog(0)
	})
	s := &scopeEnv{env: e, envs: envs, sessions: ss}
	for _, team := range []string{"payments", "search"} {
		name := team + "-1"
		expect(t, e.call("POST", "/api/v1/environments", fmt.Sprintf(`{"runtime":"docker","name":%q,"labels":{"team":%q}}`, name, team)), 202, "")
		e.link.AddAgent(ports.AgentInfo{ID: name, Status: "ready", Runtime: "container", Hostname: name})
	}
	s.pay = e.namedToken("pay", "operator", `,"labels":{"team":"payments"}`)
	s.search = e.namedToken("search", "operator", `,"labels":{"team":"search"}`)
	s.paySession = s.createSession("payments-1", "Bearer "+testToken)
	s.searchSession = s.createSession("search-1", "Bearer "+testToken)
	s.payCommand = s.startCommand("payments-1")
	s.searchCommand = s.startCommand("search-1")
	e.dispatchOK("m-0", "")
	return s
}

func (s *scopeEnv) createSession(agent, auth string) string {
	s.t.Helper()
	r := s.callAuth("POST", "/api/v1/agents/"+agent+"/sessions", `{"command":"sleep 100"}`, auth)
	expect(s.t, r, 201, "")
	var sess restapi.Session
	r.decode(s.t, &sess)
	return sess.SessionId
}

func (s *scopeEnv) startCommand(agent string) string {
	s.t.Helper()
	r := s.call("POST", "/api/v1/agents/"+agent+"/commands", `{"command":"sleep 100"}`)
	expect(s.t, r, 202, "")
	c := s.nextCommand()
	s.t.Cleanup(func() { c.Finish(ports.CommandResult{}) })
	return c.ID()
}

// listed is the names a list answers, read with field.
func listed[T any](t *testing.T, r response, items func(*T) []string) []string {
	t.Helper()
	expect(t, r, 200, "")
	var v T
	r.decode(t, &v)
	out := items(&v)
	slices.Sort(out)
	return out
}

// A scoped token's lists show only its scope's environments, agents,
// sessions and missions (the host agent and its mission are in no scope);
// the operator token sees everything; pools are nobody's scope.
func TestScopedTokenListsOnlyItsItems(t *testing.T) {
	s := newScopeEnv(t)
	envNames := func(v *restapi.EnvironmentList) (out []string) {
		for _, e := range v.Environments {
			out = append(out, e.Name)
		}
		return out
	}
	agentIDs := func(v *restapi.AgentList) (out []string) {
		for _, a := range v.Agents {
			out = append(out, a.Id)
		}
		return out
	}
	sessionAgents := func(v *restapi.SessionList) (out []string) {
		for _, x := range v.Sessions {
			out = append(out, x.AgentId)
		}
		return out
	}
	missionIDs := func(v *restapi.MissionList) (out []string) {
		for _, m := range v.Missions {
			out = append(out, m.MissionId)
		}
		return out
	}
	poolNames := func(v *restapi.PoolList) (out []string) {
		for _, p := range v.Pools {
			out = append(out, p.Name)
		}
		return out
	}
	for _, c := range []struct {
		auth                           string
		envs, agents, sessions, missns []string
	}{
		{"Bearer " + s.pay, []string{"payments-1"}, []string{"payments-1"}, []string{"payments-1"}, nil},
		{"Bearer " + s.search, []string{"search-1"}, []string{"search-1"}, []string{"search-1"}, nil},
		{"Bearer " + testToken, []string{"payments-1", "search-1"}, []string{"a1", "off", "payments-1", "search-1"}, []string{"payments-1", "search-1"}, []string{"m-0"}},
	} {
		got := listed(t, s.callAuth("GET", "/api/v1/environments", "", c.auth), envNames)
		if !slices.Equal(got, c.envs) {
			t.Errorf("%.12s: environments %v, want %v", c.auth, got, c.envs)
		}
		if got := listed(t, s.callAuth("GET", "/api/v1/agents", "", c.auth), agentIDs); !slices.Equal(got, c.agents) {
			t.Errorf("%.12s: agents %v, want %v", c.auth, got, c.agents)
		}
		if got := listed(t, s.callAuth("GET", "/api/v1/sessions", "", c.auth), sessionAgents); !slices.Equal(got, c.sessions) {
			t.Errorf("%.12s: sessions of %v, want %v", c.auth, got, c.sessions)
		}
		if got := listed(t, s.callAuth("GET", "/api/v1/missions", "", c.auth), missionIDs); !slices.Equal(got, c.missns) {
			t.Errorf("%.12s: missions %v, want %v", c.auth, got, c.missns)
		}
	}
	// An agent's sessions: its own agent's are all in scope; another
	// agent's list is empty, as an absent agent's is.
	if got := listed(t, s.callAuth("GET", "/api/v1/agents/payments-1/sessions", "", "Bearer "+s.pay), sessionAgents); !slices.Equal(got, []string{"payments-1"}) {
		t.Errorf("agent's sessions %v", got)
	}
	if got := listed(t, s.callAuth("GET", "/api/v1/agents/search-1/sessions", "", "Bearer "+s.pay), sessionAgents); len(got) != 0 {
		t.Errorf("another scope's agent's sessions %v", got)
	}
	// Pools serve every scope: a scoped token sees none, the operator all.
	if got := listed(t, s.callAuth("GET", "/api/v1/pools", "", "Bearer "+s.pay), poolNames); len(got) != 0 {
		t.Errorf("a scoped token lists pools %v", got)
	}
}

// Every operation on a single item out of the token's scope answers as if
// the item were absent (404 with the kind's code), before its handler
// runs; the same operation on an item in scope gets past the check.
func TestScopedTokenGets404OutOfScope(t *testing.T) {
	s := newScopeEnv(t)
	type op struct{ method, path, body, code string }
	// %[1]s is the agent/environment, %[2]s the session, %[3]s the command.
	ops := []op{
		{"GET", "/api/v1/agents/%[1]s", "", "agent_not_found"},
		{"GET", "/api/v1/agents/%[1]s/ports", "", "agent_not_found"},
		{"POST", "/api/v1/agents/%[1]s/exec", `{"command":"true"}`, "agent_not_found"},
		{"POST", "/api/v1/agents/%[1]s/commands", `{"command":"true"}`, "agent_not_found"},
		{"GET", "/api/v1/agents/%[1]s/files?path=/tmp", "", "agent_not_found"},
		{"GET", "/api/v1/agents/%[1]s/files/content?path=/etc/hostname", "", "agent_not_found"},
		{"DELETE", "/api/v1/agents/%[1]s/files?path=/tmp/x", "", "agent_not_found"},
		{"POST", "/api/v1/agents/%[1]s/sessions", `{"command":"sh"}`, "agent_not_found"},
		{"GET", "/api/v1/environments/%[1]s", "", "environment_not_found"},
		{"POST", "/api/v1/environments/%[1]s/stop", "", "environment_not_found"},
		{"POST", "/api/v1/environments/%[1]s/start", "", "environment_not_found"},
		{"POST", "/api/v1/environments/%[1]s/pause", "", "environment_not_found"},
		{"POST", "/api/v1/environments/%[1]s/resume", "", "environment_not_found"},
		{"POST", "/api/v1/environments/%[1]s/hibernate", "", "environment_not_found"},
		{"POST", "/api/v1/environments/%[1]s/wake", "", "environment_not_found"},
		{"GET", "/api/v1/environments/%[1]s/ports", "", "environment_not_found"},
		{"PUT", "/api/v1/environments/%[1]s/ports/8080/public", "", "environment_not_found"},
		{"GET", "/api/v1/environments/%[1]s/ports/8080/forward", "", "environment_not_found"},
		{"DELETE", "/api/v1/environments/%[1]s", "", "environment_not_found"},
		{"GET", "/api/v1/sessions/%[2]s", "", "session_not_found"},
		{"GET", "/api/v1/sessions/%[2]s/output", "", "session_not_found"},
		{"GET", "/api/v1/sessions/%[2]s/activity", "", "session_not_found"},
		{"DELETE", "/api/v1/sessions/%[2]s", "", "session_not_found"},
		{"GET", "/api/v1/commands/%[3]s", "", "command_not_found"},
		{"POST", "/api/v1/commands/%[3]s/stdin", `{"data":"eA=="}`, "command_not_found"},
		{"POST", "/api/v1/commands/%[3]s/signal", `{"signal":15}`, "command_not_found"},
		{"POST", "/api/v1/commands/%[3]s/resize", `{"cols":80,"rows":24}`, "command_not_found"},
		{"DELETE", "/api/v1/commands/%[3]s", "", "command_not_found"},
	}
	for _, o := range ops {
		// payments' token on search's items: as if absent, and exactly
		// as a truly absent item of that kind answers.
		out := s.callAuth(o.method, fmt.Sprintf(o.path, "search-1", s.searchSession, s.searchCommand), o.body, "Bearer "+s.pay)
		if out.status != http.StatusNotFound || out.code(t) != o.code {
			t.Errorf("%s %s out of scope: %d %s, want 404 %s", o.method, o.path, out.status, out.body, o.code)
		}
		absent := s.callAuth(o.method, fmt.Sprintf(o.path, "ghost", "ghost", "ghost"), o.body, "Bearer "+s.pay)
		if absent.status != out.status || absent.code(t) != out.code(t) {
			t.Errorf("%s %s: absent %d %s, out of scope %d %s", o.method, o.path, absent.status, absent.body, out.status, out.body)
		}
	}
	// In scope, the same operations get past the check (reads here: a
	// write would change the fixture).
	for _, o := range ops {
		if o.method != "GET" || o.code == "" {
			continue
		}
		in := s.callAuth(o.method, fmt.Sprintf(o.path, "payments-1", s.paySession, s.payCommand), o.body, "Bearer "+s.pay)
		if in.status == http.StatusNotFound && in.code(t) == o.code {
			t.Errorf("%s %s in scope: %d %s", o.method, o.path, in.status, in.body)
		}
	}
	// The host agent and its mission are in no scope.
	expect(t, s.callAuth("GET", "/api/v1/agents/a1", "", "Bearer "+s.pay), 404, "agent_not_found")
	expect(t, s.callAuth("GET", "/api/v1/missions/m-0", "", "Bearer "+s.pay), 404, "mission_not_found")
	expect(t, s.callAuth("GET", "/api/v1/missions/m-0", "", "Bearer "+testToken), 200, "")
	// Pools: none to read, none to change.
	expect(t, s.callAuth("GET", "/api/v1/pools/warm", "", "Bearer "+s.pay), 404, "pool_not_found")
	expect(t, s.callAuth("PUT", "/api/v1/pools/warm", `{"runtime":"docker","size":1}`, "Bearer "+s.pay), 403, "forbidden")
	expect(t, s.callAuth("DELETE", "/api/v1/pools/warm", "", "Bearer "+s.pay), 403, "forbidden")
	// Nothing out of scope was changed by the refused writes.
	if e, ok := s.envs.Get("search-1"); !ok || e.State != environment.StateProvisioning {
		t.Errorf("search-1 after payments' refused writes: %v %+v", ok, e)
	}
	// The operator token still reaches everything.
	expect(t, s.call("GET", "/api/v1/environments/search-1", ""), 200, "")
	expect(t, s.call("GET", "/api/v1/sessions/"+s.searchSession, ""), 200, "")
	expect(t, s.call("GET", "/api/v1/agents/a1", ""), 200, "")
}

// What a scoped token creates carries its scope, over any conflicting
// value it gives (it cannot create outside its scope); labels are checked,
// and the server's own keys refused.
func TestScopedTokenCreatesInItsScope(t *testing.T) {
	s := newScopeEnv(t)
	r := s.callAuth("POST", "/api/v1/environments", `{"runtime":"docker","name":"sneaky","labels":{"team":"search","tier":"gold"}}`, "Bearer "+s.pay)
	expect(t, r, 202, "")
	var env restapi.Environment
	r.decode(t, &env)
	if env.Labels == nil || (*env.Labels)["team"] != "payments" || (*env.Labels)["tier"] != "gold" || len(*env.Labels) != 2 {
		t.Fatalf("created by payments' token with labels %v", env.Labels)
	}
	// It is payments', not search's.
	expect(t, s.callAuth("GET", "/api/v1/environments/sneaky", "", "Bearer "+s.pay), 200, "")
	expect(t, s.callAuth("GET", "/api/v1/environments/sneaky", "", "Bearer "+s.search), 404, "environment_not_found")
	// Without labels: the scope's.
	r = s.callAuth("POST", "/api/v1/environments", `{"runtime":"docker","name":"plain"}`, "Bearer "+s.search)
	expect(t, r, 202, "")
	env = restapi.Environment{}
	r.decode(t, &env)
	if env.Labels == nil || len(*env.Labels) != 1 || (*env.Labels)["team"] != "search" {
		t.Fatalf("created by search's token with labels %v", env.Labels)
	}
	// An unscoped token keeps what it gives; bad and reserved labels are 400.
	r = s.call("POST", "/api/v1/environments", `{"runtime":"docker","name":"free","labels":{"team":"search"}}`)
	expect(t, r, 202, "")
	env = restapi.Environment{}
	r.decode(t, &env)
	if env.Labels == nil || (*env.Labels)["team"] != "search" {
		t.Fatalf("created by the operator with labels %v", env.Labels)
	}
	for _, labels := range []string{`{"agentic-sandbox.pool":"p"}`, `{"team":"a b"}`, `{"-x":"y"}`} {
		expect(t, s.callAuth("POST", "/api/v1/environments", `{"runtime":"docker","name":"bad","labels":`+labels+`}`, "Bearer "+s.pay), 400, "invalid_request")
	}
	if _, ok := s.envs.Get("bad"); ok {
		t.Fatal("a refused create left an environment")
	}
	// A session created by a scoped token on its own agent is in its
	// scope (a session's scope is its agent's), and in no other.
	id := s.createSession("payments-1", "Bearer "+s.pay)
	expect(t, s.callAuth("GET", "/api/v1/sessions/"+id, "", "Bearer "+s.pay), 200, "")
	expect(t, s.callAuth("GET", "/api/v1/sessions/"+id, "", "Bearer "+s.search), 404, "session_not_found")
}

// An admin with a label scope cannot widen it through tokens: what it
// creates carries its scope, it lists and revokes only tokens within it.
func TestScopedAdminTokensStayInScope(t *testing.T) {
	s := newScopeEnv(t)
	admin := s.namedToken("pay-admin", "admin", `,"labels":{"team":"payments"}`)
	r := s.callAuth("POST", "/api/v1/tokens", `{"name":"wider","role":"operator","labels":{"team":"search"}}`, "Bearer "+admin)
	expect(t, r, 201, "")
	var c restapi.TokenCreated
	r.decode(t, &c)
	if c.Labels == nil || (*c.Labels)["team"] != "payments" {
		t.Fatalf("a scoped admin made a token with labels %v", c.Labels)
	}
	r = s.callAuth("POST", "/api/v1/tokens", `{"name":"unscoped","role":"admin"}`, "Bearer "+admin)
	expect(t, r, 201, "")
	var u restapi.TokenCreated
	r.decode(t, &u)
	if u.Labels == nil || len(*u.Labels) != 1 || (*u.Labels)["team"] != "payments" {
		t.Fatalf("a scoped admin made an unscoped token: %v", u.Labels)
	}
	// The new token sees payments' only.
	expect(t, s.callAuth("GET", "/api/v1/environments/search-1", "", "Bearer "+c.Token), 404, "environment_not_found")
	names := listed(t, s.callAuth("GET", "/api/v1/tokens", "", "Bearer "+admin), func(v *restapi.TokenList) (out []string) {
		for _, x := range v.Tokens {
			out = append(out, x.Name)
		}
		return out
	})
	if !slices.Equal(names, []string{"pay", "pay-admin", "unscoped", "wider"}) {
		t.Errorf("a scoped admin lists tokens %v", names)
	}
	expect(t, s.callAuth("DELETE", "/api/v1/tokens/search", "", "Bearer "+admin), 404, "token_not_found")
	expect(t, s.callAuth("GET", "/api/v1/environments", "", "Bearer "+s.search), 200, "")
	expect(t, s.callAuth("DELETE", "/api/v1/tokens/wider", "", "Bearer "+admin), 204, "")
}

// A scoped token may not dispatch a mission (its agent is chosen among
// all); an unscoped executor token may.
func TestScopedTokenMayNotDispatch(t *testing.T) {
	s := newScopeEnv(t)
	scoped := s.namedToken("pay-exec", "executor", `,"labels":{"team":"payments"}`)
	expect(t, s.dispatch("s-9", `{"mission_id":"m-9","objective":"echo"}`, "Bearer "+scoped), 403, "forbidden")
	if _, err := s.missions.Mission("m-9"); err == nil {
		t.Fatal("a scoped token's refused dispatch made a mission")
	}
	free := s.namedToken("exec", "executor", "")
	expect(t, s.dispatch("s-9", `{"mission_id":"m-9","objective":"echo"}`, "Bearer "+free), 202, "")
}

// Missions and their HITL requests are their agent's: listed, read and
// answered by a token whose scope covers that agent only.
func TestScopedTokenMissionsAndHITL(t *testing.T) {
	s := newScopeEnv(t)
	s.missions.Put(ports.Mission{ID: "m-pay", Objective: "pay", AgentID: "payments-1", SessionID: "c-pay", State: ports.MissionRunning, CreatedAt: missionEpoch})
	s.missions.RaiseHITL("m-pay", ports.HITLRequest{ID: "h-pay", Prompt: "ok?", CreatedAt: missionEpoch})
	s.missions.RaiseHITL("m-0", ports.HITLRequest{ID: "h-0", Prompt: "ok?", CreatedAt: missionEpoch})
	hitlIDs := func(v *restapi.HITLList) (out []string) {
		for _, h := range v.Requests {
			out = append(out, h.HitlId)
		}
		return out
	}
	for _, c := range []struct {
		auth string
		want []string
	}{
		{"Bearer " + s.pay, []string{"h-pay"}},
		{"Bearer " + s.search, nil},
		{"Bearer " + testToken, []string{"h-0", "h-pay"}},
	} {
		if got := listed(t, s.callAuth("GET", "/api/v1/hitl", "", c.auth), hitlIDs); !slices.Equal(got, c.want) {
			t.Errorf("%.12s: HITL %v, want %v", c.auth, got, c.want)
		}
	}
	expect(t, s.callAuth("GET", "/api/v1/missions/m-pay", "", "Bearer "+s.pay), 200, "")
	expect(t, s.callAuth("GET", "/api/v1/missions/m-pay", "", "Bearer "+s.search), 404, "mission_not_found")
	expect(t, s.callAuth("POST", "/api/v1/hitl/h-pay/respond", `{"text":"y"}`, "Bearer "+s.search), 404, "hitl_not_found")
	expect(t, s.callAuth("POST", "/api/v1/hitl/h-0/respond", `{"text":"y"}`, "Bearer "+s.pay), 404, "hitl_not_found")
	if a := s.missions.Answers(); len(a) != 0 {
		t.Fatalf("refused answers reached the missions: %+v", a)
	}
	expect(t, s.callAuth("POST", "/api/v1/hitl/h-pay/respond", `{"text":"y"}`, "Bearer "+s.pay), 200, "")
}
