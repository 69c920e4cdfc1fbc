package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

func ptr[T any](v T) *T { return &v }

// execOK runs a command through REST and fails the test on an API error.
func execOK(t *testing.T, s *harness.Server, agentID string, req restapi.ExecRequest) restapi.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	resp, err := s.Client().ExecCommandWithResponse(ctx, agentID, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.JSON200 == nil {
		t.Fatalf("exec: status %d: %s", resp.StatusCode(), resp.Body)
	}
	return *resp.JSON200
}

func decoded(t *testing.T, r restapi.ExecResult, s string) []byte {
	t.Helper()
	if string(r.Encoding) == "base64" {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return []byte(s)
}

func TestExecThroughHostAgent(t *testing.T) {
	s := startServer(t, 1, "")

	t.Run("echo", func(t *testing.T) {
		r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "echo", Args: ptr([]string{"hello", "world"})})
		if r.Stdout != "hello world\n" || r.ExitCode != 0 || !r.Success || r.Stderr != "" {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("exit code 42", func(t *testing.T) {
		r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "exit 42"})})
		if r.ExitCode != 42 || r.Success {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("stderr separated", func(t *testing.T) {
		r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "echo out; echo err >&2; echo out2"})})
		if r.Stdout != "out\nout2\n" || r.Stderr != "err\n" {
			t.Fatalf("stdout %q stderr %q", r.Stdout, r.Stderr)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "tr a-z A-Z; echo done"}), Stdin: ptr("shout\nplease\n")})
		if r.Stdout != "SHOUT\nPLEASE\ndone\n" {
			t.Fatalf("stdout %q", r.Stdout)
		}
	})
	t.Run("no stdin means EOF", func(t *testing.T) {
		r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "cat"})
		if r.ExitCode != 0 || r.Stdout != "" {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("env and working dir", func(t *testing.T) {
		r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", `echo "$GREETING"; pwd; echo "secret=[$AGENT_SECRET]"`}),
			Env: ptr(map[string]string{"GREETING": "hi there"}), WorkingDir: ptr("/tmp")})
		if r.Stdout != "hi there\n/tmp\nsecret=[]\n" {
			t.Fatalf("stdout %q", r.Stdout)
		}
	})
	t.Run("pty size", func(t *testing.T) {
		r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "stty", Args: ptr([]string{"size"}), Pty: ptr(true), Cols: ptr(123), Rows: ptr(45)})
		if strings.TrimSpace(r.Stdout) != "45 123" || r.ExitCode != 0 {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("missing command", func(t *testing.T) {
		r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "no-such-command-xyz"})
		if r.ExitCode != 127 || r.Error == nil || !strings.Contains(*r.Error, "no-such-command-xyz") || r.Success {
			t.Fatalf("got %+v", r)
		}
		// The agent is still there and working.
		r = execOK(t, s, "host-01", restapi.ExecRequest{Command: "true"})
		if r.ExitCode != 0 {
			t.Fatalf("agent broken after a missing command: %+v", r)
		}
	})
	t.Run("timeout kills the child too", func(t *testing.T) {
		start := time.Now()
		r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "sleep 300 & echo $!; wait"}), TimeoutSeconds: ptr(1)})
		if !r.TimedOut || r.Success {
			t.Fatalf("not reported as timed out: %+v", r)
		}
		// Not the child's 300 s: the timeout ended it.
		if d := time.Since(start); d > patience {
			t.Fatalf("timeout took %v", d)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
		if err != nil {
			t.Fatalf("child pid %q: %v", r.Stdout, err)
		}
		deadline := time.Now().Add(patience)
		for harness.Alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("child %d of the timed-out command still runs", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	t.Run("1 MiB of output complete and in order", func(t *testing.T) {
		// 16384 numbered lines of 64 bytes each = 1 MiB.
		script := `i=0; while [ $i -lt 16384 ]; do printf '%06d:%056d\n' $i $i; i=$((i+1)); done`
		r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", script})})
		var want bytes.Buffer
		for i := range 16384 {
			fmt.Fprintf(&want, "%06d:%056d\n", i, i)
		}
		got := decoded(t, r, r.Stdout)
		if len(got) != 1<<20 || sha256.Sum256(got) != sha256.Sum256(want.Bytes()) {
			t.Fatalf("got %d bytes, want %d identical bytes", len(got), want.Len())
		}
	})
	t.Run("binary output is base64", func(t *testing.T) {
		r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "printf", Args: ptr([]string{`\377\376ok`})})
		if string(r.Encoding) != "base64" || !bytes.Equal(decoded(t, r, r.Stdout), []byte("\xff\xfeok")) {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("duration measured", func(t *testing.T) {
		r := execOK(t, s, "host-01", restapi.ExecRequest{Command: "sleep", Args: ptr([]string{"0.3"})})
		if r.DurationMs < 250 || r.DurationMs > 10000 {
			t.Fatalf("duration %d ms for sleep 0.3", r.DurationMs)
		}
	})
}

// TestPTYResizeAndSignal drives a started command through the async endpoints.
func TestPTYResizeAndSignal(t *testing.T) {
	s := startServer(t, 1, "")
	c := s.Client()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()

	start := func(req restapi.ExecRequest) string {
		t.Helper()
		resp, err := c.StartCommandWithResponse(ctx, "host-01", req)
		if err != nil || resp.JSON202 == nil {
			t.Fatalf("start: %v %d %s", err, resp.StatusCode(), resp.Body)
		}
		return resp.JSON202.CommandId
	}
	// waitOutput long-polls until the output matches re.
	waitOutput := func(id string, re *regexp.Regexp) restapi.CommandStatus {
		t.Helper()
		for {
			resp, err := c.GetCommandWithResponse(ctx, id, &restapi.GetCommandParams{WaitMs: ptr(2000)})
			if err != nil || resp.JSON200 == nil {
				t.Fatalf("get: %v %s", err, resp.Body)
			}
			if re.MatchString(resp.JSON200.Stdout) {
				return *resp.JSON200
			}
			if resp.JSON200.State == restapi.CommandStateExited {
				t.Fatalf("command ended without %v: %+v", re, resp.JSON200)
			}
		}
	}
	waitExit := func(id string) restapi.ExecResult {
		t.Helper()
		for {
			resp, err := c.GetCommandWithResponse(ctx, id, &restapi.GetCommandParams{WaitMs: ptr(2000)})
			if err != nil || resp.JSON200 == nil {
				t.Fatalf("get: %v %s", err, resp.Body)
			}
			if resp.JSON200.State == restapi.CommandStateExited {
				return *resp.JSON200.Result
			}
		}
	}

	t.Run("resize", func(t *testing.T) {
		id := start(restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "stty size; echo ready; read x; stty size"}), Pty: ptr(true), Cols: ptr(80), Rows: ptr(24)})
		waitOutput(id, regexp.MustCompile(`24 80\r?\nready`))
		if r, err := c.ResizeCommandWithResponse(ctx, id, restapi.ResizeRequest{Cols: 132, Rows: 50}); err != nil || r.StatusCode() != 204 {
			t.Fatalf("resize: %v %s", err, r.Body)
		}
		if r, err := c.WriteCommandStdinWithResponse(ctx, id, restapi.StdinRequest{Data: ptr("\n")}); err != nil || r.StatusCode() != 204 {
			t.Fatalf("stdin: %v %s", err, r.Body)
		}
		st := waitOutput(id, regexp.MustCompile(`50 132`))
		_ = st
		if res := waitExit(id); res.ExitCode != 0 {
			t.Fatalf("exit %+v", res)
		}
	})
	t.Run("SIGINT", func(t *testing.T) {
		id := start(restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "echo started; exec sleep 30"}), Pty: ptr(true)})
		waitOutput(id, regexp.MustCompile(`started`))
		time.Sleep(100 * time.Millisecond) // let exec replace the shell
		if r, err := c.SignalCommandWithResponse(ctx, id, restapi.SignalRequest{Signal: "INT"}); err != nil || r.StatusCode() != 204 {
			t.Fatalf("signal: %v %s", err, r.Body)
		}
		res := waitExit(id)
		if res.ExitCode != 130 || res.Signal == nil || *res.Signal != 2 {
			t.Fatalf("want exit 130 by signal 2, got %+v", res)
		}
	})
	t.Run("kill", func(t *testing.T) {
		id := start(restapi.ExecRequest{Command: "sleep", Args: ptr([]string{"30"})})
		if r, err := c.KillCommandWithResponse(ctx, id); err != nil || r.StatusCode() != 202 {
			t.Fatalf("kill: %v %s", err, r.Body)
		}
		if res := waitExit(id); res.Success || res.Signal == nil || *res.Signal == 0 {
			t.Fatalf("kill result %+v", res)
		}
	})
}
