package task

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// runTask submits manifest to a service whose every run is script, and
// returns the task once it has ended and its event stream.
func runTask(t *testing.T, manifest string, script portsfake.Script) (ports.TaskRecord, []Event) {
	t.Helper()
	link := portsfake.NewLink(portsfake.WithScript(script))
	s := New(Config{Store: portsfake.NewTaskStore(), Workspace: &fakeWorkspace{}, Environments: &fakeEnvs{envs: map[string]environment.Environment{}},
		Files: fakeFiles{}, Link: link, Secrets: noSecrets{}, Clock: clock.Wall{}, IDs: &seq{}, DefaultRuntime: "host"})
	t.Cleanup(s.Close)
	sub, err := s.Submit(context.Background(), []byte(manifest), "")
	if err != nil {
		t.Fatal(err)
	}
	var got ports.TaskRecord
	if !testkit.Within(15*time.Second, func() bool { got, _ = s.Get(sub.Task.ID); return State(got.State).Terminal() }) {
		t.Fatalf("not ended: %+v", got)
	}
	events, _, _, err := s.Events(sub.Task.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return got, events
}

// A run whose program the environment lacks fails with the agent's own
// word on it and what to do, in the record and the event stream's end;
// the reason is the reason field's alone (it read "non_zero_exit
// (exit code 127)" under reason non_zero_exit, "not found" nowhere).
func TestAMissingProgramSaysWhatAndWhatToDo(t *testing.T) {
	for _, c := range []struct {
		name, manifest string
		result         ports.CommandResult
		stderr         string
		want           []string
	}{
		{"claude the agent could not start", "claude: {prompt: hi}\n",
			ports.CommandResult{ExitCode: 127, Error: `command not found: "claude"`}, "",
			[]string{"exit code 127", `command not found: "claude"`, "environment.image", "command.argv"}},
		{"a command a shell did not find", "command: {argv: [sh, -c, frobnicate]}\n",
			ports.CommandResult{ExitCode: 127}, "sh: 1: frobnicate: not found\n",
			[]string{"exit code 127", "sh: 1: frobnicate: not found", "environment.image", "command.argv"}},
		{"a command that fails says its last stderr line", "command: {argv: [make, test]}\n",
			ports.CommandResult{ExitCode: 2}, "compiling\nmake: *** [test] Error 1\n",
			[]string{"exit code 2: make: *** [test] Error 1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, events := runTask(t, c.manifest, func(cmd *portsfake.Command) {
				if c.stderr != "" {
					cmd.Stderr(c.stderr)
				}
				cmd.Finish(c.result)
			})
			if got.State != string(Failed) || got.Reason != string(ReasonNonZeroExit) {
				t.Fatalf("ended %s (%s), want failed non_zero_exit", got.State, got.Reason)
			}
			for _, w := range c.want {
				if !strings.Contains(got.Error, w) {
					t.Errorf("error %q lacks %q", got.Error, w)
				}
			}
			if strings.Contains(got.Error, string(ReasonNonZeroExit)) {
				t.Errorf("error %q repeats the reason", got.Error)
			}
			end := events[len(events)-1]
			if rec, ok := end.Data.(ports.TaskRecord); end.Type != EventEnd || !ok || rec.Error != got.Error {
				t.Errorf("the stream's end %+v does not carry the error %q", end, got.Error)
			}
		})
	}
}

// Once a run has ended no tool is in use: current_tool, set while claude
// used one, is cleared (it named the last tool after the task completed).
func TestCurrentToolClearedWhenTheRunEnds(t *testing.T) {
	got, events := runTask(t, "claude: {prompt: hi}\n", func(cmd *portsfake.Command) {
		cmd.Stdout(`{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Edit","input":{}}]}}` + "\n")
		cmd.Stdout(`{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"done"}` + "\n")
		cmd.Exit(0)
	})
	if got.State != string(Completed) || got.Progress.ToolCalls != 1 {
		t.Fatalf("ended %s (%s %s), %d tool calls; want completed after 1", got.State, got.Reason, got.Error, got.Progress.ToolCalls)
	}
	if got.Progress.CurrentTool != "" {
		t.Errorf("current_tool %q after the task completed", got.Progress.CurrentTool)
	}
	// The result's activity has its text, as a feed shows it.
	if !slices.ContainsFunc(events, func(ev Event) bool { return ev.Data == ActivityData{Kind: "result", Text: "done"} }) {
		t.Errorf("no result activity with its text in %+v", events)
	}
}

func TestFailureMessage(t *testing.T) {
	m := Manifest{Claude: &Claude{Prompt: "x"}, Lifecycle: Lifecycle{Timeout: 2 * time.Second, IdleTimeout: time.Second}}
	for _, c := range []struct {
		end    RunEnd
		reason Reason
		want   string
	}{
		{RunEnd{TimedOut: true, ExitCode: 137}, ReasonTimeout, "the run took longer than lifecycle.timeout (2s) and was ended"},
		{RunEnd{IdleTimedOut: true, ExitCode: 137}, ReasonIdleTimeout, "the run wrote nothing for lifecycle.idle_timeout (1s) and was ended"},
		{RunEnd{ResultSeen: true, ResultIsError: true, Result: "API Error: 529\noverloaded"}, ReasonClaudeError, "claude reported an error: API Error: 529 overloaded"},
		{RunEnd{ExitCode: 126, Error: `cannot run "claude": permission denied`}, ReasonNonZeroExit, `exit code 126: cannot run "claude": permission denied`},
		{RunEnd{ExitCode: 1}, ReasonNonZeroExit, "exit code 1"},
	} {
		if got := FailureMessage(c.end, c.reason, m); got != c.want {
			t.Errorf("%s %+v: %q, want %q", c.reason, c.end, got, c.want)
		}
	}
}

// The event stream says running before any of the run's output: a process
// that writes at once (claude's init line) wrote before it (a follower
// showed claude's activity under ready).
func TestRunningComesBeforeTheRunsOutput(t *testing.T) {
	link := portsfake.NewLink(portsfake.OnStart(func(c *portsfake.Command) { c.Stdout("at once\n") }),
		portsfake.WithScript(func(c *portsfake.Command) { c.Exit(0) }))
	s := New(Config{Store: portsfake.NewTaskStore(), Workspace: &fakeWorkspace{}, Environments: &fakeEnvs{envs: map[string]environment.Environment{}},
		Files: fakeFiles{}, Link: link, Secrets: noSecrets{}, Clock: clock.Wall{}, IDs: &seq{}, DefaultRuntime: "host"})
	t.Cleanup(s.Close)
	sub, err := s.Submit(context.Background(), []byte("command: {argv: [echo, at once]}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Within(15*time.Second, func() bool { got, _ := s.Get(sub.Task.ID); return State(got.State).Terminal() })
	events, _, _, _ := s.Events(sub.Task.ID, 0)
	var order []string
	for _, ev := range events {
		switch d := ev.Data.(type) {
		case StateData:
			order = append(order, d.State)
		case OutputData:
			order = append(order, "output")
		}
	}
	if strings.Join(order, ",") != "pending,staging,provisioning,ready,running,output,completing,completed" {
		t.Errorf("events in the order %v", order)
	}
}

// A task stored as ended with a tool named (by a server from before
// current_tool was cleared at the end) names none once loaded.
func TestALoadedEndedTaskHasNoCurrentTool(t *testing.T) {
	store := portsfake.NewTaskStore()
	now := time.Now()
	_ = store.Put(context.Background(), ports.TaskRecord{ID: "t1", State: string(Completed), Manifest: "claude: {prompt: hi}\n", CreatedAt: now,
		Phases: []ports.TaskPhase{{State: string(Completed), At: now}}, Progress: ports.TaskProgress{CurrentTool: "Edit", ToolCalls: 1}})
	s := New(Config{Store: store, Workspace: &fakeWorkspace{}, Environments: &fakeEnvs{envs: map[string]environment.Environment{}},
		Files: fakeFiles{}, Link: portsfake.NewLink(), Secrets: noSecrets{}, Clock: clock.Wall{}, IDs: &seq{}, DefaultRuntime: "host"})
	t.Cleanup(s.Close)
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get("t1"); got.Progress.CurrentTool != "" || got.Progress.ToolCalls != 1 {
		t.Errorf("loaded: progress %+v", got.Progress)
	}
}
