package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/apicontract"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// fakeClaude is a stand-in for claude on PATH: by its prompt ($2) it edits,
// deletes, adds and commits files and prints stream-json like claude's, or
// reports an API error with exit 0, or hangs after its result.
const fakeClaude = `#!/bin/sh
prompt="$2"
case "$*" in *"--output-format stream-json --verbose"*) ;; *) echo "bad flags: $*" >&2; exit 64;; esac
echo '{"type":"system","subtype":"init","session_id":"s1","model":"fake","cwd":"'"$PWD"'","tools":["Edit"]}'
case "$prompt" in
happy)
	echo '{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Edit","input":{"file_path":"a.txt"}}]},"session_id":"s1"}'
	echo edited > a.txt
	rm -f b.txt
	echo committed > c.txt
	git add c.txt && git -c user.name=agent -c user.email=agent@x commit -q -m agent
	mkdir -p new && echo new > new/d.txt
	echo "token-length=${#MY_TOKEN}" > REPORT.md
	echo '{"type":"result","subtype":"success","is_error":false,"num_turns":2,"total_cost_usd":0.25,"result":"done","session_id":"s1"}'
	;;
api-error)
	echo '{"type":"result","subtype":"success","is_error":true,"num_turns":1,"result":"API Error: 529 overloaded","session_id":"s1"}'
	;;
hang)
	echo '{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"done","session_id":"s1"}'
	sleep 600
	;;
esac
exit 0
`

// taskEnv is a server with host environments, a fake claude on PATH, a
// secret in its environment and a repository made here.
type taskEnv struct {
	t    *testing.T
	s    *harness.Server
	repo string
	data string
}

const taskSecret = "s3cr3t-Value-7f9c2e"

func newTaskEnv(t *testing.T, env ...string) *taskEnv {
	t.Helper()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "claude"), []byte(fakeClaude), 0o755); err != nil {
		t.Fatal(err)
	}
	repo := baseRepo(t, "a", "b")
	data := t.TempDir()
	s := startServer(t, 0, data, append([]string{"PATH=" + bin + ":" + os.Getenv("PATH"), "TASK_TEST_TOKEN=" + taskSecret, "AGENTIC_TASK_RUNTIME=host", "AGENTIC_RUNTIMES=host"}, env...)...)
	return &taskEnv{t: t, s: s, repo: repo, data: data}
}

// baseRepo is a git repository with one commit on main: a file <name>.txt
// holding the line <name> for each name; anyone may read it.
func baseRepo(t *testing.T, names ...string) string {
	t.Helper()
	repo := t.TempDir()
	gitIn(t, repo, "init", "-q", "-b", "main")
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(repo, n+".txt"), []byte(n+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitIn(t, repo, "add", "-A")
	gitIn(t, repo, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "base")
	testkit.OpenToAll(t, repo)
	return repo
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (e *taskEnv) submit(manifest string, headers ...string) (int, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.s.RESTURL+"/api/v1/tasks", strings.NewReader(manifest))
	req.Header.Set("Authorization", "Bearer "+e.s.Token)
	req.Header.Set("Content-Type", "application/yaml")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := apicontract.CheckResponse(req, resp.StatusCode, resp.Header, b); err != nil {
		e.t.Errorf("openapi.yaml: %v", err)
	}
	return resp.StatusCode, b
}

// accepted submits manifest and is the answer; anything but 202 fails the test.
func (e *taskEnv) accepted(manifest string) restapi.TaskAccepted {
	e.t.Helper()
	st, b := e.submit(manifest)
	if st != http.StatusAccepted {
		e.t.Fatalf("submit: %d %s", st, b)
	}
	var acc restapi.TaskAccepted
	if err := json.Unmarshal(b, &acc); err != nil {
		e.t.Fatalf("submit: %v %s", err, b)
	}
	return acc
}

func (e *taskEnv) run(manifest string) restapi.Task {
	e.t.Helper()
	acc := e.accepted(manifest)
	return e.waitEnd(acc.TaskId, patience)
}

func (e *taskEnv) get(id string) restapi.Task {
	e.t.Helper()
	st, b := fileDo(e.t, e.s, http.MethodGet, e.s.RESTURL+"/api/v1/tasks/"+id, nil)
	if st != http.StatusOK {
		e.t.Fatalf("get task: %d %s", st, b)
	}
	var tk restapi.Task
	if err := json.Unmarshal(b, &tk); err != nil {
		e.t.Fatal(err)
	}
	return tk
}

var taskEnds = map[string]bool{"completed": true, "failed": true, "failed_preserved": true, "cancelled": true}

func (e *taskEnv) waitEnd(id string, d time.Duration) restapi.Task {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		tk := e.get(id)
		if taskEnds[tk.State] {
			return tk
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("task %s still %s after %v: %+v", id, tk.State, d, tk)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// noEnvironmentsLeft waits for every task environment to be gone: a task
// is completed once its work is safe, and its environment goes right after.
func (e *taskEnv) noEnvironmentsLeft() {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		left := e.environmentsLeft()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Errorf("environments left: %v", left)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *taskEnv) environmentsLeft() []string {
	st, b := fileDo(e.t, e.s, http.MethodGet, e.s.RESTURL+"/api/v1/environments", nil)
	if st != http.StatusOK {
		e.t.Fatalf("environments: %d %s", st, b)
	}
	var l restapi.EnvironmentList
	_ = json.Unmarshal(b, &l)
	var names []string
	for _, env := range l.Environments {
		names = append(names, env.Name+":"+string(env.State))
	}
	return names
}

// The happy path on the host runtime: the repository staged, claude run
// headless in argv form with its secret in its environment only, artifacts
// and a patch that reproduces the agent's tree on a fresh clone, the
// environment gone, and the secret's value nowhere the server keeps.
func TestTaskHappyPathOnHost(t *testing.T) {
	e := newTaskEnv(t)
	tk := e.run(`
version: "1"
kind: Task
metadata: {name: happy, labels: {team: core}}
repository: {url: ` + e.repo + `, branch: main}
claude: {prompt: happy, model: fake, max_turns: 5}
environment: {runtime: host}
secrets: [{name: MY_TOKEN, source: env, key: TASK_TEST_TOKEN}]
lifecycle: {timeout: 5m, artifact_patterns: [REPORT.md, "new/**/*.txt"]}
`)
	if tk.State != "completed" || tk.ExitCode == nil || *tk.ExitCode != 0 {
		t.Fatalf("task: %+v (reason %v, error %v)", tk, deref(tk.Reason), deref(tk.Error))
	}
	if tk.Progress.ToolCalls != 1 || tk.Progress.Turns != 2 || tk.Progress.CostUsd != 0.25 {
		t.Errorf("progress %+v", tk.Progress)
	}
	var states []string
	for _, p := range tk.Phases {
		states = append(states, p.State)
	}
	if strings.Join(states, ",") != "pending,staging,provisioning,ready,running,completing,completed" {
		t.Errorf("phases %v", states)
	}
	st, b := fileDo(t, e.s, http.MethodGet, e.s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts", nil)
	var arts restapi.ArtifactList
	_ = json.Unmarshal(b, &arts)
	names := map[string]restapi.Artifact{}
	for _, a := range arts.Artifacts {
		names[a.Name] = a
	}
	if st != http.StatusOK || len(arts.Artifacts) != 3 || names["REPORT.md"].Sha256 == "" || names["changes.patch"].Size == 0 || names["new/d.txt"].Size != 4 {
		t.Fatalf("artifacts: %d %s", st, b)
	}
	_, report := fileDo(t, e.s, http.MethodGet, e.s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/REPORT.md", nil)
	if string(report) != "token-length="+strconv.Itoa(len(taskSecret))+"\n" {
		t.Errorf("REPORT.md %q: the secret did not reach the process's environment", report)
	}
	_, patch := fileDo(t, e.s, http.MethodGet, e.s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/changes.patch", nil)
	fresh := t.TempDir()
	gitIn(t, fresh, "clone", "-q", e.repo, ".")
	pf := filepath.Join(t.TempDir(), "p")
	_ = os.WriteFile(pf, patch, 0o644)
	gitIn(t, fresh, "apply", "--binary", pf)
	for p, want := range map[string]string{"a.txt": "edited\n", "c.txt": "committed\n", "new/d.txt": "new\n"} {
		if got, _ := os.ReadFile(filepath.Join(fresh, p)); string(got) != want {
			t.Errorf("%s after the patch: %q", p, got)
		}
	}
	if _, err := os.Stat(filepath.Join(fresh, "b.txt")); !os.IsNotExist(err) {
		t.Error("b.txt survived the patch")
	}
	if bytes.Contains(patch, []byte("TASK.md")) {
		t.Error("the patch carries TASK.md")
	}
	e.noEnvironmentsLeft()
	// The secret's value: not in the record, the log, or the data dir.
	_, rec := fileDo(t, e.s, http.MethodGet, e.s.RESTURL+"/api/v1/tasks/"+tk.Id, nil)
	if bytes.Contains(rec, []byte(taskSecret)) || strings.Contains(e.s.Log(), taskSecret) {
		t.Error("the secret's value is in the task record or the server's log")
	}
	_ = filepath.Walk(e.data, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(taskSecret)) {
				t.Errorf("the secret's value is in %s", p)
			}
		}
		return nil
	})
	// The event stream from the start: states, claude's activity, output,
	// and the end; from Last-Event-ID only what follows.
	evs := readSSE(t, e.s, tk.Id, "")
	var kinds []string
	lastID := ""
	sawTool, sawOutput := false, false
	for _, ev := range evs {
		switch ev.event {
		case "state":
			kinds = append(kinds, ev.event)
		case "activity":
			sawTool = sawTool || strings.Contains(ev.data, `"tool_name":"Edit"`)
		case "output":
			sawOutput = sawOutput || strings.Contains(ev.data, `"offset":0`)
		}
		lastID = ev.id
	}
	if len(kinds) != 7 || !sawTool || !sawOutput || evs[len(evs)-1].event != "end" || !strings.Contains(evs[len(evs)-1].data, `"state":"completed"`) {
		t.Errorf("events: %d states, tool %v, output %v, last %+v", len(kinds), sawTool, sawOutput, evs[len(evs)-1])
	}
	if again := readSSE(t, e.s, tk.Id, evs[len(evs)-2].id); len(again) != 1 || again[0].event != "end" || again[0].id != lastID {
		t.Errorf("after Last-Event-ID: %+v", again)
	}
	// Metrics: the end by outcome, and the tasks by state.
	_, metrics := fileDo(t, e.s, http.MethodGet, e.s.RESTURL+"/metrics", nil)
	for _, want := range []string{`agentic_task_duration_seconds_count{outcome="completed"} 1`, `agentic_tasks{state="completed"} 1`, `agentic_tasks{state="running"} 0`} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Idempotency: the same key and manifest is the same task; another is 409.
	m := "command: {argv: [\"true\"]}\nenvironment: {runtime: host}\n"
	st1, b1 := e.submit(m, "Idempotency-Key", "k1")
	st2, b2 := e.submit(m, "Idempotency-Key", "k1")
	st3, b3 := e.submit(m+"metadata: {name: other}\n", "Idempotency-Key", "k1")
	var a1, a2 restapi.TaskAccepted
	_, _ = json.Unmarshal(b1, &a1), json.Unmarshal(b2, &a2)
	if st1 != 202 || st2 != 202 || a1.TaskId == "" || a1.TaskId != a2.TaskId || st3 != 409 || errorCode(b3) != "task_conflict" {
		t.Errorf("idempotency: %d %s / %d %s / %d %s", st1, b1, st2, b2, st3, b3)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Each way a run can end badly ends the task failed with its reason, and
// no environment is left.
func TestTaskFailureReasons(t *testing.T) {
	e := newTaskEnv(t)
	for _, c := range []struct{ name, manifest, reason string }{
		{"claude reports an API error with exit 0", "claude: {prompt: api-error}\nenvironment: {runtime: host}\n", "claude_error"},
		{"a command exits non-zero", "command: {argv: [sh, -c, \"exit 3\"]}\nenvironment: {runtime: host}\n", "non_zero_exit"},
		{"a required secret is missing", "command: {argv: [\"true\"]}\nenvironment: {runtime: host}\nsecrets: [{name: X, source: env, key: NO_SUCH_VARIABLE_HERE}]\n", "secret_unresolved"},
		{"the commit is unreachable", "repository: {url: " + e.repo + ", commit: 0123456789abcdef0123456789abcdef01234567}\ncommand: {argv: [\"true\"]}\nenvironment: {runtime: host}\n", "staging_failed"},
		{"idle timeout", "command: {argv: [sleep, \"60\"]}\nenvironment: {runtime: host}\nlifecycle: {idle_timeout: 1s}\n", "idle_timeout"},
		{"wall-clock timeout", "command: {argv: [sh, -c, \"while :; do echo x; sleep 0.2; done\"]}\nenvironment: {runtime: host}\nlifecycle: {timeout: 2s}\n", "timeout"},
		{"an artifact was not made", "command: {argv: [\"true\"]}\nenvironment: {runtime: host}\nlifecycle: {artifact_patterns: [REPORT.md]}\n", "artifacts_missing"},
		{"the runtime is not configured here", "command: {argv: [\"true\"]}\nenvironment: {runtime: docker}\n", "provision_failed"},
	} {
		tk := e.run(c.manifest)
		if tk.State != "failed" || deref(tk.Reason) != c.reason {
			t.Errorf("%s: %s %q (%s), want failed %s", c.name, tk.State, deref(tk.Reason), deref(tk.Error), c.reason)
		}
	}
	// claude that hangs after its result is ended, and its result decides.
	if tk := e.run("claude: {prompt: hang}\nenvironment: {runtime: host}\n"); tk.State != "completed" {
		t.Errorf("claude hanging after a good result: %s %s %s", tk.State, deref(tk.Reason), deref(tk.Error))
	}
	e.noEnvironmentsLeft()
	// Invalid manifests name the field.
	if st, b := e.submit("claude: {prompt: x}\nenvironment: {memory: 2048}\n"); st != 400 || !strings.Contains(string(b), "environment.memory") {
		t.Errorf("invalid manifest: %d %s", st, b)
	}
	if st, b := e.submit("claude: {prompt: x}\n", "X-Ignored", "1"); st != 202 {
		t.Errorf("minimal manifest: %d %s", st, b)
	}
}

// Cancel really ends the process and the environment.
func TestTaskCancel(t *testing.T) {
	e := newTaskEnv(t)
	// A duration no other test sleeps: pgrep sees every test's processes,
	// those in containers too.
	acc := e.accepted("command: {argv: [sleep, \"4321\"]}\nenvironment: {runtime: host}\n")
	eventually(t, patience, "the task running", func() bool { return e.get(acc.TaskId).State == "running" })
	// A live event stream ends with the task.
	type read struct {
		evs []sseEvent
		err error
	}
	stream := openSSE(t, e.s, acc.TaskId, "")
	live := make(chan read, 1)
	go func() { evs, err := sseEvents(stream); live <- read{evs, err} }()
	if st, b := fileDo(t, e.s, http.MethodDelete, e.s.RESTURL+"/api/v1/tasks/"+acc.TaskId, nil); st != 202 {
		t.Fatalf("cancel: %d %s", st, b)
	}
	select {
	case r := <-live:
		if r.err != nil || len(r.evs) == 0 {
			t.Fatalf("the live stream: %v %+v", r.err, r.evs)
		}
		if last := r.evs[len(r.evs)-1]; last.event != "end" || !strings.Contains(last.data, `"state":"cancelled"`) {
			t.Errorf("the live stream ended with %+v", last)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the live event stream did not end with the task")
	}
	tk := e.waitEnd(acc.TaskId, patience)
	if tk.State != "cancelled" {
		t.Fatalf("after cancel: %s", tk.State)
	}
	e.noEnvironmentsLeft()
	if out, _ := exec.Command("pgrep", "-f", "^sleep 4321$").Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("the cancelled process still runs: %s", out)
	}
}

// agentic-mgmt killed with SIGKILL while a task runs: after the restart the
// task continues from its checkpoint, binds to the process its agent kept
// (never starting it twice) and ends with its real outcome. The run
// outlasts the agent's reconnect, so the restarted server's reconciliation
// of the agent's report meets it (it killed it as an unknown session once).
func TestTaskSurvivesAServerKill(t *testing.T) {
	e := newTaskEnv(t)
	marker := filepath.Join(t.TempDir(), "starts")
	acc := e.accepted("command: {argv: [sh, -c, \"echo x >> " + marker + "; echo before-the-kill; sleep 9; echo after-the-kill; echo made > REPORT.md\"]}\nenvironment: {runtime: host}\nlifecycle: {artifact_patterns: [REPORT.md]}\n")
	eventually(t, patience, "the task running and its first line out", func() bool {
		return e.get(acc.TaskId).State == "running" && e.get(acc.TaskId).Progress.OutputBytes > 0
	})
	e.killAndRestart()
	tk := e.waitEnd(acc.TaskId, patience)
	if tk.State != "completed" {
		t.Fatalf("after the restart: %s %s %s", tk.State, deref(tk.Reason), deref(tk.Error))
	}
	if b, _ := os.ReadFile(marker); string(b) != "x\n" {
		t.Errorf("the process started %d times", strings.Count(string(b), "x"))
	}
	// The event stream outlives the restart: the output from before it,
	// every id once and in order, and Last-Event-ID resumes after an id
	// the first server gave.
	events := readSSE(t, e.s, acc.TaskId, "")
	var output strings.Builder
	last := int64(0)
	firstOutput := ""
	for _, ev := range events {
		id, _ := strconv.ParseInt(ev.id, 10, 64)
		if id <= last {
			t.Fatalf("event ids not increasing: %d after %d in %+v", id, last, events)
		}
		last = id
		if ev.event == "output" {
			var o struct {
				Data string `json:"data"`
			}
			_ = json.Unmarshal([]byte(ev.data), &o)
			output.WriteString(o.Data)
			if firstOutput == "" {
				firstOutput = ev.id
			}
		}
	}
	if !strings.Contains(output.String(), "before-the-kill\nafter-the-kill\n") {
		t.Errorf("output across the restart: %q", output.String())
	}
	resumed := readSSE(t, e.s, acc.TaskId, firstOutput)
	if len(resumed) == 0 || resumed[0].id == firstOutput || resumed[len(resumed)-1].event != "end" {
		t.Errorf("resumed after %s: %+v", firstOutput, resumed)
	}
	e.noEnvironmentsLeft()
}

// SIGKILL of agentic-mgmt in each phase before and after running: the
// restarted server carries every task to its real outcome, with its
// artifact and patch, and leaves no environment behind. (Running is
// TestTaskSurvivesAServerKill.) The test hook AGENTIC_TEST_TASK_HOLD keeps
// the first server in the phase long enough to be killed there.
func TestTaskSurvivesAServerKillInEachPhase(t *testing.T) {
	for _, phase := range []string{"pending", "staging", "provisioning", "ready", "completing"} {
		t.Run(phase, func(t *testing.T) {
			e := newTaskEnv(t, "AGENTIC_TEST_TASK_HOLD="+phase+"=2m", quickReconnect)
			marker := filepath.Join(t.TempDir(), "starts")
			acc := e.accepted("repository: {url: " + e.repo + "}\ncommand: {argv: [sh, -c, \"echo x >> " + marker + "; echo made > REPORT.md; echo more >> a.txt\"]}\nenvironment: {runtime: host}\nlifecycle: {artifact_patterns: [REPORT.md]}\n")
			eventually(t, patience, "the task in "+phase, func() bool { return e.get(acc.TaskId).State == phase })
			e.killAndRestart()
			tk := e.waitEnd(acc.TaskId, patience)
			if tk.State != "completed" {
				t.Fatalf("killed in %s, then: %s %s %s", phase, tk.State, deref(tk.Reason), deref(tk.Error))
			}
			if b, _ := os.ReadFile(marker); string(b) != "x\n" {
				t.Errorf("the process started %d times", strings.Count(string(b), "x"))
			}
			_, report := fileDo(t, e.s, http.MethodGet, e.s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/REPORT.md", nil)
			_, patch := fileDo(t, e.s, http.MethodGet, e.s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/changes.patch", nil)
			if string(report) != "made\n" || !strings.Contains(string(patch), "+more") {
				t.Errorf("after a kill in %s: report %q, patch %q", phase, report, patch)
			}
			e.noEnvironmentsLeft()
		})
	}
}

// agenticctl task submit --follow shows the phases and exits with the
// outcome; artifacts --download saves them by path.
func TestTaskCLI(t *testing.T) {
	e := newTaskEnv(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	_ = os.WriteFile(good, []byte("command: {argv: [sh, -c, \"mkdir -p out && echo hi > out/r.txt\"]}\nenvironment: {runtime: host}\nlifecycle: {artifact_patterns: [\"out/*.txt\"]}\n"), 0o644)
	out, errOut, code := ctl(t, e.s.RESTURL, e.s.Token, "task", "submit", "-f", good, "--follow")
	if code != 0 || !strings.Contains(out, "completed") || !strings.Contains(out, "running (ready took") {
		t.Fatalf("submit --follow: %d %q %q", code, out, errOut)
	}
	id := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(errOut, "\n", 2)[0], "task "))
	list, _, code := ctl(t, e.s.RESTURL, e.s.Token, "task", "list", "--state", "completed")
	if code != 0 || !strings.Contains(list, id) {
		t.Errorf("list: %d %q (want %s)", code, list, id)
	}
	dl := filepath.Join(dir, "dl")
	if out, errOut, code := ctl(t, e.s.RESTURL, e.s.Token, "task", "artifacts", id, "--download", dl); code != 0 {
		t.Fatalf("artifacts: %d %s %s", code, out, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(dl, "out", "r.txt")); string(b) != "hi\n" {
		t.Errorf("downloaded artifact: %q", b)
	}
	bad := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(bad, []byte("command: {argv: [sh, -c, \"exit 7\"]}\nenvironment: {runtime: host}\n"), 0o644)
	if _, errOut, code := ctl(t, e.s.RESTURL, e.s.Token, "task", "submit", "-f", bad, "--follow"); code != 7 || !strings.Contains(errOut, "non_zero_exit") {
		t.Errorf("a failing task: exit %d %q, want 7 and the reason", code, errOut)
	}
	logsYAML := filepath.Join(dir, "logs.yaml")
	_ = os.WriteFile(logsYAML, []byte("command: {argv: [sh, -c, \"echo line-one; echo line-two\"]}\nenvironment: {runtime: host}\n"), 0o644)
	lout, _, _ := ctl(t, e.s.RESTURL, e.s.Token, "task", "submit", "-f", logsYAML)
	lid := strings.TrimSpace(lout)
	if out, errOut, code := ctl(t, e.s.RESTURL, e.s.Token, "task", "logs", "-f", lid); code != 0 || out != "line-one\nline-two\n" {
		t.Errorf("task logs -f: %d %q %q", code, out, errOut)
	}
	if out, _, code := ctl(t, e.s.RESTURL, e.s.Token, "task", "submit", "-f", good, "--dry-run"); code != 0 || !strings.Contains(out, `"timeout": "2h0m0s"`) {
		t.Errorf("dry run: %d %q", code, out)
	}
}

// A task in a Docker container: staged over the agent link into a
// container without a network, run as nobody, the patch and artifacts back.
func TestTaskInDocker(t *testing.T) {
	host := privateDockerd(t)
	repo := baseRepo(t, "a")
	s := startServer(t, 0, t.TempDir(), "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=host,docker", "TASK_TEST_TOKEN="+taskSecret)
	e := &taskEnv{t: t, s: s, repo: repo}
	tk := e.run(`
repository: {url: ` + repo + `}
command: {argv: [sh, -c, "echo changed > a.txt && echo \"uid=$(id -u) token=${#MY_TOKEN}\" > REPORT.md"]}
secrets: [{name: MY_TOKEN, source: env, key: TASK_TEST_TOKEN}]
lifecycle: {artifact_patterns: [REPORT.md]}
`)
	if tk.State != "completed" || tk.Environment.Runtime != "docker" {
		t.Fatalf("task: %s on %s: %s %s", tk.State, tk.Environment.Runtime, deref(tk.Reason), deref(tk.Error))
	}
	_, report := fileDo(t, s, http.MethodGet, s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/REPORT.md", nil)
	if string(report) != "uid=65534 token="+strconv.Itoa(len(taskSecret))+"\n" {
		t.Errorf("REPORT.md %q: want the run as nobody with its secret", report)
	}
	_, patch := fileDo(t, s, http.MethodGet, s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/changes.patch", nil)
	if !bytes.Contains(patch, []byte("+changed")) {
		t.Errorf("patch: %s", patch)
	}
	e.noEnvironmentsLeft()
}

type sseEvent struct{ event, id, data string }

// readSSE reads a task's event stream until the server ends it.
func readSSE(t *testing.T, s *harness.Server, id, lastEventID string) []sseEvent {
	t.Helper()
	evs, err := sseEvents(openSSE(t, s, id, lastEventID))
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// openSSE opens the task's event stream; once it returns, the stream is
// live (its answer has come).
func openSSE(t *testing.T, s *harness.Server, id, lastEventID string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.RESTURL+"/api/v1/tasks/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	// Bounds the whole stream, which lasts as long as the task.
	client := &http.Client{Timeout: 3 * time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return resp
}

// sseEvents reads an event stream to its end.
func sseEvents(resp *http.Response) ([]sseEvent, error) {
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("the event stream did not end cleanly: %w", err)
	}
	var out []sseEvent
	for _, block := range strings.Split(strings.TrimSpace(string(body)), "\n\n") {
		var ev sseEvent
		for _, line := range strings.Split(block, "\n") {
			k, v, _ := strings.Cut(line, ": ")
			switch k {
			case "event":
				ev.event = v
			case "id":
				ev.id = v
			case "data":
				ev.data = v
			}
		}
		out = append(out, ev)
	}
	return out, nil
}

// A task in a VM (libvirt, TCG): the repository goes in over the
// virtio-serial link, the run is the guest's nobody, the patch comes back.
func TestTaskInLibvirt(t *testing.T) {
	repo := baseRepo(t, "a")
	s := startLibvirtServer(t)
	e := &taskEnv{t: t, s: s, repo: repo}
	tk := e.run(`
repository: {url: ` + repo + `}
command: {argv: [sh, -c, "echo vm > a.txt && echo \"uid=$(id -u)\" > REPORT.md"]}
environment: {runtime: libvirt}
lifecycle: {artifact_patterns: [REPORT.md]}
`)
	if tk.State != "completed" || tk.Environment.Runtime != "libvirt" {
		t.Fatalf("task: %s on %s: %s %s", tk.State, tk.Environment.Runtime, deref(tk.Reason), deref(tk.Error))
	}
	_, report := fileDo(t, s, http.MethodGet, s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/REPORT.md", nil)
	_, patch := fileDo(t, s, http.MethodGet, s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/changes.patch", nil)
	if string(report) != "uid=65534\n" || !bytes.Contains(patch, []byte("+vm")) {
		t.Errorf("REPORT.md %q, patch %s", report, patch)
	}
	e.noEnvironmentsLeft()
}

// While a task with a secret runs, no process on the machine has the
// secret's value in its argv.
func TestTaskSecretNeverInArgv(t *testing.T) {
	e := newTaskEnv(t)
	acc := e.accepted("command: {argv: [sleep, \"31\"]}\nenvironment: {runtime: host}\nsecrets: [{name: MY_TOKEN, source: env, key: TASK_TEST_TOKEN}]\n")
	eventually(t, patience, "the task running", func() bool { return e.get(acc.TaskId).State == "running" })
	// "running" is recorded when the agent has started the run, which can be
	// a moment before the child has exec'd sleep: look until it shows, and
	// check every process seen meanwhile.
	sawSleep := false
	eventually(t, patience, "the run among the processes", func() bool {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			cmdline, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			if bytes.Contains(cmdline, []byte(taskSecret)) {
				t.Errorf("%s has the secret in its argv: %q", p, cmdline)
			}
			if string(cmdline) == "sleep\x0031\x00" && !sawSleep {
				sawSleep = true
				// The run itself has it in its environment, and only there.
				if env, err := os.ReadFile(filepath.Join(filepath.Dir(p), "environ")); err == nil && !bytes.Contains(env, []byte("MY_TOKEN="+taskSecret)) {
					t.Errorf("the run's environment lacks its secret")
				}
			}
		}
		return sawSleep
	})
	if st, b := fileDo(t, e.s, http.MethodDelete, e.s.RESTURL+"/api/v1/tasks/"+acc.TaskId, nil); st != 202 {
		t.Fatalf("cancel: %d %s", st, b)
	}
	if tk := e.waitEnd(acc.TaskId, patience); tk.State != "cancelled" {
		t.Errorf("task %s %s", tk.State, deref(tk.Reason))
	}
}

// failure_action: preserve keeps the environment of a failed task for a
// look; DELETE destroys it at once.
func TestTaskPreservedOnFailure(t *testing.T) {
	e := newTaskEnv(t)
	tk := e.run("command: {argv: [sh, -c, \"echo evidence > clue.txt; exit 4\"]}\nenvironment: {runtime: host}\nlifecycle: {failure_action: preserve, preserve_for: 1h, artifact_patterns: [clue.txt]}\n")
	if tk.State != "failed_preserved" || deref(tk.Reason) != "non_zero_exit" || tk.PreserveUntil == nil {
		t.Fatalf("task: %s %s %v", tk.State, deref(tk.Reason), tk.PreserveUntil)
	}
	if left := e.environmentsLeft(); len(left) != 1 || !strings.HasPrefix(left[0], tk.Environment.Name+":") {
		t.Fatalf("preserved environments: %v", left)
	}
	// What it made was kept before anything else.
	if _, clue := fileDo(t, e.s, http.MethodGet, e.s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/clue.txt", nil); string(clue) != "evidence\n" {
		t.Errorf("clue.txt: %q", clue)
	}
	if st, b := fileDo(t, e.s, http.MethodDelete, e.s.RESTURL+"/api/v1/tasks/"+tk.Id, nil); st != 202 {
		t.Fatalf("delete: %d %s", st, b)
	}
	eventually(t, patience, "the preserved environment destroyed", func() bool { return len(e.environmentsLeft()) == 0 })
}

// Listing: newest first, filters by state and label, pages by cursor.
func TestTaskListFiltersAndPages(t *testing.T) {
	e := newTaskEnv(t)
	var ids []string
	for i, team := range []string{"a", "b", "a"} {
		acc := e.accepted("metadata: {name: l" + strconv.Itoa(i) + ", labels: {team: " + team + "}}\ncommand: {argv: [\"true\"]}\nenvironment: {runtime: host}\n")
		if acc.State != "pending" {
			t.Errorf("a new task is answered %q, want pending", acc.State)
		}
		ids = append(ids, acc.TaskId)
		e.waitEnd(acc.TaskId, patience)
	}
	list := func(q string) restapi.TaskList {
		st, b := fileDo(t, e.s, http.MethodGet, e.s.RESTURL+"/api/v1/tasks?"+q, nil)
		if st != http.StatusOK {
			t.Fatalf("list %s: %d %s", q, st, b)
		}
		var l restapi.TaskList
		_ = json.Unmarshal(b, &l)
		return l
	}
	all := list("")
	if len(all.Tasks) != 3 || all.Tasks[0].Id != ids[2] || all.Tasks[2].Id != ids[0] {
		t.Errorf("newest first: %v, want %v reversed", taskIDs(all.Tasks), ids)
	}
	if a := list("label=team%3Da"); len(a.Tasks) != 2 || a.Tasks[0].Id != ids[2] || a.Tasks[1].Id != ids[0] {
		t.Errorf("label team=a: %v", taskIDs(a.Tasks))
	}
	if none := list("state=running"); len(none.Tasks) != 0 {
		t.Errorf("state=running: %v", taskIDs(none.Tasks))
	}
	p1 := list("limit=2")
	if len(p1.Tasks) != 2 || p1.NextCursor == nil {
		t.Fatalf("page 1: %v %v", taskIDs(p1.Tasks), p1.NextCursor)
	}
	p2 := list("limit=2&cursor=" + *p1.NextCursor)
	if len(p2.Tasks) != 1 || p2.Tasks[0].Id != ids[0] || p2.NextCursor != nil {
		t.Errorf("page 2: %v %v", taskIDs(p2.Tasks), p2.NextCursor)
	}
	if st, b := fileDo(t, e.s, http.MethodGet, e.s.RESTURL+"/api/v1/tasks?state=bogus", nil); st != 400 {
		t.Errorf("a bad state: %d %s", st, b)
	}
}

func taskIDs(ts []restapi.Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Id)
	}
	return out
}

// With skip_permissions: false, claude's permission prompts come to the
// operator as HITL requests (GET /api/v1/hitl, with the task id) through
// the agent's MCP server; the task waits, and the answer reaches claude.
func TestTaskPermissionPromptsAreHITL(t *testing.T) {
	s := startServer(t, 0, t.TempDir(), "PATH="+fakeClaudeMCP(t)+":"+os.Getenv("PATH"), "AGENTIC_TASK_RUNTIME=host")
	e := &taskEnv{t: t, s: s}
	for _, decision := range []string{"allow", "deny"} {
		acc := e.accepted("claude: {prompt: ask, skip_permissions: false}\nenvironment: {runtime: host}\nlifecycle: {artifact_patterns: [\"*.txt\"]}\n")
		hitl := waitTaskHITL(t, s, acc.TaskId)
		if deref(hitl.ToolName) != "Bash" || !strings.Contains(deref(hitl.ToolInput), "rm -rf build") {
			t.Errorf("the request: %+v", hitl)
		}
		if tk := e.get(acc.TaskId); tk.State != "running" || deref(tk.Progress.Activity) != "waiting" {
			t.Errorf("while it waits: %s, activity %q", tk.State, deref(tk.Progress.Activity))
		}
		body := `{"text": "not in this repository", "decision": "` + decision + `"}`
		st, b := fileDo(t, s, http.MethodPost, s.RESTURL+"/api/v1/hitl/"+hitl.HitlId+"/respond", strings.NewReader(body))
		if st != 200 {
			t.Fatalf("respond: %d %s", st, b)
		}
		tk := e.waitEnd(acc.TaskId, patience)
		if tk.State != "completed" {
			t.Fatalf("after %s: %s %s %s", decision, tk.State, deref(tk.Reason), deref(tk.Error))
		}
		name := map[string]string{"allow": "allowed.txt", "deny": "denied.txt"}[decision]
		_, got := fileDo(t, s, http.MethodGet, s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/"+name, nil)
		want := map[string]string{"allow": `"behavior":"allow"`, "deny": `"message":"not in this repository"`}[decision]
		if !strings.Contains(string(got), want) {
			t.Errorf("%s: claude was told %q", decision, got)
		}
		// Answered: no longer open.
		if st, b := fileDo(t, s, http.MethodPost, s.RESTURL+"/api/v1/hitl/"+hitl.HitlId+"/respond", strings.NewReader(body)); st != 404 && st != 409 {
			t.Errorf("answering again: %d %s", st, b)
		}
	}
}

// fakeClaudeMCP builds the fake claude that is an MCP client into a
// directory of its own, for PATH.
func fakeClaudeMCP(t *testing.T) string {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "claude"), "./cmd/internal/e2e/testdata/fakeclaude")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the fake claude: %v %s", err, out)
	}
	return bin
}

// waitTaskHITL waits for the open question of a task.
func waitTaskHITL(t *testing.T, s *harness.Server, taskID string) restapi.HITLRequest {
	t.Helper()
	var hitl restapi.HITLRequest
	eventually(t, patience, "the permission request", func() bool {
		_, b := fileDo(t, s, http.MethodGet, s.RESTURL+"/api/v1/hitl", nil)
		var l restapi.HITLList
		_ = json.Unmarshal(b, &l)
		for _, h := range l.Requests {
			if deref(h.TaskId) == taskID {
				hitl = h
				return true
			}
		}
		return false
	})
	return hitl
}

// A question open when agentic-mgmt is killed is asked again after the
// restart (the agent sends what still waits on every connect), and the
// answer still reaches claude.
func TestTaskPermissionSurvivesAServerKill(t *testing.T) {
	data := t.TempDir()
	s := startServer(t, 0, data, "PATH="+fakeClaudeMCP(t)+":"+os.Getenv("PATH"), "AGENTIC_TASK_RUNTIME=host")
	e := &taskEnv{t: t, s: s, data: data}
	acc := e.accepted("claude: {prompt: ask, skip_permissions: false}\nenvironment: {runtime: host}\nlifecycle: {artifact_patterns: [\"*.txt\"]}\n")
	first := waitTaskHITL(t, s, acc.TaskId)
	e.killAndRestart()
	s2 := e.s
	again := waitTaskHITL(t, s2, acc.TaskId)
	if again.HitlId != first.HitlId {
		t.Errorf("the question came back as %s, was %s", again.HitlId, first.HitlId)
	}
	if st, b := fileDo(t, s2, http.MethodPost, s2.RESTURL+"/api/v1/hitl/"+again.HitlId+"/respond", strings.NewReader(`{"text": "", "decision": "allow"}`)); st != 200 {
		t.Fatalf("respond: %d %s", st, b)
	}
	tk := e.waitEnd(acc.TaskId, patience)
	if tk.State != "completed" {
		t.Fatalf("after the restart: %s %s %s", tk.State, deref(tk.Reason), deref(tk.Error))
	}
	if _, got := fileDo(t, s2, http.MethodGet, s2.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/allowed.txt", nil); !strings.Contains(string(got), `"behavior":"allow"`) {
		t.Errorf("claude was told %q", got)
	}
}

// killAndRestart kills agentic-mgmt with SIGKILL and starts it again on the
// same data dir, ports and environment, less the hold that test hook put
// on the first life.
func (e *taskEnv) killAndRestart() {
	e.t.Helper()
	old := e.s
	old.Kill()
	env := slices.DeleteFunc(slices.Clone(old.Opts.Env), func(v string) bool { return strings.HasPrefix(v, "AGENTIC_TEST_TASK_HOLD=") })
	s2, err := harness.Start(bins, harness.Options{DataDir: old.DataDir, BasePort: old.Opts.BasePort, Env: env})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		s2.Kill()
		if e.t.Failed() {
			e.t.Logf("restarted agentic-mgmt log:\n%s", s2.Log())
		}
	})
	e.s = s2
}
