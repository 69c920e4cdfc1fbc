package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Runtimes are the runtimes this server provisions environments with.
// Those wanted but not answering are tried again (discover): every
// discoverEvery, when the runtimes are listed and when a request names
// one, so an engine started after the server is used without a restart.
type Runtimes struct {
	mu sync.Mutex
	// Available answer and are offered: from the start, or once the
	// environments took on what one found later holds (offered).
	Available map[string]ports.Runtime
	// pending answer, found after start and handed to the environments,
	// which have not offered them yet: until they do, a client told such
	// a runtime is ready would not find it listed.
	pending map[string]ports.Runtime
	// Unreachable were asked for (or found) but do not answer, with why.
	Unreachable map[string]error
	// explicit is whether AGENTIC_RUNTIMES chose them.
	explicit bool
	closers  []func()

	// What discover needs to make a runtime.
	cfg  Config
	deps runtimeDeps
	// probe keeps to one discover at a time; slow is when each runtime
	// last took long to fail (an engine that hangs, not one that is
	// absent), so that requests in a burst do not each wait on it.
	probe sync.Mutex
	slow  map[string]time.Time
}

// discoverEvery is how often runtimes wanted but not answering are tried
// again; a request naming one, or GET /api/v1/runtimes, tries at once.
const discoverEvery = 15 * time.Second

// retryAfter is how long a runtime that took slowFailure or more to fail
// is left alone by on-demand tries; one that fails at once (no socket,
// connection refused) is tried every time.
const (
	retryAfter  = time.Second
	slowFailure = 500 * time.Millisecond
)

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
	for _, rt := range r.snapshot() {
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
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []rest.ReadinessCheck
	for name := range r.Available {
		out = append(out, rest.ReadinessCheck{Name: "runtime_" + name, Ready: true, Detail: "reachable"})
	}
	for name := range r.pending {
		out = append(out, rest.ReadinessCheck{Name: "runtime_" + name, Ready: !r.explicit, Detail: "reachable, not offered yet: its environments are being recovered"})
	}
	for name, err := range r.Unreachable {
		out = append(out, rest.ReadinessCheck{Name: "runtime_" + name, Ready: !r.explicit, Detail: "unreachable, not used: " + err.Error()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// snapshot is a copy of the runtimes available now.
func (r *Runtimes) snapshot() map[string]ports.Runtime {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.Available)
}

// wanted are the runtimes this server uses when they answer:
// AGENTIC_RUNTIMES's, else those found on this machine now.
func (r *Runtimes) wanted() []string {
	if r.explicit {
		return r.cfg.Runtimes
	}
	var out []string
	for _, e := range runtimeCatalog {
		if e.Found(r.cfg) {
			out = append(out, e.Name)
		}
	}
	return out
}

// try makes a runtime and pings it; one that does not answer is released.
func (r *Runtimes) try(ctx context.Context, name string, timeout time.Duration) (ports.Runtime, error) {
	e, ok := catalogEntry(name)
	if !ok { // config refuses unknown names; this is a programming error
		return nil, fmt.Errorf("unknown runtime %q", name)
	}
	rt, closer, err := e.New(r.cfg, r.deps)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err = rt.Ping(pctx)
		cancel()
	}
	if err != nil {
		if closer != nil {
			closer()
		}
		return nil, err
	}
	if closer != nil {
		r.mu.Lock()
		r.closers = append(r.closers, closer)
		r.mu.Unlock()
	}
	return rt, nil
}

// discover tries again the runtimes wanted that do not answer (an engine
// started, or DOCKER_HOST's socket made, after this server) and returns
// those that answer now, for the environments to take on; each becomes
// available once they offered it (offered).
func (r *Runtimes) discover(ctx context.Context) map[string]ports.Runtime {
	r.probe.Lock()
	defer r.probe.Unlock()
	found := map[string]ports.Runtime{}
	for _, name := range r.wanted() {
		r.mu.Lock()
		_, have := r.Available[name]
		_, handed := r.pending[name]
		r.mu.Unlock()
		if have || handed || time.Since(r.slow[name]) < retryAfter {
			continue
		}
		start := time.Now()
		rt, err := r.try(ctx, name, 3*time.Second)
		r.mu.Lock()
		if err != nil {
			r.Unreachable[name] = err
			if time.Since(start) >= slowFailure {
				r.slow[name] = time.Now()
			}
			r.mu.Unlock()
			continue
		}
		delete(r.Unreachable, name)
		delete(r.slow, name)
		r.pending[name] = rt
		r.mu.Unlock()
		found[name] = rt
	}
	return found
}

// offered makes a runtime discover found available, once the environments
// offer it (environment.Config.Offered): readiness, the isolation tiers
// and the runtimes listed then say the same.
func (r *Runtimes) offered(name string) {
	r.mu.Lock()
	rt, ok := r.pending[name]
	if ok {
		delete(r.pending, name)
		r.Available[name] = rt
	}
	r.mu.Unlock()
	if ok {
		r.deps.Log.Info("runtime available now (found after start)", "runtime", name, "isolation", rt.Capabilities().Isolation)
	}
}

// unavailable says why a runtime is not offered and how to get it, for
// the error of a request naming it.
func (r *Runtimes) unavailable(name string) string {
	e, ok := catalogEntry(name)
	if !ok {
		return "runtimes this server knows: " + strings.Join(runtimeNames(), ", ")
	}
	again := fmt.Sprintf("agentic-mgmt tries again every %s and on GET /api/v1/runtimes", discoverEvery)
	r.mu.Lock()
	err, unreachable := r.Unreachable[name]
	_, pending := r.pending[name]
	r.mu.Unlock()
	switch {
	case r.explicit && !slices.Contains(r.cfg.Runtimes, name):
		return fmt.Sprintf("AGENTIC_RUNTIMES (%s) does not name %s: add it and restart agentic-mgmt", strings.Join(r.cfg.Runtimes, ","), name)
	case pending:
		return fmt.Sprintf("%s answers now and its environments are being recovered: it is offered in a moment", name)
	case unreachable:
		return fmt.Sprintf("%s does not answer (%v): %s; %s", name, err, e.HowTo, again)
	default:
		return fmt.Sprintf("%s is not found on this machine (it is used %s): %s; %s", name, unmark(e.FoundDoc), e.HowTo, again)
	}
}

// Close releases the engines' connections.
func (r *Runtimes) Close() {
	r.mu.Lock()
	closers := r.closers
	r.closers = nil
	r.mu.Unlock()
	for _, c := range closers {
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
	// HowTo says how to make it available where it is not (Markdown,
	// a clause): the error of a request naming it carries it.
	HowTo string
	// AgentInImage says its environments take the agent from an image of
	// their own (kubernetes' agent image), not the host's agentic-agent
	// (AgentBootstrap.Binary): a server offering only such runtimes needs
	// no agent binary beside it.
	AgentInImage bool
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
	Name, Help, FoundDoc, HowTo string
	AgentInImage                bool
	DefaultRank                 int
	Settings                    []setting
	configure                   func(v settingValues, cfg Config) (any, error)
	found                       func(opts any) bool
	build                       func(cfg Config, opts any, d runtimeDeps) (ports.Runtime, func(), error)
}

func (d runtimeDef[T]) entry() runtimeEntry {
	return runtimeEntry{
		Name: d.Name, Help: d.Help, FoundDoc: d.FoundDoc, HowTo: d.HowTo, AgentInImage: d.AgentInImage, DefaultRank: d.DefaultRank, Settings: d.Settings,
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
	kubernetesRuntime.entry(),
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
// catalog entry found on this machine, and keeps those whose engine
// answers; the others are tried again later (Runtimes.discover).
func provideRuntimes(cfg Config, log *slog.Logger, hostUsers *hostsup.Users) (*Runtimes, func()) {
	r := &Runtimes{Available: map[string]ports.Runtime{}, pending: map[string]ports.Runtime{}, Unreachable: map[string]error{}, explicit: cfg.Runtimes != nil,
		cfg: cfg, deps: runtimeDeps{Log: log, HostUsers: hostUsers}, slow: map[string]time.Time{}}
	for _, name := range r.wanted() {
		rt, err := r.try(context.Background(), name, 5*time.Second)
		if err != nil {
			r.Unreachable[name] = err
			level := slog.LevelWarn
			if r.explicit {
				level = slog.LevelError
			}
			log.Log(context.Background(), level, "runtime unreachable; its environments and isolation tier are not offered until it answers",
				"runtime", name, "err", err, "how", unmark(r.unavailable(name)))
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
	avail := rts.snapshot()
	return defaultRuntime(func(name string) bool { _, ok := avail[name]; return ok })
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
