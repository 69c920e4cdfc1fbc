package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

// Engine is a runtime's engine made ready for a test or a bench: a private
// daemon started for it (dockerd), one shared by the whole process (the
// machine's libvirtd, set up once by scripts/libvirt-test-env.sh), or a
// part of its own in one shared by the process (a namespace of the
// Kubernetes test cluster).
type Engine struct {
	// Runtime is the name in agentic-mgmt's runtime catalog.
	Runtime string
	// Env points agentic-mgmt, or an adapter made in the test's process, at
	// this engine (KEY=VALUE, e.g. DOCKER_HOST=unix://…); empty when the
	// engine's defaults reach it.
	Env  []string
	stop func()
}

// Getenv is the value Env gives key, "" when it gives none.
func (e Engine) Getenv(key string) string {
	for _, kv := range e.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// Stop ends what StartEngine started (nothing for a daemon the machine
// shares); its directories go with it.
func (e Engine) Stop() {
	if e.stop != nil {
		e.stop()
	}
}

// Missing is StartEngine's error when the machine lacks what the engine
// needs: NeedEngine skips the test on it, or fails it under CI.
type Missing struct {
	// What is missing; How says how to get it.
	What, How string
}

func (m *Missing) Error() string { return "needs " + m.What + ": " + m.How }

// engines start each runtime's engine, by the names of agentic-mgmt's
// runtime catalog (its tests check that both list the same runtimes). A new
// runtime adds its starter here, and its scripts/<name>-test-env.sh installs
// what the starter needs (`make test-env` runs every such script).
var engines = map[string]func() (Engine, error){
	// Host environments are processes of this machine: nothing to start.
	hostsup.RuntimeName: func() (Engine, error) { return Engine{}, nil },
	"docker":            startDockerEngine,
	"libvirt":           shared(startLibvirtEngine),
	// The run's shared cluster (kubernetes.go), a namespace per caller.
	"kubernetes": startKubernetesEngine,
}

// EngineNames are the runtimes StartEngine knows, sorted.
func EngineNames() []string {
	out := make([]string, 0, len(engines))
	for name := range engines {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// StartEngine makes runtime's engine ready; the caller stops it. A *Missing
// error says what the machine lacks.
func StartEngine(runtime string) (Engine, error) {
	start, ok := engines[runtime]
	if !ok {
		return Engine{}, fmt.Errorf("no test engine for runtime %q (known: %s)", runtime, strings.Join(EngineNames(), ", "))
	}
	e, err := start()
	e.Runtime = runtime
	return e, err
}

// TB is the part of testing.TB NeedEngine uses.
type TB interface {
	testreq.T
	Cleanup(func())
}

// NeedEngine is StartEngine for a test: what the machine lacks skips the
// test (fails it under CI, see internal/testreq), any other error fails it,
// and the engine stops with the test.
func NeedEngine(t TB, runtime string) Engine {
	t.Helper()
	e, err := StartEngine(runtime)
	if m := (*Missing)(nil); errors.As(err, &m) {
		testreq.Need(t, false, m.What, m.How)
		return Engine{Runtime: runtime}
	}
	if err != nil {
		t.Fatalf("%s engine: %v", runtime, err)
	}
	t.Cleanup(e.Stop)
	return e
}

// testEnvHow is how to get what an engine lacks.
func testEnvHow(runtime string) string {
	return "run make test-env (scripts/" + runtime + "-test-env.sh)"
}

// shared makes start run once per process, for an engine too costly to
// start per test (a cluster) or that the machine has only one of. Every
// caller gets the same engine; its own Stop does nothing, and StopEngines
// stops the engine when the tests are done.
func shared(start func() (Engine, error)) func() (Engine, error) {
	var (
		once sync.Once
		e    Engine
		err  error
	)
	return func() (Engine, error) {
		once.Do(func() {
			e, err = start()
			if err == nil && e.stop != nil {
				sharedMu.Lock()
				sharedStops = append(sharedStops, e.stop)
				sharedMu.Unlock()
			}
		})
		return Engine{Env: slices.Clone(e.Env)}, err
	}
}

var (
	sharedMu    sync.Mutex
	sharedStops []func()
)

// StopEngines stops the shared engines this process started, last first:
// a test package's TestMain calls it after m.Run.
func StopEngines() {
	sharedMu.Lock()
	stops := sharedStops
	sharedStops = nil
	sharedMu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
}

// libvirtSocket is where libvirtd answers by default (no LIBVIRT_DEFAULT_URI).
const libvirtSocket = "/var/run/libvirt/libvirt-sock"

// startLibvirtEngine uses the machine's libvirtd (shared: run once per
// process). There is no systemd here, so as root it runs
// scripts/libvirt-test-env.sh (installs libvirt and QEMU when missing,
// starts virtlogd and libvirtd); without root the daemon must already
// answer on its socket. The daemon outlives the tests.
func startLibvirtEngine() (Engine, error) {
	if os.Geteuid() != 0 {
		if _, err := os.Stat(libvirtSocket); err != nil {
			return Engine{}, &Missing{What: "libvirtd (" + libvirtSocket + ")", How: "run make test-env as root (or the tests as root, which start it)"}
		}
		return Engine{}, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return Engine{}, err
	}
	out, err := exec.Command(filepath.Join(root, "scripts", "libvirt-test-env.sh")).CombinedOutput()
	if err != nil {
		return Engine{}, errors.New("scripts/libvirt-test-env.sh: " + err.Error() + "\n" + string(out))
	}
	return Engine{}, nil
}
