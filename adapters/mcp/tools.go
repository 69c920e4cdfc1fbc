package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// Limits of the tools (the README's MCP section lists them).
const (
	// defaultReadBytes and maxReadBytes bound what read_file and
	// read_session_output return in one call.
	defaultReadBytes = 256 << 10
	maxReadBytes     = 4 << 20
	// defaultEnvWait and maxWait bound create_environment's and
	// wait_task's waits.
	defaultEnvWait  = 300
	defaultTaskWait = 600
	maxWait         = 3600
	// pollEvery is how often a wait looks again.
	pollEvery = 500 * time.Millisecond
)

// tools is the tool set: each tool is a few calls of the REST API.
type tools struct {
	c       restapi.ClientInterface
	forward bool
}

// toolError is what a failed tool call answers: the REST API's error body
// (and its HTTP status), or one of the tool's own in the same shape.
type toolError struct {
	Message string `json:"error"`
	Code    string `json:"code"`
	Status  int    `json:"status,omitempty"`
}

func (e *toolError) Error() string {
	b, _ := json.Marshal(e)
	return string(b)
}

func invalid(format string, args ...any) error {
	return &toolError{Message: fmt.Sprintf(format, args...), Code: "invalid_request"}
}

// editors are the request editors of one call: with ForwardAuthorization,
// the Authorization of the MCP request that carried it.
func (t *tools) editors(req *sdk.CallToolRequest) ([]restapi.RequestEditorFn, error) {
	if !t.forward {
		return nil, nil
	}
	var auth string
	if req != nil && req.Extra != nil && req.Extra.Header != nil {
		auth = req.Extra.Header.Get("Authorization")
	}
	if auth == "" {
		return nil, &toolError{Message: "this tool call came without an Authorization header: send 'Authorization: Bearer <operator token>' with every MCP request", Code: "unauthorized", Status: http.StatusUnauthorized}
	}
	return []restapi.RequestEditorFn{func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", auth)
		return nil
	}}, nil
}

// answer reads a REST answer: its body when it is a success (2xx), else
// the tool error it carries.
func answer(resp *http.Response, err error) ([]byte, http.Header, error) {
	if err != nil {
		return nil, nil, &toolError{Message: "cannot reach the agentic-sandbox server: " + err.Error(), Code: "server_unreachable"}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReadBytes+1<<20))
	if err != nil {
		return nil, nil, &toolError{Message: "reading the server's answer: " + err.Error(), Code: "server_unreachable", Status: resp.StatusCode}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return body, resp.Header, nil
	}
	var e restapi.Error
	if json.Unmarshal(body, &e) != nil || e.Code == "" {
		return nil, nil, &toolError{Message: fmt.Sprintf("unexpected answer from the server (HTTP %d): %s", resp.StatusCode, clip(body)), Code: "unexpected_response", Status: resp.StatusCode}
	}
	return nil, nil, &toolError{Message: e.Error, Code: e.Code, Status: resp.StatusCode}
}

func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// object is a JSON object answer, passed on as the tool's structured output.
func object(body []byte) (any, error) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, &toolError{Message: "the server sent invalid JSON: " + err.Error(), Code: "unexpected_response"}
	}
	return m, nil
}

// objectAnswer is a tool's result from a REST answer that is one JSON
// object: its structured output, or the tool error the answer carries.
func objectAnswer(resp *http.Response, err error) (*sdk.CallToolResult, any, error) {
	body, _, err := answer(resp, err)
	if err != nil {
		return nil, nil, err
	}
	out, err := object(body)
	return nil, out, err
}

// jsonBody marshals a request body.
func jsonBody(v any) io.Reader {
	b, _ := json.Marshal(v)
	return bytes.NewReader(b)
}

// schema is T's inferred input schema with enums and bounds set by edit.
func schema[T any](edit func(props map[string]*jsonschema.Schema)) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(err) // the tools' own types: a mistake here is the programmer's
	}
	if edit != nil {
		edit(s.Properties)
	}
	return s
}

func ptr[T any](v T) *T { return &v }

func (t *tools) register(s *sdk.Server) {
	readOnly := &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}
	sdk.AddTool(s, &sdk.Tool{Name: "list_agents", Annotations: readOnly,
		Description: "The agents the server knows (id, status, runtime, hostname, running commands). An environment's agent has the environment's name."}, t.listAgents)
	sdk.AddTool(s, &sdk.Tool{Name: "list_runtimes", Annotations: readOnly,
		Description: "The runtimes environments can be made with (host, docker, libvirt, …), with their network modes, limits and whether they take an image."}, t.listRuntimes)
	sdk.AddTool(s, &sdk.Tool{Name: "list_environments", Annotations: readOnly,
		Description: "The environments (sandboxes) with their state, runtime and agent."}, t.listEnvironments)
	sdk.AddTool(s, &sdk.Tool{Name: "create_environment",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(false)},
		Description: "Make an environment (a host process, container or VM with its own agent, named like it) and, unless no_wait, wait until its agent is ready. Fails with code environment_failed if provisioning fails.",
		InputSchema: schema[createEnvironmentIn](func(p map[string]*jsonschema.Schema) {
			p["name"].Pattern, p["name"].MinLength, p["name"].MaxLength = `^[A-Za-z0-9][A-Za-z0-9._-]*$`, ptr(1), ptr(63)
			p["wait_seconds"].Minimum, p["wait_seconds"].Maximum = ptr(0.0), ptr(float64(maxWait))
		})}, t.createEnvironment)
	sdk.AddTool(s, &sdk.Tool{Name: "delete_environment",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: false},
		Description: "Destroy an environment and everything in it (its files, processes and agent)."}, t.deleteEnvironment)
	sdk.AddTool(s, &sdk.Tool{Name: "exec",
		Description: "Run a command (no shell: command is the program, args its arguments; use command sh with args [-c, SCRIPT] for a shell line) on an agent and wait for it. Returns exit_code, stdout, stderr (base64 when encoding says so), timed_out and error (why it could not start).",
		InputSchema: schema[execIn](func(p map[string]*jsonschema.Schema) {
			p["timeout_seconds"].Minimum, p["timeout_seconds"].Maximum = ptr(0.0), ptr(86400.0)
		})}, t.exec)
	sdk.AddTool(s, &sdk.Tool{Name: "list_files", Annotations: readOnly,
		Description: "A directory's entries (name, type, size, mode, mtime) on an agent, or the one entry of a file."}, t.listFiles)
	sdk.AddTool(s, &sdk.Tool{Name: "read_file", Annotations: readOnly,
		Description: fmt.Sprintf("A file's content on an agent: text as is, other bytes as base64 (encoding says which); at most max_bytes (default %d KiB, at most %d MiB), truncated says more was left.", defaultReadBytes>>10, maxReadBytes>>20),
		InputSchema: schema[readFileIn](func(p map[string]*jsonschema.Schema) {
			p["max_bytes"].Minimum, p["max_bytes"].Maximum = ptr(0.0), ptr(float64(maxReadBytes))
		})}, t.readFile)
	sdk.AddTool(s, &sdk.Tool{Name: "write_file",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true},
		Description: "Write a file on an agent (replacing it whole; parent directories are made). content is text, or base64 with encoding base64; mode is octal (default 0644).",
		InputSchema: schema[writeFileIn](func(p map[string]*jsonschema.Schema) {
			p["encoding"].Enum = []any{"utf-8", "base64"}
			p["mode"].Pattern = `^0?[0-7]{3}$`
		})}, t.writeFile)
	sdk.AddTool(s, &sdk.Tool{Name: "start_session",
		Description: "Start a long-running command on an agent as a session whose output is kept (read it with read_session_output). type: background (default), interactive or headless.",
		InputSchema: schema[startSessionIn](func(p map[string]*jsonschema.Schema) {
			p["type"].Enum = []any{"background", "interactive", "headless"}
			p["name"].Pattern = `^[A-Za-z0-9][A-Za-z0-9_-]*$`
			p["cols"].Minimum, p["cols"].Maximum = ptr(1.0), ptr(1000.0)
			p["rows"].Minimum, p["rows"].Maximum = ptr(1.0), ptr(1000.0)
		})}, t.startSession)
	sdk.AddTool(s, &sdk.Tool{Name: "read_session_output", Annotations: readOnly,
		Description: "A session's output from offset from (default: the first byte kept), at most max_bytes; continue from next_offset. wait=true waits up to 30 s for output at the end. state and exit_code say whether it still runs.",
		InputSchema: schema[sessionOutputIn](func(p map[string]*jsonschema.Schema) {
			p["from"].Minimum = ptr(0.0)
			p["max_bytes"].Minimum, p["max_bytes"].Maximum = ptr(0.0), ptr(float64(maxReadBytes))
		})}, t.sessionOutput)
	sdk.AddTool(s, &sdk.Tool{Name: "kill_session",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)},
		Description: "End a session (its whole process group)."}, t.killSession)
	sdk.AddTool(s, &sdk.Tool{Name: "submit_task",
		Description: "Submit a task: a manifest (as an object, or as YAML text in manifest_yaml) naming a repository, a prompt for claude or command.argv, and an environment; it runs in the background in a fresh environment. Returns task_id; wait_task waits for the outcome."}, t.submitTask)
	sdk.AddTool(s, &sdk.Tool{Name: "wait_task", Annotations: readOnly,
		Description: fmt.Sprintf("Wait until a task ends (completed, failed, failed_preserved, cancelled) or timeout_seconds pass (default %d, at most %d; 0 answers at once), and return it: done says whether it ended; state, reason, error, exit_code and progress say how.", defaultTaskWait, maxWait),
		InputSchema: schema[waitTaskIn](func(p map[string]*jsonschema.Schema) {
			p["timeout_seconds"].Minimum, p["timeout_seconds"].Maximum = ptr(0.0), ptr(float64(maxWait))
		})}, t.waitTask)
	sdk.AddTool(s, &sdk.Tool{Name: "cancel_task",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)},
		Description: "Cancel a task (its process and environment end), or destroy a preserved failed task's environment now."}, t.cancelTask)
}

type noInput struct{}

func (t *tools) listAgents(ctx context.Context, req *sdk.CallToolRequest, _ noInput) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	return objectAnswer(t.c.ListAgents(ctx, nil, ed...))
}

func (t *tools) listRuntimes(ctx context.Context, req *sdk.CallToolRequest, _ noInput) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	return objectAnswer(t.c.ListRuntimes(ctx, ed...))
}

func (t *tools) listEnvironments(ctx context.Context, req *sdk.CallToolRequest, _ noInput) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	return objectAnswer(t.c.ListEnvironments(ctx, nil, ed...))
}

type createEnvironmentIn struct {
	Name         string   `json:"name" jsonschema:"the environment's name, also its agent's id: A-Z a-z 0-9 . _ -, starting with a letter or digit"`
	Runtime      string   `json:"runtime" jsonschema:"one of the runtimes list_runtimes names, e.g. host or docker"`
	Image        string   `json:"image,omitempty" jsonschema:"container image or VM disk image (runtimes that take one)"`
	Profile      string   `json:"profile,omitempty" jsonschema:"a preset the runtime offers"`
	Network      string   `json:"network,omitempty" jsonschema:"none, proxy, host, bridge or user, as the runtime allows (default: its first)"`
	AllowedHosts []string `json:"allowed_hosts,omitempty" jsonschema:"with network proxy, the hosts its commands may reach"`
	CPUs         float64  `json:"cpus,omitempty" jsonschema:"CPU limit"`
	MemoryMB     int      `json:"memory_mb,omitempty" jsonschema:"memory limit in MiB"`
	ReadOnlyRoot bool     `json:"read_only_root,omitempty" jsonschema:"make the root file system read-only"`
	Isolation    string   `json:"isolation,omitempty" jsonschema:"a sandbox stronger than the runtime's standard one, among the tiers list_runtimes shows for it (gvisor)"`
	NoWait       bool     `json:"no_wait,omitempty" jsonschema:"answer at once instead of waiting until the agent is ready"`
	WaitSeconds  int      `json:"wait_seconds,omitempty" jsonschema:"how long to wait for the agent (default 300)"`
}

func (t *tools) createEnvironment(ctx context.Context, req *sdk.CallToolRequest, in createEnvironmentIn) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	body := map[string]any{"name": in.Name, "runtime": in.Runtime}
	if in.Image != "" {
		body["image"] = in.Image
	}
	if in.Profile != "" {
		body["profile"] = in.Profile
	}
	if in.Network != "" {
		body["network"] = in.Network
	}
	if len(in.AllowedHosts) > 0 {
		body["allowed_hosts"] = in.AllowedHosts
	}
	if in.CPUs > 0 || in.MemoryMB > 0 {
		res := map[string]any{}
		if in.CPUs > 0 {
			res["cpus"] = in.CPUs
		}
		if in.MemoryMB > 0 {
			res["memory_mb"] = in.MemoryMB
		}
		body["resources"] = res
	}
	if in.ReadOnlyRoot {
		body["read_only_root"] = true
	}
	if in.Isolation != "" {
		body["isolation"] = in.Isolation
	}
	b, _, err := answer(t.c.CreateEnvironmentWithBody(ctx, "application/json", jsonBody(body), ed...))
	if err != nil {
		return nil, nil, err
	}
	if in.NoWait {
		out, err := object(b)
		return nil, out, err
	}
	wait := in.WaitSeconds
	if wait == 0 {
		wait = defaultEnvWait
	}
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	for {
		var env restapi.Environment
		if err := json.Unmarshal(b, &env); err != nil {
			return nil, nil, &toolError{Message: "the server sent invalid JSON: " + err.Error(), Code: "unexpected_response"}
		}
		switch env.State {
		case restapi.EnvReady:
			out, err := object(b)
			return nil, out, err
		case restapi.EnvFailed:
			msg := "provisioning failed"
			if env.Error != nil {
				msg = *env.Error
			}
			return nil, nil, &toolError{Message: fmt.Sprintf("environment %s failed: %s", in.Name, msg), Code: "environment_failed"}
		}
		if !time.Now().Before(deadline) {
			return nil, nil, &toolError{Message: fmt.Sprintf("environment %s is still %s after %d s; list_environments shows when it is ready", in.Name, env.State, wait), Code: "wait_timeout"}
		}
		if err := sleep(ctx, pollEvery); err != nil {
			return nil, nil, err
		}
		if b, _, err = answer(t.c.GetEnvironment(ctx, in.Name, ed...)); err != nil {
			return nil, nil, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return &toolError{Message: "the call was cancelled", Code: "cancelled"}
	case <-tm.C:
		return nil
	}
}

type nameIn struct {
	Name string `json:"name" jsonschema:"the environment's name"`
}

func (t *tools) deleteEnvironment(ctx context.Context, req *sdk.CallToolRequest, in nameIn) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	if _, _, err := answer(t.c.DeleteEnvironment(ctx, in.Name, ed...)); err != nil {
		return nil, nil, err
	}
	return nil, map[string]any{"name": in.Name, "deleted": true}, nil
}

type execIn struct {
	Agent          string            `json:"agent" jsonschema:"the agent's id (an environment's name, or a host agent such as host-01)"`
	Command        string            `json:"command" jsonschema:"the program, looked up in PATH"`
	Args           []string          `json:"args,omitempty" jsonschema:"its arguments"`
	WorkingDir     string            `json:"working_dir,omitempty" jsonschema:"the directory to run in (default: the agent's)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text written to its stdin"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"kill it after this long (default 300)"`
}

func (t *tools) exec(ctx context.Context, req *sdk.CallToolRequest, in execIn) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	body := map[string]any{"command": in.Command}
	if len(in.Args) > 0 {
		body["args"] = in.Args
	}
	if in.WorkingDir != "" {
		body["working_dir"] = in.WorkingDir
	}
	if len(in.Env) > 0 {
		body["env"] = in.Env
	}
	if in.Stdin != "" {
		body["stdin"] = in.Stdin
	}
	if in.TimeoutSeconds > 0 {
		body["timeout_seconds"] = in.TimeoutSeconds
	}
	return objectAnswer(t.c.ExecCommandWithBody(ctx, in.Agent, "application/json", jsonBody(body), ed...))
}

type pathIn struct {
	Agent string `json:"agent" jsonschema:"the agent's id"`
	Path  string `json:"path" jsonschema:"absolute, or relative to the directory the agent's commands start in"`
}

func (t *tools) listFiles(ctx context.Context, req *sdk.CallToolRequest, in pathIn) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	return objectAnswer(t.c.ListFiles(ctx, in.Agent, &restapi.ListFilesParams{Path: in.Path}, ed...))
}

type readFileIn struct {
	Agent    string `json:"agent" jsonschema:"the agent's id"`
	Path     string `json:"path" jsonschema:"absolute, or relative to the directory the agent's commands start in"`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"return at most this many bytes"`
}

// content is bytes as a tool returns them: text as is, else base64.
type content struct {
	Data     string `json:"content"`
	Encoding string `json:"encoding"`
}

func encode(b []byte) content {
	if utf8.Valid(b) {
		return content{Data: string(b), Encoding: "utf-8"}
	}
	return content{Data: base64.StdEncoding.EncodeToString(b), Encoding: "base64"}
}

func (t *tools) readFile(ctx context.Context, req *sdk.CallToolRequest, in readFileIn) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	limit := in.MaxBytes
	if limit == 0 {
		limit = defaultReadBytes
	}
	resp, err := t.c.ReadFile(ctx, in.Agent, &restapi.ReadFileParams{Path: in.Path}, ed...)
	if err != nil || resp.StatusCode != http.StatusOK {
		if _, _, err := answer(resp, err); err != nil {
			return nil, nil, err
		}
		return nil, nil, &toolError{Message: fmt.Sprintf("unexpected answer from the server (HTTP %d)", resp.StatusCode), Code: "unexpected_response", Status: resp.StatusCode}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return nil, nil, &toolError{Message: "reading the file from the server: " + err.Error(), Code: "server_unreachable"}
	}
	truncated := len(b) > limit
	if truncated {
		b = b[:limit]
		// Cut at a whole character, so text stays text.
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
	}
	c := encode(b)
	size := resp.ContentLength
	if size < 0 {
		size = int64(len(b))
	}
	return nil, map[string]any{"path": in.Path, "size": size, "content": c.Data, "encoding": c.Encoding, "truncated": truncated}, nil
}

type writeFileIn struct {
	Agent    string `json:"agent" jsonschema:"the agent's id"`
	Path     string `json:"path" jsonschema:"absolute, or relative to the directory the agent's commands start in"`
	Content  string `json:"content" jsonschema:"the file's content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
	Mode     string `json:"mode,omitempty" jsonschema:"octal permission bits, e.g. 0755"`
}

func (t *tools) writeFile(ctx context.Context, req *sdk.CallToolRequest, in writeFileIn) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	data := []byte(in.Content)
	if in.Encoding == "base64" {
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, nil, invalid("content is not valid base64: %v", err)
		}
	}
	params := &restapi.WriteFileParams{Path: in.Path}
	if in.Mode != "" {
		params.Mode = &in.Mode
	}
	if _, _, err := answer(t.c.WriteFileWithBody(ctx, in.Agent, params, "application/octet-stream", bytes.NewReader(data), ed...)); err != nil {
		return nil, nil, err
	}
	return nil, map[string]any{"path": in.Path, "bytes": len(data)}, nil
}

type startSessionIn struct {
	Agent   string            `json:"agent" jsonschema:"the agent's id"`
	Command string            `json:"command" jsonschema:"the program, looked up in PATH"`
	Args    []string          `json:"args,omitempty" jsonschema:"its arguments"`
	Type    string            `json:"type,omitempty" jsonschema:"background (default), interactive or headless (claude stream-json)"`
	Name    string            `json:"name,omitempty" jsonschema:"a name unique among the agent's live sessions"`
	Cwd     string            `json:"cwd,omitempty" jsonschema:"the directory to run in"`
	Env     map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
	Cols    int               `json:"cols,omitempty" jsonschema:"terminal width (default 80)"`
	Rows    int               `json:"rows,omitempty" jsonschema:"terminal height (default 24)"`
}

func (t *tools) startSession(ctx context.Context, req *sdk.CallToolRequest, in startSessionIn) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	body := map[string]any{"command": in.Command}
	for k, v := range map[string]string{"type": in.Type, "name": in.Name, "cwd": in.Cwd} {
		if v != "" {
			body[k] = v
		}
	}
	if len(in.Args) > 0 {
		body["args"] = in.Args
	}
	if len(in.Env) > 0 {
		body["env"] = in.Env
	}
	if in.Cols > 0 {
		body["cols"] = in.Cols
	}
	if in.Rows > 0 {
		body["rows"] = in.Rows
	}
	return objectAnswer(t.c.CreateSessionWithBody(ctx, in.Agent, "application/json", jsonBody(body), ed...))
}

type sessionOutputIn struct {
	SessionID string `json:"session_id" jsonschema:"the session's id (start_session's session_id)"`
	From      *int64 `json:"from,omitempty" jsonschema:"the offset to read from (default: the first byte kept); pass the previous next_offset to read on"`
	MaxBytes  int    `json:"max_bytes,omitempty" jsonschema:"return at most this many bytes"`
	Wait      bool   `json:"wait,omitempty" jsonschema:"at the end of the output, wait up to 30 s for more or for the session's end"`
}

func (t *tools) sessionOutput(ctx context.Context, req *sdk.CallToolRequest, in sessionOutputIn) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	limit := in.MaxBytes
	if limit == 0 {
		limit = defaultReadBytes
	}
	params := &restapi.GetSessionOutputParams{From: in.From, Max: &limit}
	if in.Wait {
		params.Follow = &in.Wait
	}
	accept := func(_ context.Context, r *http.Request) error {
		r.Header.Set("Accept", "application/octet-stream")
		return nil
	}
	b, h, err := answer(t.c.GetSessionOutput(ctx, in.SessionID, params, append(ed, accept)...))
	if err != nil {
		return nil, nil, err
	}
	sb, _, err := answer(t.c.GetSession(ctx, in.SessionID, ed...))
	if err != nil {
		return nil, nil, err
	}
	var sess restapi.Session
	if err := json.Unmarshal(sb, &sess); err != nil {
		return nil, nil, &toolError{Message: "the server sent invalid JSON: " + err.Error(), Code: "unexpected_response"}
	}
	c := encode(b)
	out := map[string]any{
		"session_id":  in.SessionID,
		"state":       sess.State,
		"content":     c.Data,
		"encoding":    c.Encoding,
		"offset":      header64(h, "X-Output-Start"),
		"next_offset": header64(h, "X-Output-End"),
	}
	if sess.ExitCode != nil {
		out["exit_code"] = *sess.ExitCode
	}
	if h.Get("X-Output-Gap") == "true" {
		out["gap"] = h.Get("X-Output-Gap-Reason")
	}
	return nil, out, nil
}

func header64(h http.Header, name string) int64 {
	n, _ := strconv.ParseInt(h.Get(name), 10, 64)
	return n
}

type sessionIn struct {
	SessionID string `json:"session_id" jsonschema:"the session's id"`
}

func (t *tools) killSession(ctx context.Context, req *sdk.CallToolRequest, in sessionIn) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	return objectAnswer(t.c.KillSession(ctx, in.SessionID, ed...))
}

type submitTaskIn struct {
	Manifest       map[string]any `json:"manifest,omitempty" jsonschema:"the task manifest as an object, e.g. {repository: {url: ...}, command: {argv: [sh, -c, make test]}, environment: {runtime: host}}"`
	ManifestYAML   string         `json:"manifest_yaml,omitempty" jsonschema:"the task manifest as YAML text (instead of manifest)"`
	IdempotencyKey string         `json:"idempotency_key,omitempty" jsonschema:"the same key with the same manifest returns the same task"`
}

func (t *tools) submitTask(ctx context.Context, req *sdk.CallToolRequest, in submitTaskIn) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	var body map[string]any
	switch {
	case in.Manifest != nil && in.ManifestYAML != "":
		return nil, nil, invalid("give the manifest once: manifest or manifest_yaml, not both")
	case in.Manifest != nil:
		body = map[string]any{"manifest": in.Manifest}
	case in.ManifestYAML != "":
		body = map[string]any{"manifest_yaml": in.ManifestYAML}
	default:
		return nil, nil, invalid("a task needs its manifest: manifest (an object) or manifest_yaml (YAML text)")
	}
	params := &restapi.CreateTaskParams{}
	if in.IdempotencyKey != "" {
		params.IdempotencyKey = &in.IdempotencyKey
	}
	return objectAnswer(t.c.CreateTaskWithBody(ctx, params, "application/json", jsonBody(body), ed...))
}

type waitTaskIn struct {
	TaskID         string `json:"task_id" jsonschema:"the task's id (submit_task's task_id)"`
	TimeoutSeconds *int   `json:"timeout_seconds,omitempty" jsonschema:"stop waiting after this long (default 600; 0 answers at once)"`
}

// taskEnded are the states a task ends in.
var taskEnded = map[string]bool{"completed": true, "failed": true, "failed_preserved": true, "cancelled": true}

func (t *tools) waitTask(ctx context.Context, req *sdk.CallToolRequest, in waitTaskIn) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	wait := defaultTaskWait
	if in.TimeoutSeconds != nil {
		wait = *in.TimeoutSeconds
	}
	var progress any
	if req != nil && req.Params != nil {
		progress = req.Params.GetProgressToken()
	}
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	lastState, step := "", 0.0
	for {
		b, _, err := answer(t.c.GetTask(ctx, in.TaskID, ed...))
		if err != nil {
			return nil, nil, err
		}
		task, err := object(b)
		if err != nil {
			return nil, nil, err
		}
		state, _ := task.(map[string]any)["state"].(string)
		done := taskEnded[state]
		if progress != nil && state != lastState && req.Session != nil {
			step++
			_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: progress, Progress: step, Message: "task " + in.TaskID + " " + state})
		}
		lastState = state
		if done || !time.Now().Before(deadline) {
			return nil, map[string]any{"done": done, "task": task}, nil
		}
		if err := sleep(ctx, pollEvery); err != nil {
			return nil, nil, err
		}
	}
}

type taskIn struct {
	TaskID string `json:"task_id" jsonschema:"the task's id"`
}

func (t *tools) cancelTask(ctx context.Context, req *sdk.CallToolRequest, in taskIn) (*sdk.CallToolResult, any, error) {
	ed, err := t.editors(req)
	if err != nil {
		return nil, nil, err
	}
	return objectAnswer(t.c.CancelTask(ctx, in.TaskID, ed...))
}
