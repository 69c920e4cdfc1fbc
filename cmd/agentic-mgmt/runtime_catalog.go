package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/docker"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/libvirt"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Runtimes are the runtimes this server provisions environments with.
type Runtimes struct {
	// Available answered at start.
	Available map[string]ports.Runtime
	// Unreachable were asked for (or found) but did not answer, with why.
	Unreachable map[string]error
	// explicit is whether AGENTIC_RUNTIMES chose them.
	explicit bool
	closers  []func()
}

// Isolations are the tiers to advertise: the host tier where host agents
// run, container and VM where the operator configured those runtimes
// (AGENTIC_RUNTIMES) and they answer. Runtimes merely found serve
// environments; their tier is advertised once an agent of that kind is
// connected (see mission.ExecutorCapabilities), since a mission can only
// run on a connected agent.
func (r *Runtimes) Isolations(hostAgents bool) []ports.RuntimeKind {
	var out []ports.RuntimeKind
	if hostAgents {
		out = append(out, ports.KindHost)
	}
	if !r.explicit {
		return out
	}
	for _, rt := range r.Available {
		if iso := rt.Capabilities().Isolation; iso != ports.KindHost && !slices.Contains(out, iso) {
			out = append(out, iso)
		}
	}
	slices.Sort(out)
	return out
}

// readiness reports each runtime; one asked for by AGENTIC_RUNTIMES that
// does not answer makes the server unready, one only found does not.
func (r *Runtimes) readiness() []rest.ReadinessCheck {
	var out []rest.ReadinessCheck
	for name := range r.Available {
		out = append(out, rest.ReadinessCheck{Name: "runtime_" + name, Ready: true, Detail: "reachable"})
	}
	for name, err := range r.Unreachable {
		out = append(out, rest.ReadinessCheck{Name: "runtime_" + name, Ready: !r.explicit, Detail: "unreachable, not used: " + err.Error()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Close releases the engines' connections.
func (r *Runtimes) Close() {
	for _, c := range r.closers {
		c()
	}
}

// owner tells this server's containers and domains from another's on the
// same engine: stable for a data dir.
func owner(cfg Config) string {
	sum := sha256.Sum256([]byte(cfg.DataDir))
	return "as-" + hex.EncodeToString(sum[:6])
}

// runtimeEntry is one runtime in the catalog: everything the server knows
// of it in one place. Its capabilities are declared by the adapter itself
// (ports.Runtime.Capabilities), so they cannot drift from what it does.
type runtimeEntry struct {
	// Name is the adapter's RuntimeName, a value of AGENTIC_RUNTIMES.
	Name string
	// Found reports whether the engine seems to be on this machine; it
	// decides which runtimes are tried when AGENTIC_RUNTIMES is unset.
	Found func() bool
	// New makes the adapter; the func, when not nil, releases it.
	New func(cfg Config, d runtimeDeps) (ports.Runtime, func(), error)
}

// runtimeDeps is what a catalog entry's constructor may use besides Config.
type runtimeDeps struct {
	Log *slog.Logger
	// HostUser is who host agents run as (nil: this server's user).
	HostUser *hostsup.AgentUser
}

// runtimeCatalog lists every runtime this server can use. Adding a runtime
// is one entry here (see docs/contributing.md).
var runtimeCatalog = []runtimeEntry{
	{
		Name:  hostsup.RuntimeName,
		Found: func() bool { return true },
		New: func(cfg Config, d runtimeDeps) (ports.Runtime, func(), error) {
			return hostsup.NewRuntime(hostsup.RuntimeConfig{StateDir: filepath.Join(cfg.DataDir, "host-envs"), Logger: d.Log,
				ExtraEnv: cfg.agentEnv(), User: d.HostUser}), nil, nil
		},
	},
	{
		Name:  docker.RuntimeName,
		Found: func() bool { return os.Getenv("DOCKER_HOST") != "" || exists("/var/run/docker.sock") },
		New: func(cfg Config, _ runtimeDeps) (ports.Runtime, func(), error) {
			rt, err := docker.New(docker.Config{Owner: owner(cfg), SecretDir: filepath.Join(cfg.DataDir, "docker-secrets")})
			if err != nil {
				return nil, nil, err
			}
			return rt, func() { _ = rt.Close() }, nil
		},
	},
	{
		Name:  libvirt.RuntimeName,
		Found: func() bool { return os.Getenv("LIBVIRT_DEFAULT_URI") != "" || exists("/var/run/libvirt/libvirt-sock") },
		New: func(cfg Config, d runtimeDeps) (ports.Runtime, func(), error) {
			// QEMU runs as its own user and must reach the VMs' files: the data
			// dir is opened for search only (its files stay 0600, secrets/ 0700).
			if err := os.Chmod(cfg.DataDir, 0o711); err != nil { //nolint:gosec // search only, for QEMU; the files inside stay 0600
				return nil, nil, err
			}
			rt, err := libvirt.New(libvirt.Config{
				Owner: owner(cfg), StateDir: filepath.Join(cfg.DataDir, "vms"), Logger: d.Log,
				ImageDir: cfg.VMImageDir, Accel: cfg.LibvirtAccel, DiskImageDir: cfg.ImageDir,
				NoRestore: cfg.LibvirtNoRestore, RestoreAll: cfg.LibvirtRestoreAll,
			})
			if err != nil {
				return nil, nil, err
			}
			return rt, func() { _ = rt.Close() }, nil
		},
	},
}

// runtimeNames are the catalog's names, the values AGENTIC_RUNTIMES takes.
func runtimeNames() []string {
	out := make([]string, len(runtimeCatalog))
	for i, e := range runtimeCatalog {
		out[i] = e.Name
	}
	return out
}

func catalogEntry(name string) (runtimeEntry, bool) {
	i := slices.IndexFunc(runtimeCatalog, func(e runtimeEntry) bool { return e.Name == name })
	if i < 0 {
		return runtimeEntry{}, false
	}
	return runtimeCatalog[i], true
}

// provideRuntimes makes the runtimes AGENTIC_RUNTIMES names, else every
// catalog entry found on this machine, and keeps those whose engine answers.
func provideRuntimes(cfg Config, log *slog.Logger, hostUser *hostsup.AgentUser) (*Runtimes, func()) {
	r := &Runtimes{Available: map[string]ports.Runtime{}, Unreachable: map[string]error{}, explicit: cfg.Runtimes != nil}
	want := cfg.Runtimes
	if want == nil {
		for _, e := range runtimeCatalog {
			if e.Found() {
				want = append(want, e.Name)
			}
		}
	}
	for _, name := range want {
		e, ok := catalogEntry(name)
		if !ok { // config refuses unknown names; this is a programming error
			r.Unreachable[name] = fmt.Errorf("unknown runtime %q", name)
			continue
		}
		rt, closer, err := e.New(cfg, runtimeDeps{Log: log, HostUser: hostUser})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = rt.Ping(ctx)
			cancel()
		}
		if closer != nil {
			r.closers = append(r.closers, closer)
		}
		if err != nil {
			r.Unreachable[name] = err
			log.Error("runtime unreachable; its environments and isolation tier are not offered", "runtime", name, "err", err)
			continue
		}
		r.Available[name] = rt
		log.Info("runtime available", "runtime", name, "isolation", rt.Capabilities().Isolation)
	}
	return r, r.Close
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// defaultTaskRuntime runs tasks whose manifest names no runtime:
// AGENTIC_TASK_RUNTIME, else docker where it answers, else host.
func defaultTaskRuntime(cfg Config, rts *Runtimes) string {
	if cfg.TaskRuntime != "" {
		return cfg.TaskRuntime
	}
	if _, ok := rts.Available[docker.RuntimeName]; ok {
		return docker.RuntimeName
	}
	return hostsup.RuntimeName
}
