package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// ls prints the header the README shows above its rows (it printed none).
func TestLsHasAHeader(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"path":"/w/work","entries":[{"name":"report.md","type":"file","mode":"0644","size":12,"mtime":"2026-05-09T07:13:22Z"}]}`)
	}))
	t.Cleanup(srv.Close)
	f := &fixture{url: srv.URL}
	r := f.run(t, "", "ls", "dev-1:work")
	want := "TYPE  MODE  SIZE  MODIFIED              NAME\n" +
		"file  0644  12    2026-05-09T07:13:22Z  report.md\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("ls: exit %d\n%s\nwant:\n%s", r.code, r.stdout, want)
	}
	if r := f.run(t, "", "ls", "--help"); !strings.Contains(r.stdout, ": TYPE MODE SIZE MODIFIED NAME.") {
		t.Errorf("ls --help does not name the columns as printed: %q", r.stdout)
	}
}
