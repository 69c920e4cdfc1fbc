package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// notifyWriter is a buffer that signals each write.
type notifyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestExecPrintsOutputAsItComes: agenticctl exec asks for the output as it
// comes (multipart/mixed from this server), so a command's output is printed while the command still runs
// (the fake command ends only after the test saw it), bytes exact on both
// streams, and the exit code is the command's.
func TestExecPrintsOutputAsItComes(t *testing.T) {
	f := newFixture(t)
	out := &notifyWriter{wrote: make(chan struct{}, 1)}
	var errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"exec", "host-01", "--", "sleep"}, strings.NewReader(""), out, &errb,
			envOf("AGENTIC_SERVER", f.url, "AGENTIC_OPERATOR_TOKEN", token))
	}()
	c := testkit.Receive(t, 15*time.Second, f.link.Started(), "no command started")
	c.Stdout("first\n")
	testkit.Receive(t, 15*time.Second, out.wrote, "the first output was not printed while the command ran")
	if got := out.String(); got != "first\n" {
		t.Fatalf("stdout %q", got)
	}
	c.Emit(ports.StreamStdout, []byte{0xff, 0x00, 0xfe})
	c.Stderr("warn\n")
	c.Exit(4)
	if code := testkit.Receive(t, 15*time.Second, done, "agenticctl did not return"); code != 4 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if got := out.String(); got != "first\n\xff\x00\xfe" || errb.String() != "warn\n" {
		t.Fatalf("stdout %q, stderr %q", got, errb.String())
	}
}

// TestExecStreamLost: a command its agent lost ends agenticctl exec with
// the JSON form's agent_gone error.
func TestExecStreamLost(t *testing.T) {
	f := newFixture(t)
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"exec", "host-01", "--", "sleep"}, strings.NewReader(""), &out, &errb,
			envOf("AGENTIC_SERVER", f.url, "AGENTIC_OPERATOR_TOKEN", token))
	}()
	c := testkit.Receive(t, 15*time.Second, f.link.Started(), "no command started")
	c.Lose()
	if code := testkit.Receive(t, 15*time.Second, done, "agenticctl did not return"); code != exitError || !strings.Contains(errb.String(), "agent_gone") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// TestExecAsksForMultipartTakesNDJSON: agenticctl exec prefers the raw
// multipart form and still reads NDJSON, which a server without the
// multipart form answers: the output bytes exact (text and base64 lines),
// the exit code the end line's.
func TestExecAsksForMultipartTakesNDJSON(t *testing.T) {
	accepts := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/agents/host-01/exec" {
			http.Error(w, `{"error":"no","code":"not_found"}`, http.StatusNotFound)
			return
		}
		accepts <- r.Header.Get("Accept")
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, `{"stream":"stdout","data":"text\n"}`+"\n"+
			`{"stream":"stdout","data_b64":"/wD+"}`+"\n"+
			`{"stream":"stderr","data":"warn\n"}`+"\n"+
			`{"command_id":"ex-1","agent_id":"host-01","exit_code":6,"success":false,"timed_out":false,"truncated":false,"duration_ms":1}`+"\n")
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	code := run([]string{"exec", "host-01", "--", "x"}, strings.NewReader(""), &out, &errb,
		envOf("AGENTIC_SERVER", srv.URL, "AGENTIC_OPERATOR_TOKEN", token))
	if accept := testkit.Receive(t, 15*time.Second, accepts, "no exec call"); accept != "multipart/mixed, application/x-ndjson;q=0.9" {
		t.Errorf("Accept %q", accept)
	}
	if code != 6 || out.String() != "text\n\xff\x00\xfe" || errb.String() != "warn\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}
