package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
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

// runtimeDef is what one runtime brings, declared in its own file
// (runtime_<name>.go); T holds its settings once read and checked.
// Capabilities are not here: the adapter declares them itself
// (ports.Runtime.Capabilities), so they cannot drift from what it does.
type runtimeDef[T any] struct {
	// Name is the adapter's RuntimeName, a value of AGENTIC_RUNTIMES.
	Name string
	// Help is one line: what its environments are (--help, the README).
	Help string
	// FoundDoc says when Found holds, after "found" (Markdown).
	FoundDoc string
	// DefaultRank orders the runtimes a task naming none runs on: the
	// available one of the highest rank, else the lowest positive rank's.
	// 0: never chosen by default.
	DefaultRank int
	// Settings are the variables and flags it reads.
	Settings []setting
	// Configure checks the settings' values and makes its options; nil
	// leaves them zero. Errors name the variable.
	Configure func(v settingValues, cfg Config) (T, error)
	// Found reports whether the engine seems to be on this machine; it
	// decides which runtimes are tried when AGENTIC_RUNTIMES is unset.
	Found func(opts T) bool
	// New makes the adapter; the func, when not nil, releases it.
	New func(cfg Config, opts T, d runtimeDeps) (ports.Runtime, func(), error)
}

// runtimeEntry is a runtimeDef with its options' type erased, so that the
// catalog can list runtimes of different options.
type runtimeEntry struct {
	Name, Help, FoundDoc string
	DefaultRank          int
	Settings             []setting
	configure            func(v settingValues, cfg Config) (any, error)
	found                func(opts any) bool
	build                func(cfg Config, opts any, d runtimeDeps) (ports.Runtime, func(), error)
}

func (d runtimeDef[T]) entry() runtimeEntry {
	return runtimeEntry{
		Name: d.Name, Help: d.Help, FoundDoc: d.FoundDoc, DefaultRank: d.DefaultRank, Settings: d.Settings,
		configure: func(v settingValues, cfg Config) (any, error) {
			var opts T
			if d.Configure == nil {
				return opts, nil
			}
			return d.Configure(v, cfg)
		},
		found: func(opts any) bool { return d.Found(opts.(T)) },
		build: func(cfg Config, opts any, deps runtimeDeps) (ports.Runtime, func(), error) {
			return d.New(cfg, opts.(T), deps)
		},
	}
}

// options are the entry's options as loadConfig read them; a Config made
// by hand (tests) gets those of its settings' defaults.
func (e runtimeEntry) options(cfg Config) (any, error) {
	if opts, ok := cfg.RuntimeOptions[e.Name]; ok {
		return opts, nil
	}
	return e.configure(e.defaultValues(), cfg)
}

// Found reports whether the runtime's engine seems to be on this machine.
func (e runtimeEntry) Found(cfg Config) bool {
	opts, err := e.options(cfg)
	return err == nil && e.found(opts)
}

// New makes the runtime's adapter; the func, when not nil, releases it.
func (e runtimeEntry) New(cfg Config, d runtimeDeps) (ports.Runtime, func(), error) {
	opts, err := e.options(cfg)
	if err != nil {
		return nil, nil, err
	}
	return e.build(cfg, opts, d)
}

// runtimeDeps is what a catalog entry's constructor may use besides Config.
type runtimeDeps struct {
	Log *slog.Logger
	// HostUsers gives host agents their users (nil: this server's user).
	HostUsers *hostsup.Users
}

// runtimeCatalog lists every runtime this server can use, each defined in
// its runtime_<name>.go. Adding a runtime is one entry here (see
// docs/contributing.md); the order is that of --help and the README.
var runtimeCatalog = []runtimeEntry{
	hostRuntime.entry(),
	dockerRuntime.entry(),
	libvirtRuntime.entry(),
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
func provideRuntimes(cfg Config, log *slog.Logger, hostUsers *hostsup.Users) (*Runtimes, func()) {
	r := &Runtimes{Available: map[string]ports.Runtime{}, Unreachable: map[string]error{}, explicit: cfg.Runtimes != nil}
	want := cfg.Runtimes
	if want == nil {
		for _, e := range runtimeCatalog {
			if e.Found(cfg) {
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
		rt, closer, err := e.New(cfg, runtimeDeps{Log: log, HostUsers: hostUsers})
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
// AGENTIC_TASK_RUNTIME, else the catalog's choice among those available.
func defaultTaskRuntime(cfg Config, rts *Runtimes) string {
	if cfg.TaskRuntime != "" {
		return cfg.TaskRuntime
	}
	return defaultRuntime(func(name string) bool { _, ok := rts.Available[name]; return ok })
}

// defaultRuntime is the available runtime of the highest DefaultRank, else
// the lowest ranked one (the one that needs least: nothing else answers).
func defaultRuntime(available func(name string) bool) string {
	ranked := rankedRuntimes()
	for _, e := range ranked {
		if available(e.Name) {
			return e.Name
		}
	}
	return ranked[len(ranked)-1].Name
}

// rankedRuntimes are the entries of a positive DefaultRank, highest first.
func rankedRuntimes() []runtimeEntry {
	var out []runtimeEntry
	for _, e := range runtimeCatalog {
		if e.DefaultRank > 0 {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b runtimeEntry) int { return b.DefaultRank - a.DefaultRank })
	return out
}
