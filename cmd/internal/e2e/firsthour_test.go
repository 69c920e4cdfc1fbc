package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/procexec"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The README's "First hour" is a walkthrough a new user follows from a
// fresh clone. Each of its shell blocks is marked for this test:
//
//	<!-- first-hour: NAME [type="KEYS"] [exit=N] [expect="REGEXP"] -->
//
// (values as written, without a double quote in them)
//	```sh
//	…
//	```
//
// TestFirstHour runs them in order, as written, in a directory laid out like
// the clone after `make run` (bin/ holds the binaries, .state/operator-token
// the token), against a real agentic-mgmt. The only lines it does not run
// are the make targets that start daemons, which it replaces by the
// harness's own (firstHourMake says how); any other make target fails the
// test. type="KEYS" runs the block in a real terminal and types KEYS (and
// Enter) once the shell answers; exit=N is the exit status the block must
// end with (default 0); expect is what its output must match. The names of
// the steps are fixed (firstHourSteps), so a step dropped from the README or
// one added without a thought for this test fails it.

// firstHourSteps are the walkthrough's steps, in order.
var firstHourSteps = []string{"server", "shell", "sessions", "docker", "environment", "container-shell", "files", "task", "dashboard"}

// firstHourMake are the make targets the walkthrough may name and what the
// test does instead.
var firstHourMake = map[string]string{
	"make run":    "the harness's agentic-mgmt with one host agent, DOCKER_HOST the socket of make docker's dockerd, its data dir linked as .state",
	"make docker": "the test's private dockerd on that socket (harness.StartDockerdIn)",
}

type firstHourStep struct {
	name  string
	attrs map[string]string
	code  string
	line  int
}

// readmeSection is the text of README.md's "## title" section.
func readmeSection(t *testing.T, title string) (string, int) {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	head := "\n## " + title + "\n"
	i := strings.Index(s, head)
	if i < 0 {
		t.Fatalf("README.md has no section %q", "## "+title)
	}
	body := s[i+len(head):]
	if j := strings.Index(body, "\n## "); j >= 0 {
		body = body[:j]
	}
	return body, strings.Count(s[:i+len(head)], "\n") + 1
}

var (
	firstHourMarker = regexp.MustCompile(`^<!-- first-hour: ([a-z-]+)(.*?)-->$`)
	firstHourAttr   = regexp.MustCompile(`\s*([a-z]+)=(?:"([^"]*)"|(\S+))`)
)

// firstHourBlocks are the marked blocks of the README's "First hour".
func firstHourBlocks(t *testing.T) []firstHourStep {
	t.Helper()
	body, first := readmeSection(t, "First hour")
	lines := strings.Split(body, "\n")
	var steps []firstHourStep
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "```sh") && (i == 0 || !firstHourMarker.MatchString(lines[i-1])) {
			t.Fatalf("README.md:%d: a shell block in \"First hour\" without a first-hour marker: every one is run", first+i)
		}
		m := firstHourMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		st := firstHourStep{name: m[1], attrs: map[string]string{}, line: first + i}
		rest := m[2]
		for _, a := range firstHourAttr.FindAllStringSubmatch(rest, -1) {
			st.attrs[a[1]] = a[2] + a[3]
		}
		if strings.TrimSpace(firstHourAttr.ReplaceAllString(rest, "")) != "" {
			t.Fatalf("README.md:%d: cannot read the marker's attributes %q", st.line, rest)
		}
		for k := range st.attrs {
			if !slices.Contains([]string{"type", "exit", "expect"}, k) {
				t.Fatalf("README.md:%d: unknown attribute %q (type, exit, expect)", st.line, k)
			}
		}
		if i+1 >= len(lines) || lines[i+1] != "```sh" {
			t.Fatalf("README.md:%d: the first-hour marker must be followed by a ```sh block", st.line)
		}
		var code []string
		for i += 2; i < len(lines) && lines[i] != "```"; i++ {
			code = append(code, lines[i])
		}
		st.code = strings.Join(code, "\n")
		steps = append(steps, st)
	}
	var names []string
	for _, s := range steps {
		names = append(names, s.name)
	}
	if !slices.Equal(names, firstHourSteps) {
		t.Fatalf("the README's first-hour steps are %q, this test knows %q: change both together", names, firstHourSteps)
	}
	return steps
}

// makeLine is the make target a line of a block runs ("make run"), or "".
func makeLine(line string) string {
	line, _, _ = strings.Cut(line, "#")
	f := strings.Fields(line)
	if len(f) >= 2 && f[0] == "make" {
		return strings.Join(f[:2], " ")
	}
	return ""
}

// firstHourDemoRepo is where the README's task step makes its repository; the test
// gives it a place of its own.
const firstHourDemoRepo = "/tmp/agentic-demo-repo"

// TestFirstHour runs the README's "First hour" walkthrough, step by step.
func TestFirstHour(t *testing.T) {
	steps := firstHourBlocks(t)
	testreq.Command(t, "dockerd", "run make test-env")
	testreq.Root(t, "a private dockerd")
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}

	// A directory like the clone: bin/, scripts/, examples/ and, once the
	// server runs, .state/ (its data dir). Open to nobody, as /tmp is: the
	// task step's repository is in it.
	work, err := os.MkdirTemp("", "first-hour-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{bins.Mgmt, bins.Agent, bins.Ctl} {
		if err := os.Symlink(b, filepath.Join(work, "bin", filepath.Base(b))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "scripts"), filepath.Join(work, "scripts")); err != nil {
		t.Fatal(err)
	}
	// The README's fixed places and make run's ports, made the test's own.
	localRepo := filepath.Join(work, "agentic-demo-repo")
	var s *harness.Server
	localize := func(text string) string {
		pairs := []string{firstHourDemoRepo, localRepo}
		if s != nil {
			host, port, _ := strings.Cut(s.AgentAddr(), ":")
			p, _ := strconv.Atoi(port)
			for i, addr := range []string{"127.0.0.1:8120", "127.0.0.1:8121", "127.0.0.1:8122"} {
				pairs = append(pairs, addr, fmt.Sprintf("%s:%d", host, p+i))
			}
		}
		return strings.NewReplacer(pairs...).Replace(text)
	}
	copyLocalized(t, filepath.Join(root, "examples"), filepath.Join(work, "examples"), localize)

	// The private dockerd make docker starts: the server is told its
	// socket from the start, as make run is, and finds it once it answers.
	dockerDir, err := os.MkdirTemp("/tmp", "fhd")
	if err != nil {
		t.Fatal(err)
	}
	dockerHost, _ := harness.DockerdArgs(dockerDir)
	t.Cleanup(func() { os.RemoveAll(dockerDir) })

	// Nothing of the test's own environment tells the CLI where the server
	// is: it finds it in .state, as in the clone.
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "AGENTIC_") && k != "SECRETS_DIR" && k != "DOCKER_HOST" {
			env = append(env, kv)
		}
	}

	for _, st := range steps {
		t.Logf("README.md:%d: step %s", st.line, st.name)
		var run []string
		for _, line := range strings.Split(st.code, "\n") {
			target := makeLine(line)
			if target == "" {
				run = append(run, line)
				continue
			}
			switch target {
			case "make run":
				if s != nil {
					t.Fatalf("README.md:%d: make run twice", st.line)
				}
				// make run names no runtimes (those found: the harness names host only)
				// and no host user (as root each host agent gets users of its own).
				s = startServer(t, 1, "", "DOCKER_HOST="+dockerHost, "AGENTIC_RUNTIMES=", "AGENTIC_HOST_USER=")
				if err := os.Symlink(s.DataDir, filepath.Join(work, ".state")); err != nil {
					t.Fatal(err)
				}
			case "make docker":
				_, stop, err := harness.StartDockerdIn(dockerDir)
				if err != nil {
					t.Fatalf("README.md:%d: a private dockerd for make docker: %v", st.line, err)
				}
				t.Cleanup(stop)
			default:
				t.Fatalf("README.md:%d: step %s runs %q, which this test cannot stand in for (it knows %q)", st.line, st.name, target, sortedKeys(firstHourMake))
			}
		}
		code := strings.TrimSpace(strings.Join(run, "\n"))
		if code == "" {
			continue
		}
		if s == nil {
			t.Fatalf("README.md:%d: step %s runs before the server is started", st.line, st.name)
		}
		code = localize(code)
		want := 0
		if v, ok := st.attrs["exit"]; ok {
			if want, err = strconv.Atoi(v); err != nil {
				t.Fatalf("README.md:%d: exit=%q", st.line, v)
			}
		}
		var out string
		var got int
		if keys, ok := st.attrs["type"]; ok {
			out, got = firstHourTyped(t, work, env, code, keys)
		} else {
			out, got = firstHourRun(t, work, env, code)
		}
		t.Logf("README.md:%d: step %s exited %d:\n%s", st.line, st.name, got, out)
		if got != want {
			t.Fatalf("README.md:%d: step %s exited %d, want %d:\n%s\n--- output:\n%s", st.line, st.name, got, want, code, out)
		}
		if e, ok := st.attrs["expect"]; ok && !regexp.MustCompile(e).MatchString(out) {
			t.Fatalf("README.md:%d: step %s: output does not match %q:\n%s\n--- output:\n%s", st.line, st.name, e, code, out)
		}
		if check := firstHourChecks[st.name]; check != nil {
			check(t, s, out)
		}
	}
}

// copyLocalized copies the directory from to to, each file's text through
// localize.
func copyLocalized(t *testing.T, from, to string, localize func(string) string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		target := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, []byte(localize(string(b))), fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// firstHourRun runs a block with bash, stopping at the first failure as a
// person would, and is its combined output and exit status.
func firstHourRun(t *testing.T, dir string, env []string, code string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", code)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s\ndid not end within %v:\n%s", code, 5*patience, out.String())
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), 0
}

// firstHourTyped runs a block in a real terminal and types keys once the
// shell it opens answers (the test asks it with an echo of its own first).
func firstHourTyped(t *testing.T, dir string, env []string, code, keys string) (string, int) {
	t.Helper()
	envMap := map[string]string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		envMap[k] = "" // what env leaves out is unset, as far as the CLI goes
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		envMap[k] = v
	}
	tm := &terminal{}
	tm.proc = procexec.Runner{}.Start(ports.CommandSpec{
		Command: "bash", Args: []string{"-e", "-o", "pipefail", "-c", code}, WorkingDir: dir, Env: envMap,
		PTY: true, Cols: 100, Rows: 30, StdinOpen: true,
	}, func(_ ports.OutputStream, b []byte) { _, _ = tm.out.Write(b) })
	t.Cleanup(func() { tm.proc.Kill(); tm.proc.Wait() })
	tm.typeUntil(t, "echo first-hour-$((6*7))\r", regexp.MustCompile(`first-hour-42`))
	if err := tm.proc.WriteStdin([]byte(keys + "\r")); err != nil {
		t.Fatal(err)
	}
	r := tm.ended(t, "after typing "+keys)
	return string(tm.output()), r.ExitCode
}

// firstHourChecks look further than the output where the README promises
// more.
var firstHourChecks = map[string]func(t *testing.T, s *harness.Server, out string){
	// The dashboard: signed in with the token the step printed, the task
	// of the walkthrough is listed, completed.
	"dashboard": func(t *testing.T, s *harness.Server, out string) {
		token := strings.TrimSpace(out)
		if token != s.Token {
			t.Fatalf("the dashboard step printed %q, not the operator token", out)
		}
		tasks, err := s.Client().ListTasksWithResponse(context.Background(), nil)
		if err != nil || tasks.JSON200 == nil || len(tasks.JSON200.Tasks) != 1 {
			t.Fatalf("want the walkthrough's one task: %v %s", err, tasks.Body)
		}
		id := tasks.JSON200.Tasks[0].Id
		p := newBrowser(t).newPage()
		signInAs(p, s.RESTURL+"/", token, "")
		p.do("the tasks", chromedp.Navigate(s.RESTURL+"/#/tasks"))
		p.waitJS("the walkthrough's task, completed", fmt.Sprintf(
			`[...document.querySelectorAll('[data-testid^="task-row-"]')].some(r => r.getAttribute("data-testid").includes(%q) && r.innerText.includes("completed"))`, id))
		p.shot("first-hour-tasks")
	},
}

// The README says what the make targets install: every package the
// Makefile and scripts/ install when missing (need="$need PKG") is named
// in its section, so one added there without a word here fails.
func TestReadmeSaysWhatMakeInstalls(t *testing.T) {
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	body, _ := readmeSection(t, "The two commands")
	files, err := filepath.Glob(filepath.Join(root, "scripts", "*.sh"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "Makefile"))
	pkg := regexp.MustCompile(`need="\$\$?need ([a-z0-9][a-z0-9.+-]*)"`)
	var found []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range pkg.FindAllStringSubmatch(string(b), -1) {
			found = append(found, m[1])
			if !strings.Contains(body, "`"+m[1]+"`") {
				t.Errorf("%s installs %s, which README.md's \"The two commands\" does not name", filepath.Base(f), m[1])
			}
		}
	}
	// What the recipes name besides apt packages.
	for _, w := range []string{"registry.npmjs.org", "proxy.golang.org", "linux-image-amd64", "`gcc`", "`chromium`", "`npm`"} {
		if !strings.Contains(body, w) {
			t.Errorf("README.md's \"The two commands\" does not say %s", w)
		}
	}
	if len(found) < 10 {
		t.Fatalf("found only %q in the Makefile and scripts: has the way they install changed?", found)
	}
}
