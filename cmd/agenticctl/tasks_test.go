package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// task logs reads the task's event stream with the operator's token and
// prints only the output events' data, up to the end event.
func TestTaskLogs(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/tasks/t1/events" || r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, `{"code":"not_found","message":"no"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: phase\ndata: {\"phase\":\"running\"}\n\n"+
			"event: output\ndata: {\"data\":\"line-one\\n\"}\n\n"+
			"event: output\ndata: {\"data\":\"line-two\\n\"}\n\n"+
			"event: end\ndata: {}\n\n")
	}))
	t.Cleanup(srv.Close)
	f := &fixture{url: srv.URL}
	if r := f.run(t, "", "task", "logs", "-f", "t1"); r.code != 0 || r.stdout != "line-one\nline-two\n" {
		t.Fatalf("task logs -f: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if r := f.run(t, "", "task", "logs", "nope"); r.code == 0 {
		t.Fatalf("task logs of an unknown task: exit 0, %q", r.stdout)
	}
}

// pool rm and env rm send the delete of the one name and say so.
func TestDeleteByName(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	f := &fixture{url: srv.URL}
	for _, verb := range []string{"pool", "env"} {
		if r := f.run(t, "", verb, "rm", "warm"); r.code != 0 || r.stdout != "warm deleted\n" {
			t.Fatalf("%s rm: exit %d, %q %q", verb, r.code, r.stdout, r.stderr)
		}
	}
	if fmt.Sprint(got) != "[DELETE /api/v1/pools/warm DELETE /api/v1/environments/warm]" {
		t.Fatalf("requests %v", got)
	}
}

// task submit --follow shows what the server streams: each phase with how
// long the one before took, claude's tool calls, messages and result, the
// run's own output lines (not claude's stream-json), and at the end the
// reason once, the error with what to do, and the run's exit code. It
// showed phases only, and "non_zero_exit non_zero_exit (exit code 127)".
func TestTaskSubmitFollowShowsProgress(t *testing.T) {
	const stream = "id: 1\nevent: state\ndata: {\"state\":\"pending\",\"at\":\"2026-05-09T07:00:00Z\"}\n\n" +
		"id: 2\nevent: state\ndata: {\"state\":\"running\",\"at\":\"2026-05-09T07:00:01.5Z\"}\n\n" +
		"id: 3\nevent: output\ndata: {\"offset\":0,\"data\":\"{\\\"type\\\":\\\"assistant\\\"}\\nwarning: slow dis\"}\n\n" +
		"id: 4\nevent: activity\ndata: {\"kind\":\"tool_call\",\"tool_name\":\"Edit\"}\n\n" +
		"id: 5\nevent: output\ndata: {\"offset\":40,\"data\":\"k\\n\"}\n\n" +
		"id: 6\nevent: activity\ndata: {\"kind\":\"assistant_text\",\"text\":\"I fixed it.\\nMore.\"}\n\n" +
		"id: 7\nevent: activity\ndata: {\"kind\":\"result\",\"text\":\"done\"}\n\n" +
		"id: 8\nevent: state\ndata: {\"state\":\"failed\",\"at\":\"2026-05-09T07:00:03Z\",\"reason\":\"non_zero_exit\"}\n\n" +
		"id: 9\nevent: end\ndata: {\"id\":\"t1\",\"name\":\"x\",\"labels\":{},\"state\":\"failed\",\"reason\":\"non_zero_exit\"," +
		"\"error\":\"exit code 127: command not found: \\\"claude\\\" — use an image that has Claude Code\",\"exit_code\":127," +
		"\"created_at\":\"2026-05-09T07:00:00Z\",\"state_changed_at\":\"2026-05-09T07:00:03Z\",\"phases\":[]," +
		"\"environment\":{\"name\":\"task-1\",\"runtime\":\"host\"},\"progress\":{\"output_bytes\":42,\"tool_calls\":1,\"turns\":2,\"cost_usd\":0.25}}\n\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method + " " + r.URL.Path {
		case "POST /api/v1/tasks":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprint(w, `{"task_id":"t1","state":"pending"}`)
		case "GET /api/v1/tasks/t1/events":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, stream)
		default:
			http.Error(w, `{"code":"not_found","error":"no"}`, http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	f := &fixture{url: srv.URL}
	r := f.run(t, "claude: {prompt: fix it}\n", "task", "submit", "-f", "-", "--follow")
	want := "07:00:00.000  pending\n" +
		"07:00:01.500  running (pending took 1.5s)\n" +
		"  tool Edit\n" +
		"  | warning: slow disk\n" +
		"  claude: I fixed it. …\n" +
		"  result: done\n" +
		"07:00:03.000  failed (running took 1.5s)\n" +
		"  output 42 B, tool calls 1, turns 2, cost $0.2500\n"
	if r.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}
	wantErr := "task t1\nagenticctl: task t1 failed (non_zero_exit): exit code 127: command not found: \"claude\" — use an image that has Claude Code\n"
	if r.code != 127 || r.stderr != wantErr {
		t.Errorf("exit %d, stderr:\n%s\nwant 127 and:\n%s", r.code, r.stderr, wantErr)
	}
}

// A follow whose stream is cut off (the server restarted) opens it again
// after the last event it saw, and shows nothing twice.
func TestTaskFollowResumesAfterTheLastEvent(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/tasks/t1/events" {
			http.Error(w, `{"code":"not_found","error":"no"}`, http.StatusNotFound)
			return
		}
		asked = append(asked, r.Header.Get("Last-Event-ID"))
		w.Header().Set("Content-Type", "text/event-stream")
		if r.Header.Get("Last-Event-ID") == "" {
			fmt.Fprint(w, "id: 1\nevent: state\ndata: {\"state\":\"running\",\"at\":\"2026-05-09T07:00:00Z\"}\n\n"+
				"id: 2\nevent: output\ndata: {\"offset\":0,\"data\":\"before\\n\"}\n\n")
			return // cut off
		}
		fmt.Fprint(w, "id: 3\nevent: output\ndata: {\"offset\":7,\"data\":\"after\\n\"}\n\n"+
			"id: 4\nevent: end\ndata: {\"id\":\"t1\",\"name\":\"x\",\"labels\":{},\"state\":\"completed\",\"created_at\":\"2026-05-09T07:00:00Z\","+
			"\"state_changed_at\":\"2026-05-09T07:00:01Z\",\"phases\":[],\"environment\":{\"name\":\"e\",\"runtime\":\"host\"},"+
			"\"progress\":{\"output_bytes\":13,\"tool_calls\":0,\"turns\":0,\"cost_usd\":0}}\n\n")
	}))
	t.Cleanup(srv.Close)
	var out, errb strings.Builder
	c := &cli{stdout: &out, stderr: &errb, env: envOf("AGENTIC_SERVER", srv.URL, "AGENTIC_OPERATOR_TOKEN", token)}
	cl, server, err := c.client()
	if err != nil {
		t.Fatal(err)
	}
	code := c.followTask(cl, server, "t1", false)
	want := "07:00:00.000  running\n  | before\n  | after\n  output 13 B\n"
	if code != 0 || out.String() != want || fmt.Sprint(asked) != "[ 2]" {
		t.Errorf("exit %d, asked after %q, printed:\n%s\nwant:\n%s%s", code, asked, out.String(), want, errb.String())
	}
}
