// Service is the environment use case: it provisions the
// environments agents live in through the configured runtimes (host,
// Docker, libvirt), gives each its agent (id = environment name, a fresh
// secret whose hash is stored), follows it until its agent is ready, and
// keeps the steps as progress events.

package environment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/internal/secret"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Config is what the service needs.
type Config struct {
	// Runtimes are the configured and reachable runtimes by name.
	Runtimes    map[string]ports.Runtime
	Agents      ports.AgentDirectory
	Credentials ports.AgentCredentials
	Clock       ports.Clock
	Logger      *slog.Logger
	// Bootstrap is the template of every environment's agent (binary and
	// the ways back to this server); ID and Secret are filled in.
	Bootstrap ports.AgentBootstrap
	// PublicPorts are the public preview marks: a deleted environment's go
	// with it, and a new one under an old name starts with none (nil:
	// there are none).
	PublicPorts ports.PublicPorts
	// ReadyTimeout bounds provision → agent ready (default 3 min: VMs
	// under software emulation are slow).
	ReadyTimeout time.Duration
	// ObserveProvision records a provision time (request → agent ready).
	ObserveProvision func(runtime string, d time.Duration)
	// AllowedNetworks, when set, are the only network modes a request may
	// name for a container or a VM (host environments share the host's).
	AllowedNetworks []ports.NetworkMode
	// Retire ends what a deleted environment's agent was doing (its
	// commands, sessions and missions) and forgets it at once.
	Retire ports.AgentRetirer
	// EgressBound, when set, is the server-wide allowlist every proxy
	// environment's allowed hosts must fall within.
	EgressBound []egress.Rule
	// Changes hears of every change to an environment (state, steps,
	// egress), after it is visible to Get and List.
	Changes ports.ChangeNotifier
	// Pools, when set, keeps warm pools and the claims on their members;
	// without it no pool is kept and every create provisions.
	Pools ports.PoolStore
	// StartPools are put at Recover (AGENTIC_POOLS), over stored ones.
	StartPools []ports.Pool
	// Renamer gives a taken member's agent the caller's name.
	Renamer ports.AgentRenamer
	// RefillConcurrency bounds the members provisioned at once (default
	// 2), so that refills never take the machine from running work.
	RefillConcurrency int
	// ObserveRefill records a member's provision time, by pool.
	ObserveRefill func(pool string, d time.Duration)
	// Discover, when set, returns the runtimes that have become available
	// since it last answered (an engine started after this server). The
	// service asks every DiscoverEvery (default 15 s) once recovered, when
	// Runtimes is listed and when a request names a runtime it lacks, and
	// takes a new runtime's environments and pools on as Recover does.
	Discover      func(ctx context.Context) map[string]ports.Runtime
	DiscoverEvery time.Duration
	// Offered, when set, is told the name of each runtime Discover handed
	// over once the service offers it, what it holds taken on: whoever
	// reports it usable (readiness) waits for this, not for Discover, so
	// that a client told it answers finds it listed.
	Offered func(name string)
	// Unavailable, when set, says why a runtime the service lacks is not
	// offered and how to get it, for the error of a request naming it.
	Unavailable func(name string) string
	// Known, when set, names every runtime there is (offered or not), for
	// UnavailableRuntimes.
	Known []string
	// Link, when set, warms each member up before it is idle: one `true`,
	// so the caller's first command does not pay for a cold exec path (a
	// VM under TCG translates it the first time: 50-90 ms, then 20 ms).
	Link ports.AgentLink
	// Injected keeps the values of environments' injected secrets under
	// their names, Secrets reads them (env or file); without both a
	// request with secrets is refused. Random fills placeholders (nil:
	// crypto/rand).
	Injected *inject.Registry
	Secrets  SecretSource
	Random   func([]byte) error
	// HibernateMaxBytes bounds the disk the saved states of hibernated
	// environments take together (AGENTIC_HIBERNATE_MAX_BYTES; 0: no bound);
	// a hibernation past it is refused (ErrHibernateLimit).
	HibernateMaxBytes int64
	// LinkQuiet ends an environment's agent link while its runtime saves
	// it, for runtimes that need it (ports.QuietLinkHibernator; nil: such
	// a runtime's hibernation is tried with the link up, and fails).
	LinkQuiet ports.LinkQuiescer
	// WakeTimeout bounds a hibernation and a wake (default
	// DefaultWakeTimeout); a wake past it leaves the environment failed.
	WakeTimeout time.Duration
	// ObserveHibernate and ObserveWake record how long each took, by runtime.
	ObserveHibernate, ObserveWake func(runtime string, d time.Duration)
	// Activity keeps each environment's last activity across restarts (nil:
	// in memory only). It is written in batches: every ActivitySaveEvery
	// (default DefaultActivitySaveEvery) while something changed, when an
	// environment hibernates, and at Close; read at Recover.
	Activity          ports.ActivityStore
	ActivitySaveEvery time.Duration
	// AgentDown, when set, ends the commands of an environment's agent
	// that disconnected once its runtime says the environment failed or
	// stopped (agentdown.go); without it they end after the link's
	// disconnect grace. Agents are looked at every AgentWatchEvery
	// (default 500 ms); the runtime of one that disconnected is asked
	// again after AgentDownBackoff (default 250 ms), doubled each time.
	AgentDown                         ports.AgentDowner
	AgentWatchEvery, AgentDownBackoff time.Duration
}

// maxEvents bounds the events kept per environment.
const maxEvents = 100

type record struct {
	env    Environment
	cancel context.CancelFunc // of the provisioning goroutine
	// requested is when this server was asked for it (zero when recovered):
	// the start of its provision time, recorded once.
	requested time.Time
	observed  bool
	// runtimeName is its name on its runtime when that is not its own: an
	// environment taken from a pool keeps its member's.
	runtimeName string
	// pool names the pool of an untaken member (hidden from Get and List).
	pool string
	// unhealthySince is when a ready member was first seen without its agent.
	unhealthySince time.Time
	// warming, warmed: a member's warm-up command is under way, or done.
	warming, warmed bool
	// secrets are its injected secrets, placeholders what its workload
	// holds for them (by name).
	secrets      []InjectedSecret
	placeholders map[string]string
	// transition is closed when the hibernation or wake under way ends
	// (nil: none is).
	transition chan struct{}
	// reserved is what its hibernation under way expects to save, counted
	// against Config.HibernateMaxBytes until the save ends (hibernate.go).
	reserved int64
	// sleptAt is when this server saw it hibernate (zero if before a
	// restart), stoppedAt when the idle keeper first saw it stopped.
	sleptAt, stoppedAt time.Time
	// idleFrom is when its idle clock started absent any use: when it
	// became ready, except that an agent coming back after a restart of
	// this server is no use (the clock goes on from the stored activity).
	idleFrom time.Time
	// recovered: found running at Recover; its next agent_ready is its
	// agent's return, which does not restart its idle clock (an operator's
	// start, stop, pause or resume meanwhile ends that).
	recovered bool
}

// rtName is the record's name on its runtime.
func (r *record) rtName() string {
	if r.runtimeName != "" {
		return r.runtimeName
	}
	return r.env.Name
}

// Service manages environments.
type Service struct {
	cfg Config
	log *slog.Logger

	// life ends with Close: every background wait (for an agent to
	// register) runs under it, so shutdown never waits out a timeout.
	life context.Context
	end  context.CancelFunc

	// rtMu guards cfg.Runtimes, which Discover adds to: a map never
	// written once published (copied on write).
	rtMu sync.RWMutex

	mu   sync.Mutex
	envs map[string]*record
	// acts is the activity of each environment by name (*activity).
	acts  sync.Map
	pools map[string]*pool
	wg    sync.WaitGroup

	// refill wakes the pools' keeper; slots bound its provisions.
	refill chan struct{}
	slots  chan struct{}
	// idlePolicy wakes the idle keeper when an environment gets a policy
	// shorter than its current wait.
	idlePolicy chan struct{}
	// storedActs are the stored activities of environments not recovered
	// yet (a runtime found later brings its own); under mu.
	storedActs map[string]ports.Activity
	// saveMu serialises writes of the activity store, so that an older
	// batch never lands after a newer one.
	saveMu sync.Mutex
}

// New returns the service; call Recover once at start.
func New(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 3 * time.Minute
	}
	if cfg.Changes == nil {
		cfg.Changes = ports.NoChanges{}
	}
	if cfg.RefillConcurrency <= 0 {
		cfg.RefillConcurrency = 2
	}
	if cfg.DiscoverEvery <= 0 {
		cfg.DiscoverEvery = 15 * time.Second
	}
	if cfg.WakeTimeout <= 0 {
		cfg.WakeTimeout = DefaultWakeTimeout
	}
	if cfg.ActivitySaveEvery <= 0 {
		cfg.ActivitySaveEvery = DefaultActivitySaveEvery
	}
	if cfg.AgentWatchEvery <= 0 {
		cfg.AgentWatchEvery = 500 * time.Millisecond
	}
	if cfg.AgentDownBackoff <= 0 {
		cfg.AgentDownBackoff = 250 * time.Millisecond
	}
	life, end := context.WithCancel(context.Background())
	return &Service{cfg: cfg, log: cfg.Logger.With("component", "environments"), envs: map[string]*record{}, life: life, end: end,
		pools: map[string]*pool{}, refill: make(chan struct{}, 1), idlePolicy: make(chan struct{}, 1), slots: make(chan struct{}, cfg.RefillConcurrency)}
}

// Runtimes names the configured runtimes and their capabilities, after
// asking Discover for runtimes that have become available.
func (s *Service) Runtimes() []ports.RuntimeCapabilities {
	s.discover(s.life)
	rts := s.runtimes()
	out := make([]ports.RuntimeCapabilities, 0, len(rts))
	for _, rt := range rts {
		out = append(out, rt.Capabilities())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Runtime < out[j].Runtime })
	return out
}

// UnavailableRuntimes are the Known runtimes not offered, each with why
// and how to get it (Unavailable); call it after Runtimes, which asks for
// runtimes found since.
func (s *Service) UnavailableRuntimes() map[string]string {
	out := map[string]string{}
	rts := s.runtimes()
	for _, name := range s.cfg.Known {
		if _, ok := rts[name]; ok {
			continue
		}
		why := "not configured"
		if s.cfg.Unavailable != nil {
			why = s.cfg.Unavailable(name)
		}
		out[name] = why
	}
	return out
}

// runtimes are the runtimes now.
func (s *Service) runtimes() map[string]ports.Runtime {
	s.rtMu.RLock()
	defer s.rtMu.RUnlock()
	return s.cfg.Runtimes
}

// runtime is the runtime of that name, if the service has it.
func (s *Service) runtime(name string) (ports.Runtime, bool) {
	rt, ok := s.runtimes()[name]
	return rt, ok
}

// discover asks Discover for runtimes that have become available and
// takes each on.
func (s *Service) discover(ctx context.Context) {
	if s.cfg.Discover == nil {
		return
	}
	found := s.cfg.Discover(ctx)
	for _, name := range slices.Sorted(maps.Keys(found)) {
		s.addRuntime(ctx, name, found[name])
	}
}

// watchRuntimes asks Discover every DiscoverEvery until Close.
func (s *Service) watchRuntimes() {
	defer s.wg.Done()
	s.every(s.cfg.DiscoverEvery, func() { s.discover(s.life) })
}

// every runs f every d until the service closes.
func (s *Service) every(d time.Duration, f func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-s.life.Done():
			return
		case <-tick.C:
			f()
		}
	}
}

// addRuntime offers a runtime found after start, and takes on what an
// earlier run of the server left on it: its pools, their members and the
// environments taken from them, and its environments.
func (s *Service) addRuntime(ctx context.Context, name string, rt ports.Runtime) {
	if s.cfg.Offered != nil {
		// Whichever way this returns, the runtime is offered by then.
		defer s.cfg.Offered(name)
	}
	if _, known := s.runtime(name); known {
		return
	}
	var claims map[string]string
	if s.cfg.Pools != nil {
		defs, err := s.cfg.Pools.Pools(ctx)
		if err != nil {
			s.log.ErrorContext(ctx, "pools could not be read: none kept on the runtime found", "runtime", name, "err", err)
		}
		if claims, err = s.cfg.Pools.Claims(ctx); err != nil {
			// As at Recover: without the claims, taken environments would
			// look like idle members; keep no pool of it instead.
			s.log.ErrorContext(ctx, "pool claims could not be read: no pool kept on the runtime found", "runtime", name, "err", err)
			defs = nil
		}
		s.mu.Lock()
		for _, d := range defs {
			if _, kept := s.pools[d.Name]; !kept && d.Runtime == name {
				s.pools[d.Name] = &pool{def: d}
			}
		}
		s.mu.Unlock()
	}
	s.recoverRuntime(ctx, name, rt, claims, func() bool {
		if !s.offerRuntime(name, rt) {
			return false
		}
		s.log.InfoContext(ctx, "runtime found after start: offered now", "runtime", name)
		return true
	})
	s.kick()
}

// offerRuntime publishes a runtime found after start, unless it already
// is (two discoveries can race).
func (s *Service) offerRuntime(name string, rt ports.Runtime) bool {
	s.rtMu.Lock()
	defer s.rtMu.Unlock()
	if _, dup := s.cfg.Runtimes[name]; dup {
		return false
	}
	rts := maps.Clone(s.cfg.Runtimes)
	if rts == nil {
		rts = map[string]ports.Runtime{}
	}
	rts[name] = rt
	s.cfg.Runtimes = rts
	return true
}

// unknownRuntime is the error of a request naming a runtime the service
// lacks, with why it is not offered and how to get it.
func (s *Service) unknownRuntime(name string) error {
	err := fmt.Errorf("%w: %q (configured: %v)", ErrUnknownRuntime, name, s.names())
	if s.cfg.Unavailable != nil {
		if why := s.cfg.Unavailable(name); why != "" {
			err = fmt.Errorf("%w; %s", err, why)
		}
	}
	return err
}

// Recover takes over the environments earlier runs of the server made,
// and the pools: their members, and the environments taken from them.
func (s *Service) Recover(ctx context.Context) {
	s.loadActivity(ctx)
	claims := s.recoverPools(ctx)
	rts := s.runtimes()
	for _, name := range slices.Sorted(maps.Keys(rts)) {
		s.recoverRuntime(ctx, name, rts[name], claims, nil)
	}
	s.startPools()
	s.wg.Add(2)
	go s.keepIdle()
	go s.keepActivity()
	if s.cfg.Discover != nil {
		s.wg.Add(1)
		go s.watchRuntimes()
	}
	if s.cfg.AgentDown != nil {
		s.wg.Add(1)
		go s.watchAgents()
	}
}

// recoverRuntime takes over the environments earlier runs of the server
// made on one runtime; claims are the pools' (member → taken name). offer,
// for a runtime found after start, publishes it in the same hold of the
// lock that adds its environments, so nobody sees the runtime without
// them (a create could otherwise take a name one of them has); false from
// it means another discovery took the runtime on.
func (s *Service) recoverRuntime(ctx context.Context, name string, rt ports.Runtime, claims map[string]string, offer func() bool) {
	envs, err := rt.Recover(ctx)
	if err != nil {
		s.log.ErrorContext(ctx, "could not recover environments", "runtime", name, "err", err)
	}
	now := s.cfg.Clock.Now()
	var restore []*record
	s.mu.Lock()
	if offer != nil && !offer() {
		s.mu.Unlock()
		return
	}
	for _, e := range envs {
		if _, dup := s.envs[e.Name]; dup {
			continue
		}
		env := fromRuntime(e, name)
		env.Events = []Event{{At: now, Step: "recovered", Message: "found after a restart of agentic-mgmt"}}
		rec := &record{env: env, recovered: env.State == StateBooting}
		if pool := e.Labels[ports.LabelPool]; pool != "" {
			if claim, ok := claims[e.Name]; ok {
				// Taken before the restart: the caller's environment.
				rec.runtimeName, rec.env.Name, rec.env.AgentID = e.Name, claim, claim
				if p, ok := s.pools[pool]; ok {
					rec.env.Idle = takenPolicy(p.def, rt.Capabilities())
				}
			} else if _, kept := s.pools[pool]; kept {
				rec.pool = pool
			} else {
				// Its pool was deleted meanwhile.
				s.wg.Add(1)
				go func(member, runtime string) {
					defer s.wg.Done()
					s.dropRuntimeEnv(runtime, member, member)
				}(e.Name, name)
				continue
			}
		}
		if _, dup := s.envs[rec.env.Name]; dup {
			continue
		}
		if v := e.Labels[ports.LabelInjected]; v != "" && rec.pool == "" {
			if secrets, placeholders, err := decodeInjected(v); err != nil {
				s.log.WarnContext(ctx, "environment's injected secrets unreadable; its requests through them are refused", "name", rec.env.Name, "err", err)
			} else {
				rec.secrets, rec.placeholders = secrets, placeholders
				rec.env.Secrets = secrets
				restore = append(restore, rec)
			}
		}
		s.envs[rec.env.Name] = rec
		if act, ok := s.storedActs[rec.env.Name]; ok && rec.pool == "" {
			rec.idleFrom = act.At
			a := &activity{}
			a.restore(act)
			s.acts.Store(rec.env.Name, a)
			recoverSleep(&rec.env, act.Sleep)
		}
		delete(s.storedActs, rec.env.Name)
		// A running one is ready again when its agent reconnects, as
		// after a start; nobody has to look at it first.
		if env.State == StateBooting {
			var wait context.Context
			wait, rec.cancel = context.WithCancel(s.life)
			s.wg.Add(1)
			go s.awaitAgent(wait, rec.env.Name, name)
		}
	}
	s.mu.Unlock()
	for _, rec := range restore {
		s.restoreInjected(ctx, rec.env.Name, rec.secrets, rec.placeholders)
	}
	s.changed()
	s.log.InfoContext(ctx, "environments recovered", "runtime", name, "count", len(envs))
}

func fromRuntime(e ports.Environment, runtime string) Environment {
	env := Environment{Name: e.Name, Runtime: runtime, RuntimeID: e.RuntimeID, Image: e.Image, Network: e.Network,
		Resources: e.Resources, AgentID: e.Name, CreatedAt: e.CreatedAt, State: FromRuntime(e.State)}
	if e.Network == ports.NetworkProxy && e.Labels[ports.LabelAllowedHosts] != "" {
		env.AllowedHosts = strings.Split(e.Labels[ports.LabelAllowedHosts], ",")
	}
	env.Tier = e.Labels[ports.LabelTier]
	env.Labels = userLabels(e.Labels)
	if v := e.Labels[ports.LabelPlacement]; v != "" {
		// Only this server writes it; one it cannot read is not shown.
		_ = json.Unmarshal([]byte(v), &env.Placement)
	}
	if e.State == ports.EnvFailed {
		env.Error = e.Detail
	}
	env.Idle = policyOf(e.Labels)
	env.HibernatedAt, env.SavedBytes = e.HibernatedAt, e.SavedBytes
	return env
}

// specLabels are the labels that keep a request's allowed hosts, tier and
// placement with its environment.
func specLabels(network ports.NetworkMode, allowed []string, tier string, placement ports.Placement) map[string]string {
	labels := map[string]string{}
	if network == ports.NetworkProxy {
		labels[ports.LabelAllowedHosts] = strings.Join(allowed, ",")
	}
	if tier != "" {
		labels[ports.LabelTier] = tier
	}
	if !placement.Empty() {
		if b, err := json.Marshal(placement); err == nil {
			labels[ports.LabelPlacement] = string(b)
		}
	}
	return labels
}

// clonePlacement is p with maps and slices of its own (nil when empty), so
// that neither the caller nor a reader of the environment shares them.
func clonePlacement(p ports.Placement) ports.Placement {
	if p.Empty() {
		return ports.Placement{}
	}
	var out ports.Placement
	if len(p.NodeSelector) > 0 {
		out.NodeSelector = maps.Clone(p.NodeSelector)
	}
	if len(p.Tolerations) > 0 {
		out.Tolerations = slices.Clone(p.Tolerations)
	}
	return out
}

// Create starts provisioning and returns at once; progress shows in Get.
// A request whose runtime and spec match a pool with an idle member takes
// that member instead, and returns it ready under the requested name.
func (s *Service) Create(ctx context.Context, req Request) (Environment, error) {
	return s.create(ctx, req, "")
}

// create provisions an environment; for a pool's member when pool is set.
func (s *Service) create(ctx context.Context, req Request, pool string) (Environment, error) {
	rt, ok := s.runtime(req.Runtime)
	if !ok {
		// An engine started since the last look is taken on at once.
		s.discover(ctx)
		if rt, ok = s.runtime(req.Runtime); !ok {
			return Environment{}, s.unknownRuntime(req.Runtime)
		}
	}
	if req.Name == "" {
		return Environment{}, fmt.Errorf("%w: a name is required (it is also the agent's id)", ports.ErrInvalidSpec)
	}
	if err := s.networkAllowed(req, rt); err != nil {
		return Environment{}, err
	}
	if err := CheckLabels(req.Labels); err != nil {
		return Environment{}, err
	}
	if err := CheckIdlePolicy(req.Idle, rt.Capabilities()); err != nil {
		return Environment{}, err
	}
	secrets, err := CheckSecrets(req.Secrets)
	if err != nil {
		return Environment{}, err
	}
	if err := s.checkInjected(secrets); err != nil {
		return Environment{}, err
	}
	if _, taken := s.cfg.Agents.Agent(req.Name); taken {
		return Environment{}, fmt.Errorf("%w: an agent named %q is connected", ports.ErrEnvExists, req.Name)
	}
	agentSecret, err := secret.New()
	if err != nil {
		return Environment{}, err
	}
	bootstrap := s.cfg.Bootstrap
	bootstrap.ID, bootstrap.Secret = req.Name, agentSecret
	allowed, err := s.allowedHosts(req)
	if err != nil {
		return Environment{}, err
	}
	placement := clonePlacement(req.Placement)
	spec := ports.EnvironmentSpec{
		Name: req.Name, Image: req.Image, Profile: req.Profile, Resources: req.Resources, Network: req.Network,
		ReadOnlyRoot: req.ReadOnlyRoot, Tier: req.Tier, Placement: placement, Agent: bootstrap,
		Progress: func(step string) { s.event(req.Name, step, "") },
	}
	// What only the request says is kept with the environment itself
	// (labels), for a restarted server.
	// The request's own labels too, under the internal ones.
	labels := specLabels(req.Network, allowed, req.Tier, placement)
	policyLabels(req.Idle, labels)
	if len(labels) > 0 || len(req.Labels) > 0 {
		spec.Labels = maps.Clone(req.Labels)
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		maps.Copy(spec.Labels, labels)
	}
	// The runtime's declared capabilities decide, before anything is stored.
	if err := rt.Capabilities().CheckSpec(spec); err != nil {
		return Environment{}, err
	}
	if pool != "" {
		spec.Labels = maps.Clone(spec.Labels)
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		spec.Labels[ports.LabelPool] = pool
	} else if len(req.Labels) > 0 || len(secrets) > 0 || req.Idle != (ports.IdlePolicy{}) {
		// A pool's member carries no labels, and a taken member's runtime
		// would not keep them (nor an idle policy of its own) across a
		// restart: provisioned instead.
	} else if env, taken, err := s.take(ctx, req, allowed, rt.Capabilities().Isolation); taken || err != nil {
		return env, err
	}
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	if _, dup := s.envs[req.Name]; dup {
		s.mu.Unlock()
		return Environment{}, fmt.Errorf("%w: %q", ports.ErrEnvExists, req.Name)
	}
	// Provisioning outlives the request that asked for it, not the service.
	pctx, cancel := context.WithCancel(s.life)
	rec := &record{cancel: cancel, requested: now, pool: pool, env: Environment{
		Name: req.Name, Runtime: req.Runtime, State: StateProvisioning, Image: req.Image, Network: req.Network,
		Resources: req.Resources, Tier: req.Tier, Placement: placement, AgentID: req.Name, CreatedAt: now, AllowedHosts: allowed,
		Labels: maps.Clone(req.Labels), Events: []Event{{At: now, Step: "requested"}}, Secrets: secrets, Idle: req.Idle,
	}}
	s.envs[req.Name] = rec
	s.mu.Unlock()
	if req.Idle != (ports.IdlePolicy{}) {
		s.pokeIdleKeeper()
	}
	if len(secrets) > 0 {
		placeholders, err := s.registerInjected(req.Name, secrets)
		if err != nil {
			s.forget(req.Name)
			cancel()
			return Environment{}, err
		}
		s.mu.Lock()
		rec.secrets, rec.placeholders = secrets, placeholders
		s.mu.Unlock()
		// Kept with the environment for a restarted server (never a value).
		spec.Labels = maps.Clone(spec.Labels)
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		spec.Labels[ports.LabelInjected] = encodeInjected(secrets, placeholders)
	}
	s.changed()
	s.forgetPublicPorts(req.Name)

	// Create, not Put: an agent that already has a credential under this
	// name (provisioned by hand, or a host agent) keeps it.
	if err := s.cfg.Credentials.Create(req.Name, agentSecret); err != nil {
		s.forget(req.Name)
		s.forgetInjected(req.Name)
		cancel()
		if errors.Is(err, ports.ErrCredentialExists) {
			return Environment{}, fmt.Errorf("%w: an agent named %q already has a credential", ports.ErrEnvExists, req.Name)
		}
		return Environment{}, fmt.Errorf("storing the agent's secret: %w", err)
	}
	// The agent's tier is the runtime's, whatever it may later declare.
	if _, err := s.cfg.Credentials.PinKind(req.Name, rt.Capabilities().Isolation); err != nil {
		_ = s.cfg.Credentials.Delete(req.Name)
		s.forget(req.Name)
		s.forgetInjected(req.Name)
		cancel()
		return Environment{}, fmt.Errorf("recording the agent's runtime kind: %w", err)
	}
	connected, provisioned := make(chan struct{}), make(chan struct{})
	spec.AgentConnected = connected
	go s.tellConnected(req.Name, connected, provisioned)
	// Validation errors come back to the caller; the rest shows as progress.
	env, err := rt.Provision(pctx, spec)
	close(provisioned)
	if err != nil {
		cancel()
		_ = s.cfg.Credentials.Delete(req.Name)
		if errors.Is(err, ports.ErrInvalidSpec) || errors.Is(err, ports.ErrEnvExists) {
			s.forget(req.Name)
			s.forgetInjected(req.Name)
			return Environment{}, err
		}
		s.fail(req.Name, err.Error())
		s.log.ErrorContext(ctx, "environment failed to provision", "name", req.Name, "runtime", req.Runtime, "err", err)
		got, _ := s.get(req.Name)
		return got.Environment, nil
	}
	s.mu.Lock()
	deleted := s.envs[req.Name] != rec || rec.env.State == StateDeleting
	last := rec.env
	last.Events = append([]Event(nil), rec.env.Events...)
	s.mu.Unlock()
	if deleted {
		// Deleted while the runtime was making it (a pool dropped its member
		// mid-refill): Delete found nothing to destroy then, so this does.
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(s.life), 2*time.Minute)
		defer dcancel()
		if err := rt.Destroy(dctx, req.Name); err != nil && !errors.Is(err, ports.ErrEnvNotFound) {
			s.log.ErrorContext(ctx, "an environment deleted while provisioning could not be destroyed", "name", req.Name, "err", err)
		}
		last.State = StateDeleting
		return last, nil
	}
	s.update(req.Name, func(e *Environment) {
		e.RuntimeID, e.State = env.RuntimeID, StateBooting
		if e.Image == "" {
			e.Image = env.Image
		}
		if e.Network == "" {
			e.Network = env.Network
		}
		e.Events = appendEvent(e.Events, Event{At: s.cfg.Clock.Now(), Step: "running", Message: "waiting for the agent to register"})
	})
	s.wg.Add(1)
	go s.awaitAgent(pctx, req.Name, req.Runtime)
	got, _ := s.get(req.Name)
	return got.Environment, nil
}

// tellConnected closes connected once name's agent is connected, unless
// Provision returned (provisioned closed) first. Polled finely: a runtime may
// be waiting on it to return.
func (s *Service) tellConnected(name string, connected, provisioned chan struct{}) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.connected(name) {
			close(connected)
			return
		}
		select {
		case <-provisioned:
			return
		case <-tick.C:
		}
	}
}

// awaitAgent marks the environment ready once its agent is connected.
func (s *Service) awaitAgent(ctx context.Context, name, runtime string) {
	defer s.wg.Done()
	deadline := time.NewTimer(s.cfg.ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.connected(name) {
			s.markReady(name, false)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			s.fail(name, fmt.Sprintf("the agent did not register within %s", s.cfg.ReadyTimeout))
			s.log.ErrorContext(ctx, "environment failed: no agent", "name", name, "runtime", runtime)
			return
		case <-tick.C:
		}
	}
}

func (s *Service) connected(name string) bool {
	a, ok := s.cfg.Agents.Agent(name)
	return ok && a.Status.Working()
}

// markReady records that the environment's agent is connected; the first
// time after a request, with its provision time.
func (s *Service) markReady(name string, observed bool) {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	rec, ok := s.envs[name]
	// An agent that connects makes an environment that is coming up ready;
	// one an operator paused or stopped meanwhile stays so (a late wake of
	// the agent's wait undid a pause once: TestPauseAndResumeFollowTheCapability).
	// What the runtime itself reports (observed) decides either way.
	held := rec != nil && !observed && (rec.env.State == StatePaused || rec.env.State == StateStopped || asleep(rec.env.State))
	// A hibernation or wake in flight owns the state whatever was observed:
	// an Inspect that saw the agent connected just before a hibernation
	// began once made it ready mid-hibernation, and the next Inspect then
	// showed it hibernated without its reason (TestIdlePolicyInDocker).
	inFlight := rec != nil && (rec.env.State == StateHibernating || rec.env.State == StateWaking)
	if !ok || held || inFlight || rec.env.State == StateReady || rec.env.State == StateDeleting {
		s.mu.Unlock()
		return
	}
	e := &rec.env
	e.State, e.Error, e.ReadyAt = StateReady, "", now
	if !rec.recovered || rec.idleFrom.IsZero() {
		rec.idleFrom = now
	}
	rec.recovered = false
	var observe time.Duration
	msg := ""
	if !rec.requested.IsZero() && !rec.observed {
		rec.observed = true
		observe = now.Sub(rec.requested)
		e.ProvisionTime = observe
		msg = fmt.Sprintf("after %s", observe.Round(time.Millisecond))
	}
	e.Events = appendEvent(e.Events, Event{At: now, Step: "agent_ready", Message: msg})
	runtime := e.Runtime
	s.mu.Unlock()
	s.changed()
	if observe > 0 {
		if s.cfg.ObserveProvision != nil {
			s.cfg.ObserveProvision(runtime, observe)
		}
		s.log.Info("environment ready", "name", name, "runtime", runtime, "provision_time", observe)
	}
}

// List returns every environment, by name, with fresh states.
func (s *Service) List(ctx context.Context) []Environment {
	names := s.Names()
	out := make([]Environment, 0, len(names))
	for _, n := range names {
		if e, ok := s.Inspect(ctx, n); ok {
			out = append(out, e)
		}
	}
	return out
}

// Names lists the environments' names (not a pool's untaken members),
// sorted, without asking any runtime.
func (s *Service) Names() []string {
	s.mu.Lock()
	names := make([]string, 0, len(s.envs))
	for n, rec := range s.envs {
		if rec.pool == "" {
			names = append(names, n)
		}
	}
	s.mu.Unlock()
	sort.Strings(names)
	return names
}

// Get returns an environment as last known, without asking its runtime;
// a pool's untaken members are nobody's yet, and not shown.
func (s *Service) Get(name string) (Environment, bool) {
	e, ok := s.get(name)
	if !ok || e.pool != "" {
		return Environment{}, false
	}
	return e.Environment, true
}

// found is an environment as get finds it: with its pool, if a member.
type found struct {
	Environment
	pool, runtimeName string
}

func (s *Service) get(name string) (found, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.envs[name]
	if !ok {
		return found{}, false
	}
	e := rec.env
	e.Events = append([]Event(nil), e.Events...)
	e.Egress = append([]EgressEntry(nil), e.Egress...)
	e.Labels = maps.Clone(e.Labels)
	if a, ok := s.cfg.Agents.Agent(name); ok {
		e.AgentStatus = a.Status
	}
	if v, ok := s.acts.Load(name); ok {
		e.LastActivity, e.LastActivityKind = v.(*activity).lastUse()
	}
	if rt := s.runtimes()[e.Runtime]; rt != nil {
		e.Hibernate = rt.Capabilities().Hibernate.Of()
	}
	return found{Environment: e, pool: rec.pool, runtimeName: rec.rtName()}, true
}

// Inspect refreshes an environment's state from its runtime and agent.
func (s *Service) Inspect(ctx context.Context, name string) (Environment, bool) {
	f, ok := s.get(name)
	if !ok || f.pool != "" {
		return Environment{}, false
	}
	e := f.Environment
	rt := s.runtimes()[e.Runtime]
	if rt == nil || e.State == StateProvisioning || e.State == StateDeleting {
		return e, true
	}
	re, err := rt.Inspect(ctx, f.runtimeName)
	if err != nil && !errors.Is(err, ports.ErrEnvNotFound) {
		return e, true // unknown now; keep the last state
	}
	obs := Observation{Gone: err != nil, Runtime: re.State, AgentConnected: s.connected(name)}
	if Next(e.State, obs) == StateReady {
		s.markReady(name, true)
	} else {
		now := s.cfg.Clock.Now()
		s.update(name, func(x *Environment) { observe(x, obs, re.Detail, now) })
	}
	e, _ = s.Get(name)
	return e, true
}

// observe moves e to the state obs makes it (Next), saying why (detail,
// the runtime's) when it failed or stopped.
func observe(e *Environment, obs Observation, detail string, now time.Time) {
	next := Next(e.State, obs)
	if next == e.State {
		return
	}
	msg := observedWhy(obs, detail)
	e.State = next
	if msg != "" && (next == StateFailed || next == StateStopped) {
		e.Error = msg
	}
	e.Events = appendEvent(e.Events, Event{At: now, Step: string(next), Message: msg})
}

// observedWhy is what an observation says of an environment's end.
func observedWhy(obs Observation, detail string) string {
	if obs.Gone {
		return "removed outside agentic-sandbox"
	}
	return detail
}

// Start starts a stopped environment.
func (s *Service) Start(ctx context.Context, name string) (Environment, error) {
	e, rt, err := s.lookup(name, false)
	if err != nil {
		return Environment{}, err
	}
	if asleep(e.State) {
		return s.Wake(ctx, name)
	}
	if err := rt.Start(ctx, e.runtimeName); err != nil {
		return Environment{}, err
	}
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	rec, ok := s.envs[name]
	if !ok { // deleted meanwhile
		s.mu.Unlock()
		return Environment{}, fmt.Errorf("%w: %q", ports.ErrEnvNotFound, name)
	}
	if rec.cancel != nil {
		rec.cancel() // an earlier wait for this environment's agent
	}
	var wait context.Context
	wait, rec.cancel = context.WithCancel(s.life)
	rec.env.State, rec.env.Error = StateBooting, ""
	rec.env.Events = appendEvent(rec.env.Events, Event{At: now, Step: "started"})
	s.mu.Unlock()
	s.changed()
	s.wg.Add(1)
	go s.awaitAgent(wait, name, e.Runtime)
	got, _ := s.Get(name)
	return got, nil
}

// Pause freezes an environment's processes, on runtimes that declare it.
func (s *Service) Pause(ctx context.Context, name string) (Environment, error) {
	return s.act(name, "paused", func(rt ports.Runtime, runtimeName string) error {
		if err := canPause(rt); err != nil {
			return err
		}
		return rt.Pause(ctx, runtimeName)
	}, func() State { return StatePaused })
}

// Resume lets a paused environment run again.
func (s *Service) Resume(ctx context.Context, name string) (Environment, error) {
	return s.act(name, "resumed", func(rt ports.Runtime, runtimeName string) error {
		if err := canPause(rt); err != nil {
			return err
		}
		return rt.Resume(ctx, runtimeName)
	}, func() State {
		// A paused agent missed its heartbeats; it is ready again once it
		// is seen connected.
		return Next(StateBooting, Observation{Runtime: ports.EnvRunning, AgentConnected: s.connected(name)})
	})
}

// Stop stops an environment, keeping it.
func (s *Service) Stop(ctx context.Context, name string) (Environment, error) {
	return s.act(name, "stopped", func(rt ports.Runtime, runtimeName string) error {
		return rt.Stop(ctx, runtimeName)
	}, func() State { return StateStopped })
}

// act makes one call to an environment's runtime and, once it succeeded,
// records the step in the environment's events and moves it to the state
// next says.
func (s *Service) act(name, step string, call func(rt ports.Runtime, runtimeName string) error, next func() State) (Environment, error) {
	e, rt, err := s.lookup(name, false)
	if err != nil {
		return Environment{}, err
	}
	if err := call(rt, e.runtimeName); err != nil {
		return Environment{}, err
	}
	now := s.cfg.Clock.Now()
	state := next()
	s.mu.Lock()
	if rec, ok := s.envs[name]; ok {
		rec.recovered = false
	}
	s.mu.Unlock()
	s.update(name, func(x *Environment) {
		x.State = state
		x.Events = appendEvent(x.Events, Event{At: now, Step: step})
	})
	got, _ := s.Get(name)
	return got, nil
}

// canPause is nil for a runtime that declares pause and resume.
func canPause(rt ports.Runtime) error {
	if !rt.Capabilities().Pause {
		return fmt.Errorf("%w: the %s runtime cannot pause", ports.ErrUnsupported, rt.Capabilities().Runtime)
	}
	return nil
}

// Delete retires the environment's agent (credential, work, registry entry)
// and destroys the environment.
func (s *Service) Delete(ctx context.Context, name string) error {
	return s.delete(ctx, name, false)
}

// delete destroys an environment, a pool's member only when member is set.
func (s *Service) delete(ctx context.Context, name string, member bool) error {
	e, rt, err := s.lookup(name, member)
	if err != nil {
		return err
	}
	s.mu.Lock()
	rec := s.envs[name]
	// Another Delete may have finished, or be under way, since lookup.
	if rec == nil || rec.env.State == StateDeleting {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q (being deleted)", ports.ErrEnvNotFound, name)
	}
	if rec.cancel != nil {
		rec.cancel()
	}
	rec.env.State = StateDeleting
	s.mu.Unlock()
	s.changed()
	// Before the runtime kills anything: the credential goes, so the agent
	// cannot come back, and what ran there ends saying why (killed first,
	// a mission would fail as a mere non-zero exit). From here the
	// environment is gone for its work even if Destroy fails.
	if err := s.cfg.Credentials.Delete(name); err != nil {
		s.log.ErrorContext(ctx, "the deleted environment's agent credential could not be removed", "name", name, "err", err)
	}
	if s.cfg.Retire != nil {
		s.cfg.Retire.RetireAgent(ctx, name, ports.ReasonEnvironmentDeleted)
	}
	// Its placeholders fail from now on, even if Destroy does.
	s.forgetInjected(name)
	if err := rt.Destroy(ctx, e.runtimeName); err != nil && !errors.Is(err, ports.ErrEnvNotFound) {
		s.update(name, func(x *Environment) {
			x.State, x.Error = StateFailed, "delete: "+err.Error()
		})
		return err
	}
	if e.runtimeName != name && s.cfg.Pools != nil {
		if err := s.cfg.Pools.DeleteClaim(ctx, e.runtimeName); err != nil {
			s.log.ErrorContext(ctx, "a deleted environment's pool claim could not be removed", "name", name, "member", e.runtimeName, "err", err)
		}
	}
	s.forget(name)
	s.log.InfoContext(ctx, "environment deleted", "name", name)
	return nil
}

// Close ends the background waits and provisioning, and waits for them.
func (s *Service) Close() {
	s.end()
	s.wg.Wait()
	s.saveActivity()
}

// lookup finds an environment and its runtime; a pool's untaken member
// only when member is set (and then nothing else).
func (s *Service) lookup(name string, member bool) (found, ports.Runtime, error) {
	e, ok := s.get(name)
	if !ok || (e.pool != "") != member {
		return found{}, nil, fmt.Errorf("%w: %q", ports.ErrEnvNotFound, name)
	}
	rt := s.runtimes()[e.Runtime]
	if rt == nil {
		return found{}, nil, fmt.Errorf("%w: %s is not configured now", ports.ErrRuntimeUnavailable, e.Runtime)
	}
	return e, rt, nil
}

func (s *Service) names() []string {
	rts := s.runtimes()
	out := make([]string, 0, len(rts))
	for n := range rts {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (s *Service) event(name, step, msg string) {
	now := s.cfg.Clock.Now()
	s.update(name, func(e *Environment) {
		e.Events = appendEvent(e.Events, Event{At: now, Step: step, Message: msg})
	})
}

// fail marks an environment failed, saying why in its error and events.
func (s *Service) fail(name, why string) {
	now := s.cfg.Clock.Now()
	s.update(name, func(e *Environment) {
		e.State, e.Error = StateFailed, why
		e.Events = appendEvent(e.Events, Event{At: now, Step: "failed", Message: why})
	})
}

func (s *Service) update(name string, f func(*Environment)) {
	s.mu.Lock()
	rec, ok := s.envs[name]
	if ok {
		f(&rec.env)
	}
	s.mu.Unlock()
	if ok {
		s.changed()
	}
}

func (s *Service) forget(name string) {
	s.mu.Lock()
	delete(s.envs, name)
	s.mu.Unlock()
	if _, ok := s.acts.LoadAndDelete(name); ok {
		s.forgetActivity(name)
	}
	s.changed()
	s.forgetPublicPorts(name)
}

// forgetPublicPorts drops name's public marks: a port made public for one
// environment is never public for another that takes its name later.
func (s *Service) forgetPublicPorts(name string) {
	if s.cfg.PublicPorts == nil {
		return
	}
	if err := s.cfg.PublicPorts.ForgetEnvironment(name); err != nil {
		s.log.Error("public preview marks not forgotten", "environment", name, "err", err)
	}
}

// changed tells watchers; after the lock, once the change is readable.
func (s *Service) changed() { s.cfg.Changes.Changed(ports.ChangeEnvironments) }

func appendEvent(evs []Event, e Event) []Event {
	evs = append(evs, e)
	if len(evs) > maxEvents {
		evs = append(evs[:1], evs[len(evs)-maxEvents+1:]...) // keep the first ("requested")
	}
	return evs
}

// networkAllowed holds a container's or a VM's network mode to the server's
// AllowedNetworks (host environments share the host's). A request naming
// none gets the runtime's default, which is held to them too: a runtime
// whose default is open (a Kubernetes pod network no policy closes) is not
// used open unless the operator allowed it.
func (s *Service) networkAllowed(req Request, rt ports.Runtime) error {
	c := rt.Capabilities()
	mode, named := req.Network, true
	if mode == "" && len(c.NetworkModes) > 0 {
		mode, named = c.NetworkModes[0], false
	}
	if mode == "" || s.networkOffered(c.Isolation, mode) {
		return nil
	}
	if !named {
		return fmt.Errorf("%w: network %q, the %s runtime's default, is not allowed on this server (allowed: %s; the runtime offers %s): name one both allow, or allow it with AGENTIC_ALLOWED_NETWORKS",
			ports.ErrInvalidSpec, mode, c.Runtime, ports.NetworkModeList(s.cfg.AllowedNetworks), ports.NetworkModeList(c.NetworkModes))
	}
	return fmt.Errorf("%w: network %q is not allowed on this server (allowed: %s)", ports.ErrInvalidSpec, mode, ports.NetworkModeList(s.cfg.AllowedNetworks))
}

// networkOffered reports whether this server lets a request name mode for
// a runtime of that isolation.
func (s *Service) networkOffered(isolation ports.RuntimeKind, mode ports.NetworkMode) bool {
	return s.cfg.AllowedNetworks == nil || isolation == ports.KindHost || slices.Contains(s.cfg.AllowedNetworks, mode)
}

// OfferedNetworks are the network modes a create request may name for a
// runtime of these capabilities on this server: those of its modes that
// AllowedNetworks allows (every one for host isolation, which shares the
// host's network), in the runtime's order.
func (s *Service) OfferedNetworks(c ports.RuntimeCapabilities) []ports.NetworkMode {
	out := []ports.NetworkMode{}
	for _, m := range c.NetworkModes {
		if s.networkOffered(c.Isolation, m) {
			out = append(out, m)
		}
	}
	return out
}

// allowedHosts checks a request's allowed hosts: only with network proxy,
// each a valid rule, all within the server-wide list; returned normalised.
func (s *Service) allowedHosts(req Request) ([]string, error) {
	if req.Network != ports.NetworkProxy {
		if len(req.AllowedHosts) > 0 {
			return nil, fmt.Errorf("%w: allowed_hosts needs network proxy", ports.ErrInvalidSpec)
		}
		return nil, nil
	}
	if len(req.AllowedHosts) == 0 {
		return nil, fmt.Errorf("%w: network proxy needs allowed_hosts (nothing would be reachable)", ports.ErrInvalidSpec)
	}
	if len(req.AllowedHosts) > 256 {
		return nil, fmt.Errorf("%w: at most 256 allowed hosts", ports.ErrInvalidSpec)
	}
	rules, err := egress.ParseRules(req.AllowedHosts)
	if err != nil {
		return nil, fmt.Errorf("%w: allowed_hosts: %v", ports.ErrInvalidSpec, err)
	}
	if s.cfg.EgressBound != nil {
		if r, ok := egress.Within(rules, s.cfg.EgressBound); !ok {
			return nil, fmt.Errorf("%w: allowed host %s is outside this server's allowlist (AGENTIC_EGRESS_ALLOWED_HOSTS)", ports.ErrInvalidSpec, r)
		}
	}
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.String()
	}
	return out, nil
}

// EgressRules implements agentrpc.EgressPolicy: a proxy environment's
// allowed hosts, by its agent's id (which is its name).
func (s *Service) EgressRules(agentID string) ([]egress.Rule, bool) {
	s.mu.Lock()
	rec, ok := s.envs[agentID]
	var hosts []string
	if ok {
		ok = rec.env.Network == ports.NetworkProxy && rec.env.State != StateDeleting
		hosts = rec.env.AllowedHosts
	}
	s.mu.Unlock()
	if !ok {
		return nil, false
	}
	rules, err := egress.ParseRules(hosts)
	if err != nil {
		s.log.Error("a proxy environment's allowed hosts do not parse: it reaches nothing", "name", agentID, "err", err)
		return nil, true
	}
	return rules, true
}

// RecordEgress keeps one connection of an environment's agent (the last
// maxEgress of them).
func (s *Service) RecordEgress(agentID string, e EgressEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.envs[agentID]
	if !ok {
		return
	}
	list := append(rec.env.Egress, e)
	if len(list) > maxEgress {
		list = append([]EgressEntry(nil), list[len(list)-maxEgress:]...)
	}
	rec.env.Egress = list
	s.changed() // never blocks: safe under s.mu
}
