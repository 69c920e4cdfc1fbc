package mcp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// fakeREST answers like the REST API for the routes the tests use and
// records what reached it.
type fakeREST struct {
	mu    sync.Mutex
	auths []string
	body  map[string]any
}

func (f *fakeREST) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.auths = append(f.auths, r.Header.Get("Authorization"))
	f.mu.Unlock()
	switch {
	case r.Header.Get("Authorization") != "Bearer good":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":"missing or wrong bearer token","code":"unauthorized"}`)
	case r.URL.Path == "/api/v1/agents/a1/exec":
		var b map[string]any
		_ = json.NewDecoder(r.Body).Decode(&b)
		f.mu.Lock()
		f.body = b
		f.mu.Unlock()
		_, _ = io.WriteString(w, `{"command_id":"ex-1","agent_id":"a1","exit_code":0,"stdout":"hi\n","stderr":"","encoding":"utf-8","duration_ms":1,"timed_out":false,"success":true,"truncated":false}`)
	case r.URL.Path == "/api/v1/agents":
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "upstream down")
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":"no such agent","code":"agent_not_found"}`)
	}
}

// connect serves the tools over in-memory transports; forward makes them
// send the Authorization the call's request carried (header).
func connect(t *testing.T, f *fakeREST, forward bool, header http.Header) *sdk.ClientSession {
	t.Helper()
	cl, err := restapi.NewClient("http://in-process", restapi.WithHTTPClient(&http.Client{Transport: inProcess{f}}),
		restapi.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			if !forward {
				r.Header.Set("Authorization", "Bearer good")
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(cl, Options{ForwardAuthorization: forward})
	if header != nil {
		srv.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
			return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
				if ctr, ok := req.(*sdk.CallToolRequest); ok {
					ctr.Extra = &sdk.RequestExtra{Header: header}
				}
				return next(ctx, method, req)
			}
		})
	}
	ct, st := sdk.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func call(t *testing.T, cs *sdk.ClientSession, name string, args any) (*sdk.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	text := ""
	if len(res.Content) > 0 {
		text = res.Content[0].(*sdk.TextContent).Text
	}
	return res, text
}

// exec sends the REST API only the fields given, and passes its answer on
// as the structured result.
func TestExecSendsOnlyWhatWasGiven(t *testing.T) {
	f := &fakeREST{}
	cs := connect(t, f, false, nil)
	res, text := call(t, cs, "exec", map[string]any{"agent": "a1", "command": "echo", "args": []string{"hi"}})
	if res.IsError {
		t.Fatalf("exec: %s", text)
	}
	out, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(out), `"stdout":"hi\n"`) {
		t.Errorf("structured content %s", out)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.body) != 2 || f.body["command"] != "echo" {
		t.Errorf("REST body %v, want only command and args", f.body)
	}
}

// REST errors come back as tool errors with the REST code and status; an
// answer that is not the REST error shape is said to be unexpected.
func TestErrorsCarryTheRESTCode(t *testing.T) {
	cs := connect(t, &fakeREST{}, false, nil)
	for _, c := range []struct {
		tool   string
		args   map[string]any
		code   string
		status int
	}{
		{"exec", map[string]any{"agent": "nope", "command": "true"}, "agent_not_found", 404},
		{"list_agents", map[string]any{}, "unexpected_response", 502},
		{"submit_task", map[string]any{}, "invalid_request", 0},
	} {
		res, text := call(t, cs, c.tool, c.args)
		var e toolError
		if !res.IsError || json.Unmarshal([]byte(text), &e) != nil || e.Code != c.code || e.Status != c.status || e.Message == "" {
			t.Errorf("%s: error=%v %q, want code %s status %d", c.tool, res.IsError, text, c.code, c.status)
		}
	}
}

// With ForwardAuthorization a call sends the REST API exactly the
// Authorization its own request carried, and without one it is refused
// before the REST API is asked.
func TestForwardedAuthorization(t *testing.T) {
	f := &fakeREST{}
	cs := connect(t, f, true, http.Header{"Authorization": {"Bearer good"}})
	if res, text := call(t, cs, "exec", map[string]any{"agent": "a1", "command": "true"}); res.IsError {
		t.Fatalf("exec with the token: %s", text)
	}
	bad := connect(t, f, true, http.Header{"Authorization": {"Bearer bad"}})
	res, text := call(t, bad, "exec", map[string]any{"agent": "a1", "command": "true"})
	if !res.IsError || !strings.Contains(text, `"code":"unauthorized"`) {
		t.Errorf("exec with a wrong token: %v %s", res.IsError, text)
	}
	f.mu.Lock()
	got := strings.Join(f.auths, ",")
	f.mu.Unlock()
	if got != "Bearer good,Bearer bad" {
		t.Errorf("Authorization sent to REST: %q", got)
	}
	none := connect(t, f, true, nil)
	res, text = call(t, none, "exec", map[string]any{"agent": "a1", "command": "true"})
	if !res.IsError || !strings.Contains(text, `"code":"unauthorized"`) {
		t.Errorf("exec without a header: %v %s", res.IsError, text)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.auths) != 2 {
		t.Errorf("a call without Authorization reached REST: %v", f.auths)
	}
}

// The in-process transport streams the handler's answer as it is written,
// turns a panic into an error of the body, and ends the handler when the
// caller closes the body.
func TestInProcessTransport(t *testing.T) {
	release := make(chan struct{})
	ended := make(chan struct{})
	h := http.NewServeMux()
	h.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		w.Header().Set("X-Test", "1")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "first")
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	h.HandleFunc("GET /panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	c := &http.Client{Transport: inProcess{h}}

	resp, err := c.Get("http://x/stream")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("X-Test") != "1" {
		t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first" {
		t.Fatalf("first bytes %q %v, before the handler ended", buf, err)
	}
	_ = resp.Body.Close()
	select {
	case <-ended:
	case <-time.After(15 * time.Second):
		t.Fatal("closing the body did not end the handler")
	}

	resp, err = c.Get("http://x/panic")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusInternalServerError || err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("panic: %d %v", resp.StatusCode, err)
	}

	rec := httptest.NewRecorder()
	Mount(h, HTTPOptions{Token: "tok"}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader("{}")))
	var e restapi.Error
	if rec.Code != http.StatusUnauthorized || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code != "unauthorized" {
		t.Errorf("/mcp without a token: %d %s", rec.Code, rec.Body)
	}
}

// wait_task polls until the task ends and tells a client that asked for
// progress each state it saw.
func TestWaitTaskReportsProgress(t *testing.T) {
	var mu sync.Mutex
	gets := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gets++
		state := "running"
		if gets > 2 {
			state = "completed"
		}
		mu.Unlock()
		_, _ = io.WriteString(w, `{"id":"t1","state":"`+state+`"}`)
	})
	cl, err := restapi.NewClient("http://in-process", restapi.WithHTTPClient(&http.Client{Transport: inProcess{h}}))
	if err != nil {
		t.Fatal(err)
	}
	ct, st := sdk.NewInMemoryTransports()
	ss, err := NewServer(cl, Options{}).Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	progress := make(chan string, 16)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			progress <- req.Params.Message
		},
	}).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	params := &sdk.CallToolParams{Name: "wait_task", Arguments: map[string]any{"task_id": "t1", "timeout_seconds": 60}}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("wait_task: %v %v", err, res)
	}
	out, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(out), `"done":true`) || !strings.Contains(string(out), `"state":"completed"`) {
		t.Errorf("wait_task: %s", out)
	}
	var seen []string
	for len(seen) < 2 {
		select {
		case m := <-progress:
			seen = append(seen, m)
		case <-time.After(15 * time.Second):
			t.Fatalf("progress seen: %v, want running then completed", seen)
		}
	}
	if seen[0] != "task t1 running" || seen[1] != "task t1 completed" {
		t.Errorf("progress %v", seen)
	}
}
