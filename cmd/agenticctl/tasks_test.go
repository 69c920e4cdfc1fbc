package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
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
