package access

import "testing"

func TestAllowed(t *testing.T) {
	cases := []struct {
		role, op string
		want     bool
	}{
		{Viewer, "listAgents", true},
		{Viewer, "getMission", true},
		{Viewer, "watchChanges", true},
		{Viewer, "createEnvironment", false},
		{Viewer, "execCommand", false},
		{Viewer, "forwardPort", false},
		{Viewer, "listTokens", false},
		{Viewer, "createToken", false},
		{Operator, "createEnvironment", true},
		{Operator, "execCommand", true},
		{Operator, "listAgents", true},
		{Operator, "createToken", false},
		{Operator, "listTokens", false},
		{Operator, "deleteToken", false},
		{Operator, "listAudit", false},
		{Admin, "createToken", true},
		{Admin, "listAudit", true},
		{Admin, "deleteEnvironment", true},
		{Executor, "dispatchMission", true},
		{Executor, "respondHITL", true},
		{Executor, "listMissions", true},
		{Executor, "getMission", true},
		{Executor, "listHITL", true},
		{Executor, "getAIWGStatus", true},
		{Executor, "reconnectAIWG", false},
		{Executor, "listAgents", false},
		{Executor, "createSession", false},
		{Executor, "listTokens", false},
		{"", "listAgents", false},
		{"root", "listAgents", false},
		{Admin, "noSuchOperation", false},
	}
	for _, c := range cases {
		if got := Allowed(c.role, c.op); got != c.want {
			t.Errorf("Allowed(%q, %q) = %v, want %v", c.role, c.op, got, c.want)
		}
	}
}

func TestExecutorGetsExactlyItsOperations(t *testing.T) {
	want := map[string]bool{"dispatchMission": true, "respondHITL": true, "listMissions": true,
		"getMission": true, "listHITL": true, "getAIWGStatus": true, "getMe": true}
	for op := range Rules {
		if Allowed(Executor, op) != want[op] {
			t.Errorf("executor on %s: %v, want %v", op, Allowed(Executor, op), want[op])
		}
	}
}

func TestValidRole(t *testing.T) {
	for _, r := range []string{"viewer", "operator", "admin", "executor"} {
		if !ValidRole(r) {
			t.Errorf("ValidRole(%q) = false", r)
		}
	}
	for _, r := range []string{"", "Admin", "root", "viewer "} {
		if ValidRole(r) {
			t.Errorf("ValidRole(%q) = true", r)
		}
	}
}

func TestInScope(t *testing.T) {
	cases := []struct {
		scope, item map[string]string
		want        bool
	}{
		{nil, nil, true},
		{nil, map[string]string{"team": "payments"}, true},
		{map[string]string{"team": "payments"}, map[string]string{"team": "payments", "env": "dev"}, true},
		{map[string]string{"team": "payments"}, map[string]string{"team": "search"}, false},
		{map[string]string{"team": "payments"}, nil, false},
		{map[string]string{"team": "payments", "env": "dev"}, map[string]string{"team": "payments"}, false},
		{map[string]string{"team": ""}, map[string]string{}, false},
	}
	for _, c := range cases {
		if got := InScope(c.scope, c.item); got != c.want {
			t.Errorf("InScope(%v, %v) = %v, want %v", c.scope, c.item, got, c.want)
		}
	}
}

func TestWithScope(t *testing.T) {
	item := map[string]string{"team": "search", "env": "dev"}
	got := WithScope(map[string]string{"team": "payments"}, item)
	if got["team"] != "payments" || got["env"] != "dev" || len(got) != 2 {
		t.Errorf("WithScope = %v", got)
	}
	if item["team"] != "search" {
		t.Errorf("WithScope changed the item's labels: %v", item)
	}
	if !InScope(map[string]string{"team": "payments"}, got) {
		t.Error("what a scoped token creates is out of its scope")
	}
	if g := WithScope(nil, item); len(g) != 2 || g["team"] != "search" {
		t.Errorf("WithScope(nil) = %v", g)
	}
}

func TestValidLabel(t *testing.T) {
	good := [][2]string{{"team", "payments"}, {"example.com/team", "a-b_c.d"}, {"a", "1"}}
	for _, l := range good {
		if !ValidLabel(l[0], l[1]) {
			t.Errorf("ValidLabel(%q, %q) = false", l[0], l[1])
		}
	}
	bad := [][2]string{{"", "x"}, {"team", ""}, {"-team", "x"}, {"team", "x-"}, {"a/b/c", "x"}, {"team", "a b"}, {"tëam", "x"}, {string(make([]byte, 64)), "x"}}
	for _, l := range bad {
		if ValidLabel(l[0], l[1]) {
			t.Errorf("ValidLabel(%q, %q) = true", l[0], l[1])
		}
	}
}

func TestAgentInScope(t *testing.T) {
	envs := map[string]map[string]string{
		"pay-1":    {"team": "payments"},
		"search-1": {"team": "search"},
		"bare":     nil,
	}
	lookup := func(name string) (map[string]string, bool) {
		l, ok := envs[name]
		return l, ok
	}
	payments := map[string]string{"team": "payments"}
	cases := []struct {
		scope map[string]string
		agent string
		want  bool
	}{
		{nil, "host", true},
		{nil, "pay-1", true},
		{payments, "pay-1", true},
		{payments, "search-1", false},
		{payments, "bare", false},
		{payments, "host", false}, // in no environment
	}
	for _, c := range cases {
		if got := AgentInScope(c.scope, c.agent, lookup); got != c.want {
			t.Errorf("AgentInScope(%v, %q) = %v, want %v", c.scope, c.agent, got, c.want)
		}
	}
	if AgentInScope(payments, "pay-1", nil) {
		t.Error("a scoped token sees an agent when no environments are known")
	}
	if !AgentInScope(nil, "pay-1", nil) {
		t.Error("an unscoped token does not see an agent when no environments are known")
	}
}
