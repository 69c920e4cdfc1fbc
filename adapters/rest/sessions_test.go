package rest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/core/claudefeed"
	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func init() {
	// SSE bodies are text; the contract declares them as a string.
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
}

type sessionEnv struct {
	*env
	sessions *resttest.Sessions
	log      *resttest.SessionLog
}

func newSessionEnv(t *testing.T, logMax int) *sessionEnv {
	log := resttest.NewSessionLog(logMax)
	ss := resttest.NewSessions(log)
	e := newEnv(t, func(d *Deps) { d.Sessions = ss; d.SessionLog = log })
	return &sessionEnv{env: e, sessions: ss, log: log}
}

// Only an interactive session has a default command: the agent's shell.
func TestSessionsCreateWithoutACommand(t *testing.T) {
	e := newSessionEnv(t, 0)
	expect(t, e.call("POST", "/api/v1/agents/a1/sessions", `{}`), 400, "invalid_request")
	expect(t, e.call("POST", "/api/v1/agents/a1/sessions", `{"type":"headless"}`), 400, "invalid_request")
	r := e.call("POST", "/api/v1/agents/a1/sessions", `{"type":"interactive","name":"sh1"}`)
	expect(t, r, 201, "")
	var sh restapi.Session
	r.decode(t, &sh)
	if sh.Type != restapi.SessionInteractive || sh.Command != "" || sh.Name != "sh1" {
		t.Fatalf("interactive without a command: %+v", sh)
	}
	if specs := e.sessions.Specs(); len(specs) != 1 || specs[0].Command != "" || specs[0].Type != ports.SessionInteractive {
		t.Fatalf("specs %+v", specs)
	}
}

func TestSessionsCreateListGet(t *testing.T) {
	e := newSessionEnv(t, 0)
	r := e.call("POST", "/api/v1/agents/a1/sessions",
		`{"type":"background","name":"dev","command":"sh","args":["-c","echo hi"],"cwd":"/tmp","env":{"A":"1"},"cols":100,"rows":30}`)
	expect(t, r, 201, "")
	var s restapi.Session
	r.decode(t, &s)
	if s.SessionId == "" || s.AgentId != "a1" || s.Name != "dev" || s.Type != restapi.SessionBackground ||
		s.State != restapi.SessionStateSessionRunning || s.Command != "sh" || len(s.Args) != 2 || s.Cwd == nil || *s.Cwd != "/tmp" {
		t.Fatalf("created %+v", s)
	}
	if specs := e.sessions.Specs(); len(specs) != 1 || specs[0].Env["A"] != "1" || specs[0].AgentID != "a1" {
		t.Fatalf("specs %+v", specs)
	}
	// Type defaults to background.
	r = e.call("POST", "/api/v1/agents/a1/sessions", `{"command":"top"}`)
	expect(t, r, 201, "")
	var s2 restapi.Session
	r.decode(t, &s2)
	if s2.Type != restapi.SessionBackground {
		t.Fatalf("default type %q", s2.Type)
	}
	e.sessions.Add(session.Session{ID: "old", AgentID: "a2", Name: "x", Type: ports.SessionHeadless, Command: "claude",
		State: session.Exited, ExitCode: ptr(3), CreatedAt: time.Unix(1, 0), EndedAt: time.Unix(2, 0)})

	expect(t, e.call("POST", "/api/v1/agents/a1/sessions", `{"name":"dev","command":"sh"}`), 409, "session_name_taken")
	expect(t, e.call("POST", "/api/v1/agents/a1/sessions", `{"type":"weird","command":"sh"}`), 400, "invalid_request")
	expect(t, e.call("POST", "/api/v1/agents/a1/sessions", `{"name":"-x","command":"sh"}`), 400, "invalid_request")
	expect(t, e.call("POST", "/api/v1/agents/a1/sessions", `{"command":""}`), 400, "invalid_request")
	expect(t, e.call("POST", "/api/v1/agents/a1/sessions", `{"command":"sh","cols":0}`), 400, "invalid_request")
	expect(t, e.call("POST", "/api/v1/agents/a1/sessions", `{"command":"sh","bogus":1}`), 400, "invalid_request")
	expect(t, e.call("POST", "/api/v1/agents/a1/sessions", `{"command":`), 400, "invalid_json")
	expect(t, e.call("POST", "/api/v1/agents/missing/sessions", `{"command":"sh"}`), 404, "agent_not_found")

	list := func(path string) []restapi.Session {
		t.Helper()
		r := e.call("GET", path, "")
		expect(t, r, 200, "")
		var l restapi.SessionList
		r.decode(t, &l)
		return l.Sessions
	}
	if got := list("/api/v1/sessions"); len(got) != 3 {
		t.Fatalf("all sessions: %+v", got)
	}
	if got := list("/api/v1/sessions?agent_id=a2"); len(got) != 1 || got[0].SessionId != "old" || got[0].ExitCode == nil || *got[0].ExitCode != 3 {
		t.Fatalf("sessions of a2: %+v", got)
	}
	if got := list("/api/v1/sessions?state=running"); len(got) != 2 {
		t.Fatalf("running: %+v", got)
	}
	if got := list("/api/v1/agents/a1/sessions"); len(got) != 2 {
		t.Fatalf("sessions of a1: %+v", got)
	}
	if got := list("/api/v1/agents/nobody/sessions"); len(got) != 0 {
		t.Fatalf("sessions of nobody: %+v", got)
	}
	expect(t, e.call("GET", "/api/v1/sessions?state=bogus", ""), 400, "invalid_request")

	r = e.call("GET", "/api/v1/sessions/"+s.SessionId, "")
	expect(t, r, 200, "")
	var got restapi.Session
	r.decode(t, &got)
	if got.SessionId != s.SessionId || got.Name != "dev" {
		t.Fatalf("get %+v", got)
	}
	expect(t, e.call("GET", "/api/v1/sessions/nope", ""), 404, "session_not_found")
	expect(t, e.callAuth("GET", "/api/v1/sessions", "", ""), 401, "unauthorized")
}

func TestSessionsWithoutUseCase(t *testing.T) {
	e := newEnv(t)
	r := e.call("GET", "/api/v1/sessions", "")
	expect(t, r, 200, "")
	expect(t, e.call("GET", "/api/v1/sessions/x", ""), 404, "session_not_found")
	expect(t, e.call("GET", "/api/v1/sessions/x/output", ""), 404, "session_not_found")
	expect(t, e.call("POST", "/api/v1/agents/a1/sessions", `{"command":"sh"}`), 404, "agent_not_found")
}

func TestSessionOutputPlain(t *testing.T) {
	e := newSessionEnv(t, 16)
	e.sessions.Add(session.Session{ID: "s9", AgentID: "a1", Name: "b", Type: ports.SessionBackground, Command: "sh", State: session.Running})
	e.sessions.Output("s9", "hello world")

	r := e.call("GET", "/api/v1/sessions/s9/output", "")
	expect(t, r, 200, "")
	if string(r.body) != "hello world" || r.header.Get("X-Output-Start") != "0" || r.header.Get("X-Output-End") != "11" ||
		r.header.Get("X-Output-Gap") != "false" || r.header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("plain read: %q %v", r.body, r.header)
	}
	r = e.call("GET", "/api/v1/sessions/s9/output?from=6&max=3", "")
	expect(t, r, 200, "")
	if string(r.body) != "wor" || r.header.Get("X-Output-Start") != "6" || r.header.Get("X-Output-End") != "9" {
		t.Fatalf("ranged read: %q %v", r.body, r.header)
	}
	// At the end: empty.
	r = e.call("GET", "/api/v1/sessions/s9/output?from=11", "")
	expect(t, r, 200, "")
	if len(r.body) != 0 || r.header.Get("X-Output-End") != "11" {
		t.Fatalf("read at end: %q %v", r.body, r.header)
	}
	expect(t, e.call("GET", "/api/v1/sessions/s9/output?from=12", ""), 400, "offset_beyond_end")
	expect(t, e.call("GET", "/api/v1/sessions/s9/output?from=-1", ""), 400, "invalid_request")
	expect(t, e.call("GET", "/api/v1/sessions/s9/output?from=x", ""), 400, "invalid_request")
	expect(t, e.call("GET", "/api/v1/sessions/s9/output?max=0", ""), 400, "invalid_request")
	expect(t, e.call("GET", "/api/v1/sessions/s9/output?follow=maybe", ""), 400, "invalid_request")
	expect(t, e.call("GET", "/api/v1/sessions/nope/output", ""), 404, "session_not_found")

	// The log holds 16 bytes: the oldest are dropped and a read from 0 says so.
	e.sessions.Output("s9", "0123456789")
	r = e.call("GET", "/api/v1/sessions/s9/output?from=0", "")
	expect(t, r, 200, "")
	if string(r.body) != "world0123456789" && r.header.Get("X-Output-Gap") != "true" {
		t.Fatalf("gap read: %q %v", r.body, r.header)
	}
	if string(r.body) != " world0123456789" || r.header.Get("X-Output-Start") != "5" || r.header.Get("X-Output-Gap") != "true" ||
		r.header.Get("X-Output-Gap-Reason") != "dropped" || r.header.Get("X-Output-Lost") != "0" {
		t.Fatalf("gap read: %q %v", r.body, r.header)
	}

	// follow=true waits for output at the end.
	go func() {
		time.Sleep(50 * time.Millisecond)
		e.sessions.Output("s9", "late")
	}()
	r = e.call("GET", "/api/v1/sessions/s9/output?from=21&follow=true", "")
	expect(t, r, 200, "")
	if string(r.body) != "late" || r.header.Get("X-Output-Start") != "21" {
		t.Fatalf("follow read: %q %v", r.body, r.header)
	}
	// …and returns at once, empty, once the session has ended.
	e.sessions.Exit("s9", 0)
	r = e.call("GET", "/api/v1/sessions/s9/output?from=25&follow=true", "")
	expect(t, r, 200, "")
	if len(r.body) != 0 {
		t.Fatalf("follow after end: %q", r.body)
	}
}

type sseFrame struct {
	event, id, data string
}

// readFrames reads SSE frames until n are read or the stream ends; the raw
// bytes go to raw.
func readFrames(t *testing.T, br *bufio.Reader, raw *bytes.Buffer, n int) []sseFrame {
	t.Helper()
	var out []sseFrame
	var cur sseFrame
	for len(out) < n {
		line, err := br.ReadString('\n')
		raw.WriteString(line)
		if err != nil {
			if err == io.EOF {
				return out
			}
			t.Fatalf("reading the stream: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if cur.event != "" {
				out = append(out, cur)
			}
			cur = sseFrame{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return out
}

func TestSessionOutputSSE(t *testing.T) {
	e := newSessionEnv(t, 16)
	e.sessions.Add(session.Session{ID: "s9", AgentID: "a1", Name: "b", Type: ports.SessionBackground, Command: "sh", State: session.Running})
	e.sessions.Output("s9", "0123456789abcdefXYZ") // 19 bytes, 3 dropped

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/api/v1/sessions/s9/output?from=0", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	var raw bytes.Buffer
	frames := readFrames(t, br, &raw, 2)
	if len(frames) != 2 || frames[0].event != "gap" || frames[0].data != `{"from":0,"to":3,"reason":"dropped","lost":0}` {
		t.Fatalf("first frames %+v", frames)
	}
	var out sseOutput
	if frames[1].event != "output" || json.Unmarshal([]byte(frames[1].data), &out) != nil ||
		out.Offset != 3 || out.Data != "3456789abcdefXYZ" || out.Encoding != "utf-8" || frames[1].id != "19" {
		t.Fatalf("output frame %+v", frames[1])
	}

	// Live output follows, non-UTF-8 bytes as base64.
	e.sessions.Output("s9", "live\n")
	frames = readFrames(t, br, &raw, 1)
	if len(frames) != 1 || frames[0].event != "output" || !strings.Contains(frames[0].data, `"offset":19,"data":"live\n"`) {
		t.Fatalf("live frame %+v", frames)
	}
	e.sessions.Output("s9", "\xff\xfe")
	frames = readFrames(t, br, &raw, 1)
	if json.Unmarshal([]byte(frames[0].data), &out) != nil || out.Encoding != "base64" || out.Offset != 24 ||
		out.Data != base64.StdEncoding.EncodeToString([]byte("\xff\xfe")) {
		t.Fatalf("binary frame %+v", frames)
	}

	// The end of the session ends the stream with an exited frame.
	e.sessions.Exit("s9", 7)
	frames = readFrames(t, br, &raw, 2)
	if len(frames) != 1 || frames[0].event != "exited" || frames[0].data != `{"state":"exited","exit_code":7,"end":26}` {
		t.Fatalf("end frames %+v", frames)
	}
	checkContract(t, req, resp.StatusCode, resp.Header, raw.Bytes())
}

func TestSessionOutputSSEResumesAndStopsWithClient(t *testing.T) {
	e := newSessionEnv(t, 0)
	e.sessions.Add(session.Session{ID: "s9", AgentID: "a1", Name: "b", Type: ports.SessionBackground, Command: "sh", State: session.Running})
	e.sessions.Output("s9", "abcdef")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/api/v1/sessions/s9/output", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", "4")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	frames := readFrames(t, bufio.NewReader(resp.Body), &raw, 1)
	if len(frames) != 1 || !strings.Contains(frames[0].data, `"offset":4,"data":"ef"`) {
		t.Fatalf("resumed frames %+v", frames)
	}
	// The client goes away; the server notices and the handler returns
	// (httptest's Close waits for it at cleanup).
	cancel()
}

func TestSessionActivity(t *testing.T) {
	e := newSessionEnv(t, 0)
	e.sessions.Add(session.Session{ID: "h1", AgentID: "a1", Name: "h", Type: ports.SessionHeadless, Command: "claude", State: session.Running})
	e.sessions.Add(session.Session{ID: "b1", AgentID: "a1", Name: "b", Type: ports.SessionBackground, Command: "sh", State: session.Running})
	e.sessions.SetActivity("h1", []claudefeed.Event{
		{Kind: claudefeed.KindInit, Seq: 1, SessionID: "cs", Model: "m", Tools: []string{"Bash"}, CWD: "/w"},
		{Kind: claudefeed.KindToolCall, Seq: 2, ToolName: "Bash", ToolUseID: "t1", ToolInput: json.RawMessage(`{"command":"ls"}`), Text: "ls"},
		{Kind: claudefeed.KindResult, Seq: 3, Subtype: "success", CostUSD: 0.25, NumTurns: 2, DurationMS: 10, Result: "ok"},
	}, claudefeed.Summary{Turns: 2, ToolCalls: 1, ToolsUsed: map[string]int{"Bash": 1}, Done: true, Success: true, CostUSD: 0.25, Result: "ok"})

	r := e.call("GET", "/api/v1/sessions/h1/activity", "")
	expect(t, r, 200, "")
	var a restapi.SessionActivity
	r.decode(t, &a)
	if len(a.Events) != 3 || a.Events[1].Kind != restapi.ActivityToolCall || *a.Events[1].ToolName != "Bash" ||
		a.Events[2].CostUsd == nil || *a.Events[2].CostUsd != 0.25 || !a.Summary.Done || a.Summary.ToolsUsed["Bash"] != 1 {
		t.Fatalf("activity %s", r.body)
	}
	if !strings.Contains(string(r.body), `"tool_input":{"command":"ls"}`) {
		t.Fatalf("tool input not verbatim: %s", r.body)
	}
	r = e.call("GET", "/api/v1/sessions/h1/activity?after=2", "")
	expect(t, r, 200, "")
	r.decode(t, &a)
	if len(a.Events) != 1 || a.Events[0].Seq != 3 {
		t.Fatalf("after=2: %s", r.body)
	}
	expect(t, e.call("GET", "/api/v1/sessions/b1/activity", ""), 409, "not_headless")
	expect(t, e.call("GET", "/api/v1/sessions/nope/activity", ""), 404, "session_not_found")
	expect(t, e.call("GET", "/api/v1/sessions/h1/activity?after=x", ""), 400, "invalid_request")
	expect(t, e.call("GET", "/api/v1/sessions/h1/activity?after=-1", ""), 400, "invalid_request")
}

// holeLog is a session log with a hole: bytes 5-9 could not be stored.
type holeLog struct{ *resttest.SessionLog }

func (l holeLog) ReadFrom(id string, offset uint64, max int) ([]byte, uint64, bool, error) {
	switch {
	case offset < 5:
		data, start, gap, err := l.SessionLog.ReadFrom(id, offset, min(max, int(5-offset)))
		return data, start, gap, err
	case offset < 10:
		data, start, _, err := l.SessionLog.ReadFrom(id, 10, max)
		return data, start, true, err
	}
	return l.SessionLog.ReadFrom(id, offset, max)
}

func (l holeLog) Lost(string) uint64 { return 5 }

// Bytes that could not be stored (a full disk): the plain read says gap,
// why (not_stored) and how many of the session's bytes are lost; the SSE
// stream sends a gap frame saying the same.
func TestSessionOutputNotStored(t *testing.T) {
	log := holeLog{resttest.NewSessionLog(0)}
	ss := resttest.NewSessions(log.SessionLog)
	e := newEnv(t, func(d *Deps) { d.Sessions = ss; d.SessionLog = log })
	ss.Add(session.Session{ID: "s1", AgentID: "a1", Name: "b", Type: ports.SessionBackground, Command: "sh", State: session.Running})
	ss.Output("s1", "01234-----abcde")

	r := e.call("GET", "/api/v1/sessions/s1/output", "")
	expect(t, r, 200, "")
	if string(r.body) != "01234" || r.header.Get("X-Output-Gap") != "false" || r.header.Get("X-Output-End") != "5" || r.header.Get("X-Output-Lost") != "5" {
		t.Fatalf("read up to the hole: %q %v", r.body, r.header)
	}
	r = e.call("GET", "/api/v1/sessions/s1/output?from=5", "")
	expect(t, r, 200, "")
	if string(r.body) != "abcde" || r.header.Get("X-Output-Start") != "10" || r.header.Get("X-Output-Gap") != "true" ||
		r.header.Get("X-Output-Gap-Reason") != "not_stored" || r.header.Get("X-Output-Lost") != "5" {
		t.Fatalf("read across the hole: %q %v", r.body, r.header)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/api/v1/sessions/s1/output?from=0", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	frames := readFrames(t, bufio.NewReader(resp.Body), &raw, 3)
	if len(frames) != 3 || frames[0].event != "output" || frames[1].event != "gap" ||
		frames[1].data != `{"from":5,"to":10,"reason":"not_stored","lost":5}` || frames[2].event != "output" {
		t.Fatalf("frames %+v", frames)
	}
}
