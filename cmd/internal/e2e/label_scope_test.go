package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// TestLabelScopeEndToEnd: with the real agentic-mgmt, two operator tokens
// scoped to two teams each create an environment of the host runtime
// (payments' asking for search's label, which its scope overrides); each
// sees only its own environment and agent (never the host agent), its own
// sessions, and answers 404 as for an absent item on the other's, for a
// read, an exec and a delete alike; the admin sees both. A restart keeps
// the environments' labels, and so the scopes.
func TestLabelScopeEndToEnd(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir)
	call := func(token, method, path, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, s.RESTURL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	decode := func(b []byte, v any) {
		t.Helper()
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("decoding %s: %v", b, err)
		}
	}
	codeOf := func(b []byte) string {
		var e restapi.Error
		_ = json.Unmarshal(b, &e)
		return e.Code
	}
	token := func(name, labels string) string {
		t.Helper()
		st, b := call(s.Token, "POST", "/api/v1/tokens", `{"name":"`+name+`","role":"operator","labels":`+labels+`}`)
		if st != 201 {
			t.Fatalf("create token %s: %d %s", name, st, b)
		}
		var c restapi.TokenCreated
		decode(b, &c)
		return c.Token
	}
	pay := token("payments-ci", `{"team":"payments"}`)
	search := token("search-ci", `{"team":"search"}`)

	create := func(tok, name, labels string) restapi.Environment {
		t.Helper()
		body := `{"runtime":"host","name":"` + name + `"` + labels + `}`
		st, b := call(tok, "POST", "/api/v1/environments", body)
		if st != 202 {
			t.Fatalf("create %s: %d %s", name, st, b)
		}
		var e restapi.Environment
		decode(b, &e)
		return e
	}
	pe := create(pay, "pay-env", `,"labels":{"team":"search","owner":"ana"}`)
	if pe.Labels == nil || (*pe.Labels)["team"] != "payments" || (*pe.Labels)["owner"] != "ana" {
		t.Fatalf("payments' environment has labels %v: its scope must win", pe.Labels)
	}
	// search's with agenticctl, adding a label of its own.
	ctl := exec.Command(bins.Ctl, "--server", s.RESTURL, "--token", search, "env", "create", "--runtime", "host", "--label", "owner=bo", "--no-wait", "search-env")
	ctl.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	if out, err := ctl.CombinedOutput(); err != nil {
		t.Fatalf("agenticctl env create: %v\n%s", err, out)
	}
	st, b := call(s.Token, "GET", "/api/v1/environments/search-env", "")
	var se restapi.Environment
	decode(b, &se)
	if st != 200 || se.Labels == nil || (*se.Labels)["team"] != "search" || (*se.Labels)["owner"] != "bo" || len(*se.Labels) != 2 {
		t.Fatalf("search's environment: %d, labels %v", st, se.Labels)
	}
	waitEnvReady(t, s, "pay-env", patience)
	waitEnvReady(t, s, "search-env", patience)

	envNames := func(tok string) []string {
		t.Helper()
		st, b := call(tok, "GET", "/api/v1/environments", "")
		if st != 200 {
			t.Fatalf("list environments: %d %s", st, b)
		}
		var l restapi.EnvironmentList
		decode(b, &l)
		var out []string
		for _, e := range l.Environments {
			out = append(out, e.Name)
		}
		slices.Sort(out)
		return out
	}
	agentIDs := func(tok string) []string {
		t.Helper()
		st, b := call(tok, "GET", "/api/v1/agents", "")
		if st != 200 {
			t.Fatalf("list agents: %d %s", st, b)
		}
		var l restapi.AgentList
		decode(b, &l)
		var out []string
		for _, a := range l.Agents {
			out = append(out, a.Id)
		}
		slices.Sort(out)
		return out
	}
	checkLists := func(stage string) {
		t.Helper()
		for _, c := range []struct {
			who, tok       string
			envs, agentIDs []string
		}{
			{"payments", pay, []string{"pay-env"}, []string{"pay-env"}},
			{"search", search, []string{"search-env"}, []string{"search-env"}},
			{"admin", s.Token, []string{"pay-env", "search-env"}, []string{"host-01", "pay-env", "search-env"}},
		} {
			if got := envNames(c.tok); !slices.Equal(got, c.envs) {
				t.Errorf("%s: %s lists environments %v, want %v", stage, c.who, got, c.envs)
			}
			// The agents of the environments register on their own.
			eventually(t, patience, stage+": "+c.who+"'s agents", func() bool { return slices.Equal(agentIDs(c.tok), c.agentIDs) })
		}
	}
	checkLists("after create")

	// In scope: exec and a session on its own agent.
	st, b = call(pay, "POST", "/api/v1/agents/pay-env/exec", `{"command":"echo","args":["in scope"]}`)
	if st != 200 || !strings.Contains(string(b), "in scope") {
		t.Fatalf("payments' exec on its own agent: %d %s", st, b)
	}
	st, b = call(pay, "POST", "/api/v1/agents/pay-env/sessions", `{"type":"background","command":"sleep","args":["300"]}`)
	if st != 201 {
		t.Fatalf("payments' session: %d %s", st, b)
	}
	var sess restapi.Session
	decode(b, &sess)

	// Out of scope: as if absent, for every kind of operation.
	for _, c := range []struct {
		method, path, ghost, body, code string
	}{
		{"GET", "/api/v1/environments/search-env", "/api/v1/environments/ghost", "", "environment_not_found"},
		{"DELETE", "/api/v1/environments/search-env", "/api/v1/environments/ghost", "", "environment_not_found"},
		{"POST", "/api/v1/environments/search-env/stop", "/api/v1/environments/ghost/stop", "", "environment_not_found"},
		{"GET", "/api/v1/agents/search-env", "/api/v1/agents/ghost", "", "agent_not_found"},
		{"GET", "/api/v1/agents/host-01", "/api/v1/agents/ghost", "", "agent_not_found"},
		{"POST", "/api/v1/agents/search-env/exec", "/api/v1/agents/ghost/exec", `{"command":"true"}`, "agent_not_found"},
		{"GET", "/api/v1/agents/search-env/files?path=/", "/api/v1/agents/ghost/files?path=/", "", "agent_not_found"},
		{"GET", "/api/v1/sessions/" + sess.SessionId, "/api/v1/sessions/ghost", "", "session_not_found"},
		{"DELETE", "/api/v1/sessions/" + sess.SessionId, "/api/v1/sessions/ghost", "", "session_not_found"},
	} {
		tok := search
		if strings.Contains(c.path, "search-env") || strings.Contains(c.path, "host-01") {
			tok = pay
		}
		st, b := call(tok, c.method, c.path, c.body)
		gst, gb := call(tok, c.method, c.ghost, c.body)
		if st != 404 || codeOf(b) != c.code || gst != st || codeOf(gb) != codeOf(b) {
			t.Errorf("%s %s out of scope: %d %s; absent: %d %s; want both 404 %s", c.method, c.path, st, b, gst, gb, c.code)
		}
	}
	// Nothing was stopped, deleted or killed by those.
	if got := envNames(s.Token); !slices.Equal(got, []string{"pay-env", "search-env"}) {
		t.Fatalf("after the refused deletes the admin lists %v", got)
	}
	st, b = call(s.Token, "GET", "/api/v1/sessions/"+sess.SessionId, "")
	var after restapi.Session
	decode(b, &after)
	if st != 200 || (after.State != restapi.SessionStateSessionStarting && after.State != restapi.SessionStateSessionRunning) {
		t.Fatalf("payments' session after search's refused kill: %d %s", st, b)
	}

	// A restart keeps the labels (on the runtime) and the tokens.
	s = restart(t, s)
	waitEnvReady(t, s, "pay-env", patience)
	waitEnvReady(t, s, "search-env", patience)
	checkLists("after a restart")

	// Tasks: payments' carries its scope over its manifest's label; search
	// neither lists nor reads it, nor cancels it; the admin does.
	st, b = call(pay, "POST", "/api/v1/tasks", `{"manifest":{"metadata":{"name":"scoped","labels":{"team":"search","owner":"ana"}},"command":{"argv":["true"]}}}`)
	if st != 202 {
		t.Fatalf("payments' task: %d %s", st, b)
	}
	var acc restapi.TaskAccepted
	decode(b, &acc)
	// A dry run shows the labels it would carry.
	st, b = call(pay, "POST", "/api/v1/tasks?dry_run=true", `{"manifest":{"metadata":{"labels":{"team":"search"}},"command":{"argv":["true"]}}}`)
	var dry struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	decode(b, &dry)
	if st != 200 || dry.Metadata.Labels["team"] != "payments" {
		t.Errorf("payments' dry run: %d %s", st, b)
	}
	taskIDs := func(tok string) []string {
		t.Helper()
		st, b := call(tok, "GET", "/api/v1/tasks", "")
		if st != 200 {
			t.Fatalf("list tasks: %d %s", st, b)
		}
		var l restapi.TaskList
		decode(b, &l)
		var out []string
		for _, x := range l.Tasks {
			if x.Id == acc.TaskId && x.Labels["team"] != "payments" {
				t.Errorf("the task has labels %v", x.Labels)
			}
			out = append(out, x.Id)
		}
		return out
	}
	if got := taskIDs(pay); !slices.Equal(got, []string{acc.TaskId}) {
		t.Errorf("payments lists tasks %v", got)
	}
	if got := taskIDs(search); len(got) != 0 {
		t.Errorf("search lists tasks %v", got)
	}
	if got := taskIDs(s.Token); !slices.Equal(got, []string{acc.TaskId}) {
		t.Errorf("the admin lists tasks %v", got)
	}
	for _, m := range []string{"GET", "DELETE"} {
		st, b := call(search, m, "/api/v1/tasks/"+acc.TaskId, "")
		gst, gb := call(search, m, "/api/v1/tasks/ghost", "")
		if st != 404 || codeOf(b) != "task_not_found" || gst != 404 || codeOf(gb) != "task_not_found" {
			t.Errorf("%s another scope's task: %d %s; absent: %d %s", m, st, b, gst, gb)
		}
	}
	if st, b := call(pay, "GET", "/api/v1/tasks/"+acc.TaskId, ""); st != 200 {
		t.Errorf("payments reads its task: %d %s", st, b)
	}
}
