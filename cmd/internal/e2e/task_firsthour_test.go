package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

// demoRepo is where scripts/claude-standin.sh makes the demo repository
// and what examples/tasks/*.yaml stage.
const demoRepo = "/tmp/agentic-demo-repo"

// systemPath is a PATH without /usr/local: no claude a user of this
// machine may have installed there (the stand-in, or the real one).
const systemPath = "/usr/sbin:/usr/bin:/sbin:/bin"

// tasksREADME is README.md's "## Tasks" section and the module's root.
func tasksREADME(t *testing.T) (section, root string) {
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
	i := strings.Index(s, "\n## Tasks\n")
	if i < 0 {
		t.Fatal(`README.md has no "## Tasks" section`)
	}
	s = s[i+1:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	return s, root
}

// followSample is the ```text block after <!-- task-follow: name --> in
// the README's tasks section.
func followSample(t *testing.T, section, name string) string {
	t.Helper()
	marker := "<!-- task-follow: " + name + " -->\n```text\n"
	i := strings.Index(section, marker)
	if i < 0 {
		t.Fatalf("README.md's tasks section has no %q", strings.TrimSpace(marker))
	}
	body := section[i+len(marker):]
	j := strings.Index(body, "```")
	if j < 0 {
		t.Fatalf("README.md: the block after %q does not end", name)
	}
	return body[:j]
}

var (
	clockTime = regexp.MustCompile(`\b\d\d:\d\d:\d\d\.\d\d\d\b`)
	tookTime  = regexp.MustCompile(`took [^)]+\)`)
	byteCount = regexp.MustCompile(`output \d+ B`)
	taskID    = regexp.MustCompile(`(?m)(^|agenticctl: )task \S+`)
)

// sameShape is what a follower prints with what differs from run to run
// (times, durations, sizes, the id) made the same.
func sameShape(s string) string {
	s = clockTime.ReplaceAllString(s, "HH:MM:SS.mmm")
	s = tookTime.ReplaceAllString(s, "took D)")
	s = byteCount.ReplaceAllString(s, "output N B")
	return taskID.ReplaceAllString(s, "${1}task ID")
}

// standinTools makes what `make claude-standin` makes, with its own
// script, in directories of the test: the stand-in's directory (for PATH)
// and the demo repository; both are open to the host agents' own users.
func standinTools(t *testing.T, root string) (bin, repo string) {
	t.Helper()
	bin = filepath.Join(t.TempDir(), "bin")
	repo = filepath.Join(t.TempDir(), "agentic-demo-repo")
	for _, args := range [][]string{{"install", bin}, {"demo-repo", repo}} {
		cmd := exec.Command(filepath.Join(root, "scripts", "claude-standin.sh"), args...)
		cmd.Env = append(os.Environ(), "PATH="+systemPath)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scripts/claude-standin.sh %v: %v %s", args, err, out)
		}
	}
	testkit.OpenToAll(t, bin)
	testkit.OpenToAll(t, repo)
	return bin, repo
}

// The README's tasks without an API key, as a new user follows them: the
// make target's script installs the stand-in and makes the demo
// repository; every examples/tasks manifest the README names (and it names
// them all) runs to completed through agenticctl with its artifacts and a
// patch that applies to the repository; --follow prints what the README
// shows. The server is root's default (host agents with users of their
// own) when the test runs as root.
func TestTaskExamplesFromTheREADME(t *testing.T) {
	section, root := tasksREADME(t)
	named := regexp.MustCompile(`task submit -f (examples/tasks/[\w.-]+\.yaml)`).FindAllStringSubmatch(section, -1)
	var examples []string
	for _, m := range named {
		if !slices.Contains(examples, m[1]) {
			examples = append(examples, m[1])
		}
	}
	files, _ := filepath.Glob(filepath.Join(root, "examples", "tasks", "*.yaml"))
	for _, f := range files {
		if rel, _ := filepath.Rel(root, f); !slices.Contains(examples, rel) {
			t.Errorf("README.md's tasks section does not show %s", rel)
		}
	}
	if len(examples) < 2 || !slices.Contains(examples, "examples/tasks/claude-standin.yaml") || !slices.Contains(examples, "examples/tasks/command.yaml") {
		t.Fatalf("README.md's tasks section names %v", examples)
	}
	if mk, _ := os.ReadFile(filepath.Join(root, "Makefile")); !strings.Contains(string(mk), "\nclaude-standin:\n\tscripts/claude-standin.sh\n") {
		t.Error("the Makefile's claude-standin target does not run scripts/claude-standin.sh")
	}
	if sh, _ := os.ReadFile(filepath.Join(root, "scripts", "claude-standin.sh")); !strings.Contains(string(sh), "\nDEMO_REPO="+demoRepo+"\n") {
		t.Errorf("scripts/claude-standin.sh does not make its demo repository at %s", demoRepo)
	}
	bin, repo := standinTools(t, root)
	env := []string{"PATH=" + bin + ":" + systemPath, "AGENTIC_RUNTIMES=host"}
	if os.Geteuid() == 0 {
		env = append(env, defaultHostUsers)
	}
	s := startServer(t, 0, "", env...)
	dir := t.TempDir()
	for _, ex := range examples {
		doc, err := os.ReadFile(filepath.Join(root, ex))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), "url: "+demoRepo+",") {
			t.Fatalf("%s does not stage %s", ex, demoRepo)
		}
		manifest := filepath.Join(dir, filepath.Base(ex))
		if err := os.WriteFile(manifest, []byte(strings.ReplaceAll(string(doc), demoRepo, repo)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := ctl(t, s.RESTURL, s.Token, "task", "submit", "-f", manifest, "--follow")
		if code != 0 || !strings.Contains(out, "  completed (completing took") {
			t.Fatalf("%s: exit %d\n%s%s", ex, code, errOut, out)
		}
		id := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(errOut, "\n", 2)[0], "task "))
		if filepath.Base(ex) == "claude-standin.yaml" {
			if got, want := sameShape(errOut+out), sameShape(followSample(t, section, "claude-standin")); got != want {
				t.Errorf("%s --follow printed (made alike):\n%s\nREADME.md shows (made alike):\n%s", ex, got, want)
			}
		}
		dl := filepath.Join(dir, "out-"+id)
		if out, errOut, code := ctl(t, s.RESTURL, s.Token, "task", "artifacts", id, "--download", dl); code != 0 {
			t.Fatalf("%s: artifacts: %d %s %s", ex, code, out, errOut)
		}
		if b, err := os.ReadFile(filepath.Join(dl, "REPORT.md")); err != nil || len(b) == 0 {
			t.Errorf("%s: REPORT.md %q %v", ex, b, err)
		}
		fresh := t.TempDir()
		gitIn(t, fresh, "clone", "-q", repo, ".")
		gitIn(t, fresh, "apply", "--check", filepath.Join(dl, "changes.patch"))
		if patch, _ := os.ReadFile(filepath.Join(dl, "changes.patch")); !strings.Contains(string(patch), "REPORT.md") {
			t.Errorf("%s: the patch lacks REPORT.md:\n%s", ex, patch)
		}
	}
}

// A claude task where there is no claude: the task's error says what the
// agent said (command not found: "claude") and what to do, in the record
// and the event stream's end; --follow says the reason once, as the README
// shows, and exits 127. It said "non_zero_exit non_zero_exit (exit code
// 127)" and "not found" nowhere.
func TestTaskWithoutClaudeSaysWhatToDo(t *testing.T) {
	if p, err := exec.LookPath("claude"); err == nil && strings.HasPrefix(p, "/usr/") && !strings.HasPrefix(p, "/usr/local/") {
		t.Fatalf("this test needs a machine without claude in %s: %s", systemPath, p)
	}
	section, root := tasksREADME(t)
	_, repo := standinTools(t, root)
	env := []string{"PATH=" + systemPath, "AGENTIC_RUNTIMES=host"}
	if os.Geteuid() == 0 {
		env = append(env, defaultHostUsers)
	}
	s := startServer(t, 0, "", env...)
	doc, err := os.ReadFile(filepath.Join(root, "examples", "tasks", "claude-standin.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(t.TempDir(), "claude.yaml")
	if err := os.WriteFile(manifest, []byte(strings.ReplaceAll(string(doc), demoRepo, repo)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := ctl(t, s.RESTURL, s.Token, "task", "submit", "-f", manifest, "--follow")
	if code != 127 || strings.Count(errOut, "non_zero_exit") != 1 {
		t.Fatalf("exit %d (want 127), the reason %d times (want once):\n%s%s", code, strings.Count(errOut, "non_zero_exit"), errOut, out)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if got, want := sameShape(lines[len(lines)-1]), sameShape(strings.TrimSpace(followSample(t, section, "no-claude"))); got != want {
		t.Errorf("--follow ended with (made alike):\n%s\nREADME.md shows (made alike):\n%s", got, want)
	}
	id := strings.TrimSpace(strings.TrimPrefix(lines[0], "task "))
	st, b := fileDo(t, s, http.MethodGet, s.RESTURL+"/api/v1/tasks/"+id, nil)
	var tk struct {
		State, Reason, Error string
		ExitCode             int `json:"exit_code"`
	}
	_ = json.Unmarshal(b, &tk)
	if st != http.StatusOK || tk.State != "failed" || tk.Reason != "non_zero_exit" || tk.ExitCode != 127 ||
		!strings.Contains(tk.Error, `command not found: "claude"`) || !strings.Contains(tk.Error, "command.argv") || !strings.Contains(tk.Error, "environment.image") {
		t.Errorf("the task: %d %s", st, b)
	}
	evs := readSSE(t, s, id, "")
	if end := evs[len(evs)-1]; end.event != "end" || !strings.Contains(end.data, `command not found: \"claude\"`) {
		t.Errorf("the event stream's end: %+v", end)
	}
}

// The stand-in's image (scripts/claude-standin.sh image, as the README
// says): built on a Docker engine the server has made its base image on,
// it runs the claude example in a container to completed, with its report.
func TestTaskStandinImage(t *testing.T) {
	host := privateDockerd(t)
	testreq.Command(t, "docker", "run make test-env (docker.io has the docker CLI)")
	section, root := tasksREADME(t)
	if !strings.Contains(strings.Join(strings.Fields(section), " "), "environment: {runtime: docker, image: agentic-sandbox/claude-standin}") {
		t.Fatal("README.md's tasks section does not show the stand-in image's environment")
	}
	_, repo := standinTools(t, root)
	s := startServer(t, 0, "", "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=docker")
	e := &taskEnv{t: t, s: s, repo: repo}
	// The base image comes with the first container.
	if tk := e.run("command: {argv: [\"true\"]}\nenvironment: {runtime: docker}\n"); tk.State != "completed" {
		t.Fatalf("a first container: %s %s %s", tk.State, deref(tk.Reason), deref(tk.Error))
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "claude-standin.sh"), "image")
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+host)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/claude-standin.sh image: %v %s", err, out)
	}
	doc, err := os.ReadFile(filepath.Join(root, "examples", "tasks", "claude-standin.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := strings.ReplaceAll(string(doc), demoRepo, repo)
	if !strings.Contains(m, "environment: {runtime: host}") {
		t.Fatalf("examples/tasks/claude-standin.yaml has no host environment to change:\n%s", m)
	}
	m = strings.Replace(m, "environment: {runtime: host}", "environment: {runtime: docker, image: agentic-sandbox/claude-standin}", 1)
	tk := e.run(m)
	if tk.State != "completed" || tk.Environment.Runtime != "docker" || tk.Progress.ToolCalls != 3 {
		t.Fatalf("the stand-in in its image: %s on %s, %d tool calls: %s %s", tk.State, tk.Environment.Runtime, tk.Progress.ToolCalls, deref(tk.Reason), deref(tk.Error))
	}
	_, report := fileDo(t, s, http.MethodGet, s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/REPORT.md", nil)
	if !strings.Contains(string(report), "Prompt: describe this repository in REPORT.md") {
		t.Errorf("REPORT.md: %q", report)
	}
	e.noEnvironmentsLeft()
}
