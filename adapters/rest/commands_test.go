package rest

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// startSleeping starts a background command that runs until the test ends
// it; the test drives its output through the returned fake.
func startSleeping(t *testing.T, e *env, body string) *resttest.Command {
	t.Helper()
	r := e.call("POST", "/api/v1/agents/a1/commands", body)
	expect(t, r, 202, "")
	var st restapi.CommandStatus
	r.decode(t, &st)
	c := e.nextCommand()
	if st.CommandId != c.ID() || st.AgentId != "a1" || st.State != restapi.CommandStateRunning {
		t.Fatalf("start answered %+v", st)
	}
	return c
}

func getStatus(t *testing.T, e *env, id, query string) restapi.CommandStatus {
	t.Helper()
	r := e.call("GET", "/api/v1/commands/"+id+query, "")
	expect(t, r, 200, "")
	var st restapi.CommandStatus
	r.decode(t, &st)
	return st
}

func TestStartCommandSpec(t *testing.T) {
	e := newEnv(t)
	c := startSleeping(t, e, `{"command":"sleep","stdin":"first"}`)
	if !c.Opts.Detached || !c.Spec.StdinOpen || c.Spec.Timeout != 0 {
		t.Fatalf("detached %v stdin open %v timeout %v", c.Opts.Detached, c.Spec.StdinOpen, c.Spec.Timeout)
	}
	if in, eof := c.Stdin(); in != "first" || eof {
		t.Fatalf("initial stdin %q eof %v: it must stay open", in, eof)
	}
	c2 := startSleeping(t, e, `{"command":"sleep","timeout_seconds":60}`)
	if c2.Spec.Timeout != time.Minute {
		t.Fatalf("timeout %v", c2.Spec.Timeout)
	}
}

func TestCommandLifecycle(t *testing.T) {
	e := newEnv(t)
	c := startSleeping(t, e, `{"command":"sleep"}`)
	id := c.ID()

	st := getStatus(t, e, id, "")
	if st.State != restapi.CommandStateRunning || st.Stdout != "" || st.StdoutOffset != 0 || st.Result != nil {
		t.Fatalf("fresh %+v", st)
	}
	c.Stdout("hello ")
	c.Stderr("warn\n")
	st = getStatus(t, e, id, "?wait_ms=5000")
	if st.Stdout != "hello " || st.Stderr != "warn\n" || st.StdoutOffset != 0 || st.StderrOffset != 0 {
		t.Fatalf("first poll %+v", st)
	}

	// A long poll from the end waits for new output. Its wait_ms, the
	// longest allowed, outlasts the test's waits: only the output can
	// answer it in time.
	longest := fmt.Sprintf("&wait_ms=%d", maxWaitMS)
	got := make(chan restapi.CommandStatus, 1)
	go func() { got <- getStatus(t, e, id, "?stdout_from=6&stderr_from=5"+longest) }()
	select {
	case st := <-got:
		t.Fatalf("long poll returned without new output: %+v", st)
	case <-time.After(100 * time.Millisecond):
	}
	c.Stdout("world")
	st = testkit.Receive(t, 15*time.Second, got, "long poll did not wake on output")
	if st.Stdout != "world" || st.StdoutOffset != 6 || st.Stderr != "" || st.StderrOffset != 5 {
		t.Fatalf("second poll %+v", st)
	}

	// The end wakes a long poll too.
	go func() { got <- getStatus(t, e, id, "?stdout_from=11&stderr_from=5"+longest) }()
	time.Sleep(50 * time.Millisecond)
	c.Exit(3)
	st = testkit.Receive(t, 15*time.Second, got, "long poll did not wake on exit")
	if st.State != restapi.CommandStateExited || st.Result == nil || st.Result.ExitCode != 3 || st.Result.Success || st.Result.Truncated {
		t.Fatalf("after exit %+v", st)
	}
	// All output is still there from offset 0.
	st = getStatus(t, e, id, "")
	if st.Stdout != "hello world" || st.Stderr != "warn\n" {
		t.Fatalf("full output %+v", st)
	}
	// After the end, waiting returns at once.
	go func() { got <- getStatus(t, e, id, "?stdout_from=11"+longest) }()
	testkit.Receive(t, 15*time.Second, got, "a finished command made the poll wait")
}

func TestCommandLongPollTimesOut(t *testing.T) {
	e := newEnv(t)
	c := startSleeping(t, e, `{"command":"sleep"}`)
	start := time.Now()
	st := getStatus(t, e, c.ID(), "?wait_ms=150")
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("returned after %v", d)
	}
	if st.State != restapi.CommandStateRunning || st.Stdout != "" {
		t.Fatalf("%+v", st)
	}
	// An offset past the end is clamped to the end.
	if st := getStatus(t, e, c.ID(), "?stdout_from=1000&wait_ms=0"); st.Stdout != "" || st.StdoutOffset != 0 {
		t.Fatalf("past the end: %+v", st)
	}
	// Later output wakes a poll from the end. (Polling from the end, not
	// past it: output that lands before the poll starts is then its answer
	// too, where a clamp to after it would wait the whole 10 s.)
	got := make(chan restapi.CommandStatus, 1)
	go func() { got <- getStatus(t, e, c.ID(), "?stdout_from=0&wait_ms=10000") }()
	time.Sleep(50 * time.Millisecond)
	c.Stdout("abc")
	st = <-got
	if st.Stdout != "abc" || st.StdoutOffset != 0 {
		t.Fatalf("%+v", st)
	}
}

func TestCommandKeepsTheTail(t *testing.T) {
	e := newEnv(t)
	c := startSleeping(t, e, `{"command":"sleep","max_output_bytes":8}`)
	c.Stdout("0123456789")
	c.Stdout("abcdefghij")
	st := getStatus(t, e, c.ID(), "")
	if st.Stdout != "cdefghij" || st.StdoutOffset != 12 {
		t.Fatalf("from 0: %+v", st)
	}
	st = getStatus(t, e, c.ID(), "?stdout_from=15")
	if st.Stdout != "fghij" || st.StdoutOffset != 15 {
		t.Fatalf("from 15: %+v", st)
	}
	c.Exit(0)
	st = getStatus(t, e, c.ID(), "?wait_ms=5000&stdout_from=20")
	if st.Result == nil || !st.Result.Truncated || st.Result.Stdout != "" {
		t.Fatalf("result %+v", st.Result)
	}
}

func TestCommandOutputEncoding(t *testing.T) {
	e := newEnv(t)
	c := startSleeping(t, e, `{"command":"sleep"}`)
	// "é" split across two chunks: the first poll holds the lead byte back.
	c.Stdout("caf\xc3")
	st := getStatus(t, e, c.ID(), "")
	if st.Encoding != restapi.Utf8 || st.Stdout != "caf" {
		t.Fatalf("split rune: %+v", st)
	}
	c.Stdout("\xa9!")
	st = getStatus(t, e, c.ID(), "?stdout_from=3")
	if st.Encoding != restapi.Utf8 || st.Stdout != "é!" || st.StdoutOffset != 3 {
		t.Fatalf("joined rune: %+v", st)
	}
	c.Emit(ports.StreamStderr, []byte{0xff})
	st = getStatus(t, e, c.ID(), "")
	out, _ := base64.StdEncoding.DecodeString(st.Stdout)
	errb, _ := base64.StdEncoding.DecodeString(st.Stderr)
	if st.Encoding != restapi.Base64 || string(out) != "café!" || string(errb) != "\xff" {
		t.Fatalf("binary: %+v", st)
	}
}

func TestFinishedCommandsAreForgotten(t *testing.T) {
	e := newEnv(t)
	c := startSleeping(t, e, `{"command":"sleep"}`)
	c.Stdout("x")
	c.Exit(0)
	getStatus(t, e, c.ID(), "?wait_ms=5000&stdout_from=1")
	// The link forgets it too, so only the store could answer.
	e.link.Forget(c.ID())
	e.clock.Advance(RetainFinished - time.Second)
	if st := getStatus(t, e, c.ID(), ""); st.Stdout != "x" {
		t.Fatalf("%+v", st)
	}
	e.clock.Advance(time.Second)
	expect(t, e.call("GET", "/api/v1/commands/"+c.ID(), ""), 404, "command_expired")
}

func TestCommandControl(t *testing.T) {
	e := newEnv(t)
	c := startSleeping(t, e, `{"command":"sleep","pty":true}`)
	base := "/api/v1/commands/" + c.ID()

	expect(t, e.call("POST", base+"/stdin", `{"data":"ls\n"}`), 204, "")
	expect(t, e.call("POST", base+"/stdin", `{"data_base64":"`+base64.StdEncoding.EncodeToString([]byte{1, 2})+`"}`), 204, "")
	expect(t, e.call("POST", base+"/stdin", `{"data":"a","data_base64":"YQ=="}`), 400, "invalid_request")
	expect(t, e.call("POST", base+"/stdin", `{}`), 400, "invalid_request")
	expect(t, e.call("POST", base+"/stdin", `{"data_base64":"!!"}`), 400, "invalid_request")
	expect(t, e.call("POST", base+"/stdin", `{"eof":true}`), 204, "")
	if in, eof := c.Stdin(); in != "ls\n\x01\x02" || !eof {
		t.Fatalf("stdin %q eof %v", in, eof)
	}
	expect(t, e.call("POST", base+"/stdin", `{"data":"late"}`), 409, "stdin_closed")

	expect(t, e.call("POST", base+"/resize", `{"cols":100,"rows":30}`), 204, "")
	expect(t, e.call("POST", base+"/resize", `{"cols":0,"rows":30}`), 400, "invalid_request")
	expect(t, e.call("POST", base+"/resize", `{"cols":10}`), 400, "invalid_request")
	expect(t, e.call("POST", base+"/resize", `{"cols":10,"rows":1001}`), 400, "invalid_request")
	if rs := c.Resizes(); len(rs) != 1 || rs[0] != [2]uint16{100, 30} {
		t.Fatalf("resizes %v", rs)
	}

	for _, sig := range []string{"INT", "SIGTERM", "sigkill", "9", " HUP ", "USR1", "WINCH", "RTMIN+1", "SIGRTMAX-2", "64"} {
		expect(t, e.call("POST", base+"/signal", `{"signal":"`+sig+`"}`), 204, "")
	}
	if got := fmt.Sprint(c.Signals()); got != "[2 15 9 9 1 10 28 35 62 64]" {
		t.Fatalf("signals %s", got)
	}
	for _, sig := range []string{"", "FOO", "0", "65", "-1", "SIG", "RTMIN+31", "2.5"} {
		expect(t, e.call("POST", base+"/signal", `{"signal":"`+sig+`"}`), 400, "invalid_request")
	}
	expect(t, e.call("POST", base+"/signal", `{"signal":9}`), 400, "invalid_request")

	r := e.call("DELETE", base, "")
	expect(t, r, 202, "")
	if kills, _ := c.Killed(); kills != 1 {
		t.Fatalf("kills %d", kills)
	}
	st := getStatus(t, e, c.ID(), "?wait_ms=5000&stdout_from=0")
	if st.State != restapi.CommandStateExited || st.Result.Signal == nil || *st.Result.Signal != 9 || st.Result.ExitCode != 137 {
		t.Fatalf("after kill %+v", st)
	}
	expect(t, e.call("DELETE", base, ""), 409, "command_ended")
	expect(t, e.call("POST", base+"/signal", `{"signal":"TERM"}`), 409, "command_ended")
	expect(t, e.call("POST", base+"/stdin", `{"data":"x"}`), 409, "command_ended")
	expect(t, e.call("POST", base+"/resize", `{"cols":1,"rows":1}`), 409, "command_ended")
}

func TestResizeNeedsAPTY(t *testing.T) {
	e := newEnv(t)
	c := startSleeping(t, e, `{"command":"sleep"}`)
	expect(t, e.call("POST", "/api/v1/commands/"+c.ID()+"/resize", `{"cols":100,"rows":30}`), 409, "not_a_pty")
}

func TestUnknownCommand(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "", ""},
		{"DELETE", "", ""},
		{"POST", "/stdin", `{"data":"x"}`},
		{"POST", "/resize", `{"cols":1,"rows":1}`},
		{"POST", "/signal", `{"signal":"INT"}`},
	} {
		expect(t, e.call(tc.method, "/api/v1/commands/nope"+tc.path, tc.body), 404, "command_not_found")
	}
	expect(t, e.call("GET", "/api/v1/commands/"+strings.Repeat("c", 129), ""), 400, "invalid_request") // over the spec's maxLength
}

func TestGetCommandParameters(t *testing.T) {
	e := newEnv(t)
	c := startSleeping(t, e, `{"command":"sleep"}`)
	for _, q := range []string{"?stdout_from=-1", "?stderr_from=-5", "?wait_ms=30001", "?wait_ms=-1", "?stdout_from=abc", "?wait_ms=1.5"} {
		r := e.call("GET", "/api/v1/commands/"+c.ID()+q, "")
		expect(t, r, 400, "invalid_request")
	}
}

func TestLinkErrorsOnControl(t *testing.T) {
	e := newEnv(t)
	c := startSleeping(t, e, `{"command":"sleep"}`)
	c.SetStdinError(ports.ErrAgentGone)
	expect(t, e.call("POST", "/api/v1/commands/"+c.ID()+"/stdin", `{"data":"x"}`), 502, "agent_gone")
	c.SetStdinError(ports.ErrAgentNotConnected)
	expect(t, e.call("POST", "/api/v1/commands/"+c.ID()+"/stdin", `{"data":"x"}`), 503, "agent_not_connected") // stdin: nothing queued
}

// Commands started by other parts of the server are not in the adapter's
// store, but the link knows them: they can still be controlled.
func TestForeignCommand(t *testing.T) {
	e := newEnv(t)
	c := e.link.Adopt("a1", ports.CommandSpec{Command: "sh", PTY: true})
	base := "/api/v1/commands/" + c.ID()
	st := getStatus(t, e, c.ID(), "")
	if st.State != restapi.CommandStateRunning || st.AgentId != "a1" || st.CommandId != c.ID() {
		t.Fatalf("%+v", st)
	}
	expect(t, e.call("POST", base+"/signal", `{"signal":"INT"}`), 204, "")
	expect(t, e.call("POST", base+"/resize", `{"cols":90,"rows":20}`), 204, "")
	expect(t, e.call("POST", base+"/stdin", `{"data":"y\n"}`), 204, "")
	expect(t, e.call("DELETE", base, ""), 202, "")
	if kills, _ := c.Killed(); kills != 1 || fmt.Sprint(c.Signals()) != "[2]" {
		t.Fatalf("kills %d signals %v", kills, c.Signals())
	}
	st = getStatus(t, e, c.ID(), "?wait_ms=1000")
	if st.State != restapi.CommandStateExited || st.Result == nil || st.Result.ExitCode != 137 {
		t.Fatalf("%+v", st)
	}
	expect(t, e.call("DELETE", base, ""), 409, "command_ended")
}

// An agent that runs MaxRunningCommandsPerAgent commands gets no more
// through REST: 429 with the limit, declared in the spec.
func TestBackgroundCommandsPerAgentAreBounded(t *testing.T) {
	e := newEnv(t)
	e.link.AddAgent(ports.AgentInfo{ID: "busy", Status: "ready", Runtime: "host", RunningCommands: MaxRunningCommandsPerAgent})
	r := e.call("POST", "/api/v1/agents/busy/commands", `{"command":"sleep","args":["60"]}`)
	expect(t, r, http.StatusTooManyRequests, "too_many_commands")
	if !strings.Contains(string(r.body), "256") {
		t.Fatalf("the answer does not say the limit: %s", r.body)
	}
}
