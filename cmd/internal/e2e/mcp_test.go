package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// mcpTools are the tools both transports offer.
var mcpTools = []string{
	"cancel_task", "create_environment", "delete_environment", "exec", "kill_session", "list_agents",
	"list_environments", "list_files", "list_runtimes", "read_file", "read_session_output",
	"start_session", "submit_task", "wait_task", "write_file",
}

// mcpCall is one tool call's answer.
type mcpCall struct {
	out     map[string]any // the structured content
	isError bool
	text    string // the first text content
}

// apiError is the REST {error, code, status} a failed call carries.
func (c mcpCall) apiError(t *testing.T) (code string, status int) {
	t.Helper()
	var e struct {
		Error  string `json:"error"`
		Code   string `json:"code"`
		Status int    `json:"status"`
	}
	if !c.isError || json.Unmarshal([]byte(c.text), &e) != nil || e.Error == "" {
		t.Fatalf("want a tool error carrying the REST {error, code}, got error=%v %q", c.isError, c.text)
	}
	return e.Code, e.Status
}

// mcpCalled are the tools called so far (TestMCPStdioTools checks it called each).
var mcpCalled = map[string]bool{}

func callTool(t *testing.T, cs *sdk.ClientSession, name string, args any) mcpCall {
	t.Helper()
	mcpCalled[name] = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	c := mcpCall{isError: res.IsError}
	if len(res.Content) > 0 {
		if tc, ok := res.Content[0].(*sdk.TextContent); ok {
			c.text = tc.Text
		}
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &c.out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return c
}

// ok is a call that must succeed.
func ok(t *testing.T, cs *sdk.ClientSession, name string, args any) map[string]any {
	t.Helper()
	c := callTool(t, cs, name, args)
	if c.isError {
		t.Fatalf("%s %v: tool error %s", name, args, c.text)
	}
	if c.out == nil {
		t.Fatalf("%s: no structured content (%q)", name, c.text)
	}
	return c.out
}

// toolNames lists the session's tools, checking each has an object input schema.
func toolNames(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		b, _ := json.Marshal(tool.InputSchema)
		var s struct {
			Type       string         `json:"type"`
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}
		if err := json.Unmarshal(b, &s); err != nil || s.Type != "object" {
			t.Errorf("%s: input schema %s is not a typed object", tool.Name, b)
		}
		if tool.Name == "exec" && (!slices.Contains(s.Required, "agent") || !slices.Contains(s.Required, "command") || s.Properties["timeout_seconds"] == nil) {
			t.Errorf("exec's input schema %s: want agent and command required, timeout_seconds typed", b)
		}
	}
	slices.Sort(names)
	return names
}

func names(list []any, key string) []string {
	var out []string
	for _, v := range list {
		if m, ok := v.(map[string]any); ok {
			s, _ := m[key].(string)
			out = append(out, s)
		}
	}
	return out
}

// startCtlMCP starts 'agenticctl mcp' against s with token (in the
// environment, as an MCP client's config sets it) and connects the SDK's
// client to it over stdio.
func startCtlMCP(t *testing.T, restURL, token string) *sdk.ClientSession {
	t.Helper()
	cmd := exec.Command(bins.Ctl, "mcp")
	cmd.Env = append(os.Environ(), "AGENTIC_SERVER="+restURL, "AGENTIC_OPERATOR_TOKEN="+token)
	stderr := &testkit.Buffer{}
	cmd.Stderr = stderr
	client := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cs, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to agenticctl mcp: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		_ = cs.Close()
		if t.Failed() {
			t.Logf("agenticctl mcp stderr:\n%s", stderr.String())
		}
	})
	return cs
}

// 'agenticctl mcp', started by the SDK's own client over stdio, offers
// every tool with a typed input schema, and each works against the real
// server: a host environment is made and its agent is ready; exec runs
// there with its exit code and output; a file is written, read (text and
// bytes) and listed, and a command sees it; a session's output is read to
// its end and another session is killed; a task from a local repository
// with command.argv is submitted and waited for, and its artifact is the
// repository's file, and another is cancelled; REST errors come back as
// tool errors with their code
// and status; the environment is deleted. With a wrong token every tool
// answers the REST API's 401.
func TestMCPStdioTools(t *testing.T) {
	repo := baseRepo(t, "a")
	s := startServer(t, 0, "")
	t.Cleanup(func() { fileDo(t, s, http.MethodDelete, s.RESTURL+"/api/v1/environments/mcp-1", nil) })
	cs := startCtlMCP(t, s.RESTURL, s.Token)
	clear(mcpCalled)

	if got := toolNames(t, cs); !slices.Equal(got, mcpTools) {
		t.Fatalf("tools %v, want %v", got, mcpTools)
	}
	if rts, _ := ok(t, cs, "list_runtimes", map[string]any{})["runtimes"].([]any); !slices.Contains(names(rts, "runtime"), "host") {
		t.Fatalf("list_runtimes: %v, want host", rts)
	}

	env := ok(t, cs, "create_environment", map[string]any{"name": "mcp-1", "runtime": "host"})
	if env["state"] != "ready" || env["agent_id"] != "mcp-1" {
		t.Fatalf("create_environment: %v, want ready with agent mcp-1", env)
	}
	if envs, _ := ok(t, cs, "list_environments", map[string]any{})["environments"].([]any); !slices.Contains(names(envs, "name"), "mcp-1") {
		t.Fatalf("list_environments: %v", envs)
	}
	if agents, _ := ok(t, cs, "list_agents", map[string]any{})["agents"].([]any); !slices.Contains(names(agents, "id"), "mcp-1") {
		t.Fatalf("list_agents: %v", agents)
	}
	c := callTool(t, cs, "create_environment", map[string]any{"name": "mcp-1", "runtime": "host"})
	if code, status := c.apiError(t); code != "environment_exists" || status != http.StatusConflict {
		t.Errorf("second create_environment: %s %d, want environment_exists 409", code, status)
	}
	c = callTool(t, cs, "create_environment", map[string]any{"name": "mcp-2", "runtime": "host", "isolation": "gvisor"})
	if code, status := c.apiError(t); code != "invalid_request" || status != http.StatusBadRequest || !strings.Contains(c.text, "offers no tier") {
		t.Errorf("create_environment with isolation gvisor on host: %s %d %q, want invalid_request 400 saying no tier is offered", code, status, c.text)
	}

	res := ok(t, cs, "exec", map[string]any{"agent": "mcp-1", "command": "sh", "args": []string{"-c", "echo out; echo err >&2; exit 3"}})
	if res["exit_code"] != 3.0 || res["stdout"] != "out\n" || res["stderr"] != "err\n" {
		t.Errorf("exec: %v, want exit 3, out, err", res)
	}
	c = callTool(t, cs, "exec", map[string]any{"agent": "no-such-agent", "command": "true"})
	if code, status := c.apiError(t); code != "agent_not_found" || status != http.StatusNotFound {
		t.Errorf("exec on a missing agent: %s %d, want agent_not_found 404", code, status)
	}
	if c := callTool(t, cs, "exec", map[string]any{"agent": "mcp-1"}); !c.isError || !strings.Contains(c.text, "command") {
		t.Errorf("exec without a command: %v %q, want the schema's refusal naming command", c.isError, c.text)
	}

	ok(t, cs, "write_file", map[string]any{"agent": "mcp-1", "path": "mcp/note.txt", "content": "hello\n"})
	ok(t, cs, "write_file", map[string]any{"agent": "mcp-1", "path": "mcp/bin", "content": "AP8=", "encoding": "base64", "mode": "0600"})
	if f := ok(t, cs, "read_file", map[string]any{"agent": "mcp-1", "path": "mcp/note.txt"}); f["content"] != "hello\n" || f["encoding"] != "utf-8" || f["truncated"] != false {
		t.Errorf("read_file note.txt: %v", f)
	}
	if f := ok(t, cs, "read_file", map[string]any{"agent": "mcp-1", "path": "mcp/bin"}); f["content"] != "AP8=" || f["encoding"] != "base64" {
		t.Errorf("read_file bin: %v, want base64 AP8=", f)
	}
	if f := ok(t, cs, "read_file", map[string]any{"agent": "mcp-1", "path": "mcp/note.txt", "max_bytes": 2}); f["content"] != "he" || f["truncated"] != true || f["size"] != 6.0 {
		t.Errorf("read_file max_bytes 2: %v", f)
	}
	listing := ok(t, cs, "list_files", map[string]any{"agent": "mcp-1", "path": "mcp"})
	entries, _ := listing["entries"].([]any)
	if got := names(entries, "name"); !slices.Contains(got, "note.txt") || !slices.Contains(got, "bin") {
		t.Errorf("list_files: %v", listing)
	}
	for _, e := range entries {
		if m := e.(map[string]any); m["name"] == "bin" && m["mode"] != "0600" {
			t.Errorf("bin's mode %v, want 0600", m["mode"])
		}
	}
	if res := ok(t, cs, "exec", map[string]any{"agent": "mcp-1", "command": "cat", "args": []string{"mcp/note.txt"}}); res["stdout"] != "hello\n" {
		t.Errorf("cat of the written file: %v", res)
	}
	c = callTool(t, cs, "read_file", map[string]any{"agent": "mcp-1", "path": "mcp/none"})
	if code, status := c.apiError(t); code != "file_not_found" || status != http.StatusNotFound {
		t.Errorf("read_file of a missing file: %s %d", code, status)
	}

	sess := ok(t, cs, "start_session", map[string]any{"agent": "mcp-1", "command": "sh", "args": []string{"-c", "echo session-start; sleep 0.3; echo session-end"}})
	id, _ := sess["session_id"].(string)
	if id == "" {
		t.Fatalf("start_session: %v", sess)
	}
	var output strings.Builder
	from := 0.0
	testkit.Eventually(t, patience, "the session's output to its end", func() bool {
		o := ok(t, cs, "read_session_output", map[string]any{"session_id": id, "from": from, "wait": true})
		output.WriteString(o["content"].(string))
		from = o["next_offset"].(float64)
		return o["state"] == "exited" && strings.Contains(output.String(), "session-end")
	})
	if !strings.Contains(output.String(), "session-start") {
		t.Errorf("session output %q", output.String())
	}
	long := ok(t, cs, "start_session", map[string]any{"agent": "mcp-1", "command": "sleep", "args": []string{"600"}, "name": "long"})
	longID := long["session_id"].(string)
	if k := ok(t, cs, "kill_session", map[string]any{"session_id": longID}); k["status"] != "kill_sent" {
		t.Errorf("kill_session: %v", k)
	}
	testkit.Eventually(t, patience, "the killed session to end", func() bool {
		return ok(t, cs, "read_session_output", map[string]any{"session_id": longID, "wait": true})["state"] == "killed"
	})

	manifest := map[string]any{
		"repository":  map[string]any{"url": repo, "branch": "main"},
		"command":     map[string]any{"argv": []string{"sh", "-c", "cat a.txt > REPORT.md"}},
		"environment": map[string]any{"runtime": "host"},
		"lifecycle":   map[string]any{"artifact_patterns": []string{"REPORT.md"}},
	}
	acc := ok(t, cs, "submit_task", map[string]any{"manifest": manifest})
	taskID, _ := acc["task_id"].(string)
	if taskID == "" {
		t.Fatalf("submit_task: %v", acc)
	}
	if now := ok(t, cs, "wait_task", map[string]any{"task_id": taskID, "timeout_seconds": 0}); now["task"] == nil {
		t.Errorf("wait_task with timeout 0: %v", now)
	}
	w := ok(t, cs, "wait_task", map[string]any{"task_id": taskID, "timeout_seconds": int(patience / time.Second)})
	task, _ := w["task"].(map[string]any)
	if w["done"] != true || task["state"] != "completed" {
		t.Fatalf("wait_task: %v, want done and completed", w)
	}
	if st, report := fileDo(t, s, http.MethodGet, s.RESTURL+"/api/v1/tasks/"+taskID+"/artifacts/REPORT.md", nil); st != http.StatusOK || string(report) != "a\n" {
		t.Errorf("the task's REPORT.md: %d %q, want the repository's a.txt", st, report)
	}
	sleeper := ok(t, cs, "submit_task", map[string]any{"manifest_yaml": "repository: {url: " + repo + "}\ncommand: {argv: [sleep, \"600\"]}\nenvironment: {runtime: host}\n"})
	longTask, _ := sleeper["task_id"].(string)
	if c := ok(t, cs, "cancel_task", map[string]any{"task_id": longTask}); c["id"] != longTask {
		t.Errorf("cancel_task: %v", c)
	}
	w = ok(t, cs, "wait_task", map[string]any{"task_id": longTask, "timeout_seconds": int(patience / time.Second)})
	if task, _ := w["task"].(map[string]any); w["done"] != true || task["state"] != "cancelled" {
		t.Errorf("wait_task of the cancelled task: %v", w)
	}
	c = callTool(t, cs, "submit_task", map[string]any{"manifest_yaml": "command: {argv: [true]}\nno_such_field: 1\n"})
	if code, status := c.apiError(t); code != "invalid_manifest" || status != http.StatusBadRequest {
		t.Errorf("submit_task with a bad manifest: %s %d, want invalid_manifest 400", code, status)
	}
	c = callTool(t, cs, "wait_task", map[string]any{"task_id": "no-such-task"})
	if code, status := c.apiError(t); code != "task_not_found" || status != http.StatusNotFound {
		t.Errorf("wait_task of a missing task: %s %d", code, status)
	}

	if d := ok(t, cs, "delete_environment", map[string]any{"name": "mcp-1"}); d["deleted"] != true {
		t.Errorf("delete_environment: %v", d)
	}
	if st, body := fileDo(t, s, http.MethodGet, s.RESTURL+"/api/v1/environments/mcp-1", nil); st != http.StatusNotFound {
		t.Errorf("the deleted environment: %d %s", st, body)
	}
	c = callTool(t, cs, "delete_environment", map[string]any{"name": "mcp-1"})
	if code, status := c.apiError(t); code != "environment_not_found" || status != http.StatusNotFound {
		t.Errorf("deleting it again: %s %d", code, status)
	}

	for _, name := range mcpTools {
		if !mcpCalled[name] {
			t.Errorf("tool %s was not called", name)
		}
	}

	// The tools have the token's rights: a wrong one gets the REST 401.
	wrong := startCtlMCP(t, s.RESTURL, "not-the-token")
	c = callTool(t, wrong, "list_environments", map[string]any{})
	if code, status := c.apiError(t); code != "unauthorized" || status != http.StatusUnauthorized {
		t.Errorf("list_environments with a wrong token: %s %d, want unauthorized 401", code, status)
	}
}

// bearerTransport adds the operator token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func connectHTTPMCP(ctx context.Context, url, token string) (*sdk.ClientSession, error) {
	client := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil)
	return client.Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint:   url,
		HTTPClient: &http.Client{Transport: bearerTransport{token}},
		MaxRetries: -1,
	}, nil)
}

// The server's /mcp endpoint, reached with the SDK's streamable HTTP
// client and the operator token: it lists the tools and runs an exec on a
// host agent, and a REST error comes back as a tool error. Without the
// token, or with a wrong one, it answers 401 with the REST API's JSON error
// and the SDK's client cannot connect.
func TestMCPHTTPEndpoint(t *testing.T) {
	s := startServer(t, 1, "")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cs, err := connectHTTPMCP(ctx, s.RESTURL+"/mcp", s.Token)
	if err != nil {
		t.Fatalf("connecting to /mcp: %v", err)
	}
	defer cs.Close()
	if got := toolNames(t, cs); !slices.Equal(got, mcpTools) {
		t.Fatalf("tools %v, want %v", got, mcpTools)
	}
	res := ok(t, cs, "exec", map[string]any{"agent": "host-01", "command": "sh", "args": []string{"-c", "echo over-http; exit 4"}})
	if res["exit_code"] != 4.0 || res["stdout"] != "over-http\n" || res["agent_id"] != "host-01" {
		t.Errorf("exec over /mcp: %v", res)
	}
	c := callTool(t, cs, "exec", map[string]any{"agent": "no-such-agent", "command": "true"})
	if code, status := c.apiError(t); code != "agent_not_found" || status != http.StatusNotFound {
		t.Errorf("exec on a missing agent over /mcp: %s %d", code, status)
	}

	for _, token := range []string{"", "not-the-token"} {
		if cs, err := connectHTTPMCP(ctx, s.RESTURL+"/mcp", token); err == nil {
			_ = cs.Close()
			t.Errorf("token %q: the SDK's client connected", token)
		}
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.RESTURL+"/mcp", bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct{ Error, Code string }
		if resp.StatusCode != http.StatusUnauthorized || json.Unmarshal(b, &e) != nil || e.Code != "unauthorized" || e.Error == "" ||
			!strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("token %q: %d %s (WWW-Authenticate %q), want 401 {error, code: unauthorized}", token, resp.StatusCode, b, resp.Header.Get("WWW-Authenticate"))
		}
		if strings.Contains(string(b), "exec") {
			t.Errorf("token %q: the answer lists tools: %s", token, b)
		}
	}
}
