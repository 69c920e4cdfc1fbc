package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
)

// Each engine but the host's has the script `make test-env` runs to install
// it, and each such script belongs to an engine: a runtime's test set-up is
// found by its name, not by reading the Makefile.
func TestEveryEngineHasItsTestEnvScript(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	scripts, err := filepath.Glob(filepath.Join(root, "scripts", "*-test-env.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, s := range scripts {
		named = append(named, strings.TrimSuffix(filepath.Base(s), "-test-env.sh"))
		if fi, err := os.Stat(s); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s: not executable (tests run it directly): %v", s, err)
		}
	}
	for _, name := range EngineNames() {
		if name != hostsup.RuntimeName && !slices.Contains(named, name) {
			t.Errorf("engine %q has no scripts/%s-test-env.sh", name, name)
		}
	}
	for _, name := range named {
		if _, ok := engines[name]; !ok {
			t.Errorf("scripts/%s-test-env.sh belongs to no engine (known: %v)", name, EngineNames())
		}
	}
}

func TestStartEngineRefusesAnUnknownRuntime(t *testing.T) {
	if _, err := StartEngine("nope"); err == nil || !strings.Contains(err.Error(), "docker") {
		t.Errorf("unknown runtime: %v; want an error listing the known ones", err)
	}
	e, err := StartEngine(hostsup.RuntimeName)
	if err != nil || e.Runtime != hostsup.RuntimeName || len(e.Env) != 0 {
		t.Errorf("host engine: %+v, %v; want nothing to start", e, err)
	}
	e.Stop()
}

// recorder is a TB that records how NeedEngine stopped it.
type recorder struct {
	skipped, failed string
	cleanups        int
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }
func (r *recorder) Cleanup(func())                    { r.cleanups++ }

// What the machine lacks skips (fails under CI); anything else fails.
func TestNeedEngineSkipsOnlyWhatIsMissing(t *testing.T) {
	saved := engines["docker"]
	t.Cleanup(func() { engines["docker"] = saved })

	t.Setenv("CI", "")
	engines["docker"] = func() (Engine, error) { return Engine{}, &Missing{What: "dockerd", How: testEnvHow("docker")} }
	r := &recorder{}
	NeedEngine(r, "docker")
	if !strings.Contains(r.skipped, "dockerd") || !strings.Contains(r.skipped, "scripts/docker-test-env.sh") || r.failed != "" || r.cleanups != 0 {
		t.Errorf("missing engine: %+v; want a skip saying what and how", r)
	}
	t.Setenv("CI", "true")
	r = &recorder{}
	NeedEngine(r, "docker")
	if r.failed == "" || r.skipped != "" {
		t.Errorf("missing engine under CI: %+v; want a failure", r)
	}

	t.Setenv("CI", "")
	engines["docker"] = func() (Engine, error) { return Engine{}, errors.New("dockerd exited at start") }
	r = &recorder{}
	NeedEngine(r, "docker")
	if !strings.Contains(r.failed, "exited") || r.skipped != "" {
		t.Errorf("broken engine: %+v; want a failure", r)
	}

	stopped := false
	engines["docker"] = func() (Engine, error) {
		return Engine{Env: []string{"DOCKER_HOST=unix:///x.sock"}, stop: func() { stopped = true }}, nil
	}
	r = &recorder{}
	e := NeedEngine(r, "docker")
	if e.Getenv("DOCKER_HOST") != "unix:///x.sock" || e.Runtime != "docker" || r.cleanups != 1 || r.failed != "" || r.skipped != "" {
		t.Errorf("engine: %+v, %+v; want its env and a cleanup", e, r)
	}
	e.Stop()
	if !stopped {
		t.Error("Stop did not stop the engine")
	}
}

// A shared engine starts once for every caller, a caller's Stop leaves it
// running, and StopEngines stops it.
func TestSharedEngineStartsOnceAndStopsAtTheEnd(t *testing.T) {
	starts, stops := 0, 0
	start := shared(func() (Engine, error) {
		starts++
		return Engine{Env: []string{"X=1"}, stop: func() { stops++ }}, nil
	})
	for range 3 {
		e, err := start()
		if err != nil || e.Getenv("X") != "1" {
			t.Fatalf("shared engine: %+v, %v", e, err)
		}
		e.Env[0] = "X=changed" // a caller's copy
		e.Stop()
	}
	if starts != 1 || stops != 0 {
		t.Errorf("%d starts, %d stops before StopEngines; want 1, 0", starts, stops)
	}
	StopEngines()
	StopEngines()
	if stops != 1 {
		t.Errorf("%d stops after StopEngines; want 1", stops)
	}

	// A start that failed fails every caller the same way.
	failing := shared(func() (Engine, error) { starts++; return Engine{}, &Missing{What: "x", How: "y"} })
	for range 2 {
		if _, err := failing(); err == nil {
			t.Error("a failed shared start answered")
		}
	}
	if starts != 2 {
		t.Errorf("%d starts; want the failing one once", starts)
	}
}
