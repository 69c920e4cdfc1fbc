package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// followSSE reads a session's output as an SSE stream until the exited frame
// and returns the bytes and the exited frame's data.
func followSSE(t *testing.T, s *harness.Server, id string) (out []byte, exited string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.RESTURL+"/api/v1/sessions/"+id+"/output", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("output stream: status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	var event, data string
	next := int64(-1)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended without an exited frame (%v); got %q", err, out)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
			continue
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
			continue
		case line != "":
			continue
		}
		switch event {
		case "output":
			var f struct {
				Offset   int64  `json:"offset"`
				Data     string `json:"data"`
				Encoding string `json:"encoding"`
			}
			if err := json.Unmarshal([]byte(data), &f); err != nil {
				t.Fatalf("output frame %q: %v", data, err)
			}
			if next >= 0 && f.Offset != next {
				t.Fatalf("output frame at %d, want %d (no gap, no duplicate)", f.Offset, next)
			}
			b := []byte(f.Data)
			if f.Encoding == "base64" {
				if b, err = base64.StdEncoding.DecodeString(f.Data); err != nil {
					t.Fatal(err)
				}
			}
			out = append(out, b...)
			next = f.Offset + int64(len(b))
		case "gap":
			t.Fatalf("unexpected gap frame %s", data)
		case "exited":
			return out, data
		}
		event, data = "", ""
	}
}

func createSession(t *testing.T, s *harness.Server, agent string, req restapi.CreateSessionRequest) restapi.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	resp, err := s.Client().CreateSessionWithResponse(ctx, agent, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.JSON201 == nil {
		t.Fatalf("create session: status %d: %s", resp.StatusCode(), resp.Body)
	}
	return *resp.JSON201
}

func TestSessionsOverREST(t *testing.T) {
	s := startServer(t, 1, "")

	t.Run("background session streamed over SSE", func(t *testing.T) {
		bg := restapi.SessionBackground
		sess := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &bg, Name: ptr("lines"), Command: "sh",
			Args: ptr([]string{"-c", "for i in 1 2 3; do echo line$i; sleep 0.2; done"})})
		if sess.AgentId != "host-01" || sess.Name != "lines" || sess.Type != restapi.SessionBackground {
			t.Fatalf("created %+v", sess)
		}
		out, exited := followSSE(t, s, sess.SessionId)
		// Sessions run in a PTY: each \n reaches the log as \r\n.
		if want := "line1\r\nline2\r\nline3\r\n"; string(out) != want {
			t.Fatalf("output %q, want %q", out, want)
		}
		if !strings.Contains(exited, `"state":"exited"`) || !strings.Contains(exited, `"exit_code":0`) {
			t.Fatalf("exited frame %s", exited)
		}
		resp, err := s.Client().GetSessionWithResponse(context.Background(), sess.SessionId)
		if err != nil || resp.JSON200 == nil {
			t.Fatalf("get session: %v %v", err, resp)
		}
		got := resp.JSON200
		if got.State != restapi.SessionStateSessionExited || got.ExitCode == nil || *got.ExitCode != 0 || got.EndedAt == nil {
			t.Fatalf("session %s", resp.Body)
		}
		// The plain read returns the same bytes, with their offsets.
		out2, err := s.Client().GetSessionOutput(context.Background(), sess.SessionId, &restapi.GetSessionOutputParams{From: ptr(int64(0))})
		if err != nil {
			t.Fatal(err)
		}
		defer out2.Body.Close()
		if out2.StatusCode != 200 || out2.Header.Get("X-Output-Start") != "0" || out2.Header.Get("X-Output-End") != "21" || out2.Header.Get("X-Output-Gap") != "false" {
			t.Fatalf("plain read: %d %v", out2.StatusCode, out2.Header)
		}
	})

	t.Run("headless activity feed", func(t *testing.T) {
		root, err := harness.ModuleRoot()
		if err != nil {
			t.Fatal(err)
		}
		hl := restapi.SessionHeadless
		sess := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &hl,
			Command: filepath.Join(root, "core", "claudefeed", "testdata", "fake-claude"),
			Args:    ptr([]string{"-p", "which go", "--output-format", "stream-json", "--verbose"}),
			Env:     ptr(map[string]string{"FAKE_CLAUDE_SLEEP": "0"})})
		var act *restapi.SessionActivity
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := s.Client().GetSessionActivityWithResponse(context.Background(), sess.SessionId, nil)
			if err != nil || resp.JSON200 == nil {
				t.Fatalf("activity: %v %v", err, resp)
			}
			if act = resp.JSON200; act.Summary.Done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no final result: %s", resp.Body)
			}
			time.Sleep(50 * time.Millisecond)
		}
		var bash, result bool
		for _, e := range act.Events {
			if e.Kind == restapi.ActivityToolCall && e.ToolName != nil && *e.ToolName == "Bash" {
				bash = true
			}
			if e.Kind == restapi.ActivityResult && e.CostUsd != nil && *e.CostUsd > 0 {
				result = true
			}
		}
		if !bash || !result || act.Summary.CostUsd <= 0 || act.Summary.ToolsUsed["Bash"] < 1 {
			t.Fatalf("activity: bash tool call %v, result with cost %v, summary %+v", bash, result, act.Summary)
		}
		// A background session has no feed.
		resp, err := s.Client().ListSessionsWithResponse(context.Background(), &restapi.ListSessionsParams{AgentId: ptr("host-01")})
		if err != nil || resp.JSON200 == nil || len(resp.JSON200.Sessions) < 2 {
			t.Fatalf("list: %v %v", err, resp)
		}
		for _, x := range resp.JSON200.Sessions {
			if x.Type == restapi.SessionBackground {
				r, err := s.Client().GetSessionActivityWithResponse(context.Background(), x.SessionId, nil)
				if err != nil || r.StatusCode() != 409 {
					t.Fatalf("activity of a background session: %v %d %s", err, r.StatusCode(), r.Body)
				}
			}
		}
	})
}
