// Warm pools: environments provisioned ahead, their agents connected and
// idle, so that a create whose runtime and spec match takes one at once.
//
// A member is provisioned like any environment, under a name of its own
// (<pool>-<random>) and labelled with its pool, and hidden from Get and
// List. A take moves it under the caller's name: a fresh credential for
// that name, a claim (member → name) stored so that a restart finds it,
// the member's agent renamed over its link (it registers again at once as
// the caller's name), and only then the member's own credential revoked.
// The environment keeps its member's name on its runtime; agent id =
// environment name holds for everything the API and the agent say.

package environment

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/secret"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Pool limits.
const (
	MaxPoolSize = 64
	// maxPoolName leaves room for a member's "-" and 8 hex digits in an
	// environment name (63).
	maxPoolName = 54
	// memberGrace is how long a ready member may be seen without its agent
	// before it is replaced (a reconnect takes less).
	memberGrace = 5 * time.Second
	// takeTimeout bounds a taken member's agent registering again.
	takeTimeout = 10 * time.Second
	// refillPause is how long a pool waits after a take before it
	// provisions the replacement.
	refillPause = time.Second
	// ReasonPoolMemberTaken ends the member's identity once taken.
	ReasonPoolMemberTaken = "pool_member_taken"
)

// ErrPoolNotFound is a pool nobody defined.
var ErrPoolNotFound = errors.New("pool not found")

type pool struct {
	def          ports.Pool
	hits, misses uint64
	// failures in a row of its members to come up, and when to try again:
	// a pool whose image is gone must not provision in a tight loop.
	failures int
	retryAt  time.Time
}

// PoolStatus is a pool as the API shows it.
type PoolStatus struct {
	ports.Pool
	// Idle members are ready to be taken; Warming ones are coming up.
	Idle, Warming int
	Hits, Misses  uint64
	Members       []PoolMember
}

// PoolMember is one untaken member.
type PoolMember struct {
	Name  string
	State State
}

// CheckPool validates a pool definition against the configured runtimes
// and the rules every environment request is held to.
func (s *Service) CheckPool(p ports.Pool) error {
	if !ports.ValidEnvironmentName(p.Name) || len(p.Name) > maxPoolName {
		return fmt.Errorf("%w: pool name %q: 1-%d letters, digits, '.', '_' or '-'", ports.ErrInvalidSpec, p.Name, maxPoolName)
	}
	if p.Size < 0 || p.Size > MaxPoolSize {
		return fmt.Errorf("%w: size %d: 0 to %d", ports.ErrInvalidSpec, p.Size, MaxPoolSize)
	}
	rt, ok := s.runtime(p.Runtime)
	if !ok {
		return s.unknownRuntime(p.Runtime)
	}
	req := poolRequest(p, p.Name+"-00000000")
	if err := s.networkAllowed(req, rt); err != nil {
		return err
	}
	if _, err := s.allowedHosts(req); err != nil {
		return err
	}
	if err := CheckIdlePolicy(p.Idle, rt.Capabilities()); err != nil {
		return err
	}
	// Checked as a member's spec will be; its secret is made at provision.
	return rt.Capabilities().CheckSpec(ports.EnvironmentSpec{Name: req.Name, Image: req.Image, Profile: req.Profile,
		Resources: req.Resources, Network: req.Network, ReadOnlyRoot: req.ReadOnlyRoot, Tier: req.Tier, Placement: req.Placement,
		Agent: ports.AgentBootstrap{Secret: "unused"}})
}

// poolRequest is the environment request a member of p is made with.
func poolRequest(p ports.Pool, name string) Request {
	return Request{Runtime: p.Runtime, Name: name, Image: p.Spec.Image, Profile: p.Spec.Profile, Resources: p.Spec.Resources,
		Network: p.Spec.Network, ReadOnlyRoot: p.Spec.ReadOnlyRoot, AllowedHosts: p.Spec.AllowedHosts,
		Tier: p.Spec.Tier, Placement: p.Spec.Placement}
}

// PutPool defines (or redefines) a pool; its members follow in the
// background. Members of an earlier spec are replaced.
func (s *Service) PutPool(ctx context.Context, p ports.Pool) (PoolStatus, error) {
	if s.cfg.Pools == nil {
		return PoolStatus{}, fmt.Errorf("%w: pools are not kept on this server", ports.ErrUnsupported)
	}
	if err := s.CheckPool(p); err != nil {
		return PoolStatus{}, err
	}
	if err := s.cfg.Pools.PutPool(ctx, p); err != nil {
		return PoolStatus{}, err
	}
	s.mu.Lock()
	cur := s.pools[p.Name]
	if cur == nil {
		cur = &pool{}
		s.pools[p.Name] = cur
	}
	respec := cur.def.Runtime != "" && !sameSpec(cur.def, p)
	cur.def = p
	var stale []*record
	if respec {
		for _, rec := range s.envs {
			if rec.pool == p.Name {
				stale = append(stale, rec)
			}
		}
	}
	s.mu.Unlock()
	for _, rec := range stale {
		s.dropMemberAsync(rec)
	}
	s.kick()
	s.changed()
	st, _ := s.Pool(p.Name)
	return st, nil
}

// DeletePool forgets a pool and destroys its untaken members; environments
// taken from it stay their callers'.
func (s *Service) DeletePool(ctx context.Context, name string) error {
	if s.cfg.Pools == nil {
		return fmt.Errorf("%w: %q", ErrPoolNotFound, name)
	}
	s.mu.Lock()
	_, ok := s.pools[name]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrPoolNotFound, name)
	}
	if err := s.cfg.Pools.DeletePool(ctx, name); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.pools, name)
	var members []*record
	for _, rec := range s.envs {
		if rec.pool == name {
			members = append(members, rec)
		}
	}
	s.mu.Unlock()
	for _, rec := range members {
		s.dropMemberAsync(rec)
	}
	s.changed()
	return nil
}

// Pools lists the pools by name.
func (s *Service) Pools() []PoolStatus {
	s.mu.Lock()
	names := make([]string, 0, len(s.pools))
	for n := range s.pools {
		names = append(names, n)
	}
	s.mu.Unlock()
	sort.Strings(names)
	out := make([]PoolStatus, 0, len(names))
	for _, n := range names {
		if st, ok := s.Pool(n); ok {
			out = append(out, st)
		}
	}
	return out
}

// Pool returns one pool's status.
func (s *Service) Pool(name string) (PoolStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pools[name]
	if !ok {
		return PoolStatus{}, false
	}
	st := PoolStatus{Pool: p.def, Hits: p.hits, Misses: p.misses, Members: []PoolMember{}}
	for n, rec := range s.envs {
		if rec.pool != name {
			continue
		}
		st.Members = append(st.Members, PoolMember{Name: n, State: rec.env.State})
		switch {
		case s.idle(rec):
			st.Idle++
		case rec.env.State == StateProvisioning || rec.env.State == StateBooting:
			st.Warming++
		}
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].Name < st.Members[j].Name })
	return st, true
}

// PoolMember reports whether agentID is an untaken pool member's agent:
// held for a caller, so no mission is routed to it.
func (s *Service) PoolMember(agentID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.envs[agentID]
	return ok && rec.pool != ""
}

// idle is whether a member can be taken now (s.mu held).
func (s *Service) idle(rec *record) bool {
	return rec.pool != "" && rec.env.State == StateReady && (rec.warmed || s.cfg.Link == nil) && s.connected(rec.env.Name)
}

// warmRuns is how many `echo`s warm a member up: under TCG a guest's
// first runs of a code path are translated, and a clone restored from a
// template runs everything for the first time. Measured on restored VMs:
// the caller's first `echo` after a take went from ~28 to ~20 ms (one
// `true` before) against a floor of ~9.
const warmRuns = 3

// warm warms up a member that came up, then lets it be taken; a failed
// warm-up only costs the caller a slower first command.
func (s *Service) warm(rec *record, name string) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(s.life, 30*time.Second)
	defer cancel()
	var err error
	for i := 0; i < warmRuns && err == nil; i++ {
		var cmd ports.Command
		cmd, err = s.cfg.Link.Start(ctx, name, ports.CommandSpec{Command: "echo", Args: []string{"warm"}}, ports.StartOptions{Housekeeping: true})
		if err == nil {
			select {
			case <-cmd.Done():
				if r := cmd.Result(); r.ExitCode != 0 || r.Error != "" {
					err = fmt.Errorf("exit %d %s", r.ExitCode, r.Error)
				}
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
	}
	if err != nil {
		s.log.Warn("a pool member's warm-up failed; it is offered anyway", "member", name, "err", err)
	}
	s.mu.Lock()
	rec.warming, rec.warmed = false, true
	s.mu.Unlock()
	s.kick()
	s.changed()
}

func sameSpec(a, b ports.Pool) bool {
	return a.Runtime == b.Runtime && a.Spec.Image == b.Spec.Image && a.Spec.Profile == b.Spec.Profile &&
		a.Spec.Resources == b.Spec.Resources && a.Spec.Network == b.Spec.Network &&
		a.Spec.ReadOnlyRoot == b.Spec.ReadOnlyRoot && slices.Equal(a.Spec.AllowedHosts, b.Spec.AllowedHosts) &&
		a.Spec.Tier == b.Spec.Tier && a.Spec.Placement.Equal(b.Spec.Placement)
}

// matchingPool is the pool whose members req would be (s.mu held): same
// runtime and exactly the same spec, allowed hosts as normalised.
func (s *Service) matchingPool(req Request, allowed []string) *pool {
	want := ports.Pool{Runtime: req.Runtime, Spec: ports.PoolSpec{Image: req.Image, Profile: req.Profile,
		Resources: req.Resources, Network: req.Network, ReadOnlyRoot: req.ReadOnlyRoot, AllowedHosts: allowed,
		Tier: req.Tier, Placement: req.Placement}}
	names := make([]string, 0, len(s.pools))
	for n := range s.pools {
		names = append(names, n)
	}
	sort.Strings(names) // the same request always finds the same pool
	for _, n := range names {
		p := s.pools[n]
		def := p.def
		if len(def.Spec.AllowedHosts) > 0 {
			// Compared as normalised, the form allowed is in.
			if hosts, err := s.allowedHosts(poolRequest(def, def.Name)); err == nil {
				def.Spec.AllowedHosts = hosts
			}
		}
		if sameSpec(def, want) {
			return p
		}
	}
	return nil
}

// take gives the caller an idle member of the pool matching req, renamed
// to req.Name and ready; taken is false when no pool matches or none of
// its members is idle (a miss), and the caller provisions.
func (s *Service) take(ctx context.Context, req Request, allowed []string, kind ports.RuntimeKind) (Environment, bool, error) {
	if s.cfg.Pools == nil || s.cfg.Renamer == nil {
		return Environment{}, false, nil
	}
	start := s.cfg.Clock.Now()
	s.mu.Lock()
	p := s.matchingPool(req, allowed)
	if p == nil {
		s.mu.Unlock()
		return Environment{}, false, nil
	}
	if _, dup := s.envs[req.Name]; dup {
		s.mu.Unlock()
		return Environment{}, false, fmt.Errorf("%w: %q", ports.ErrEnvExists, req.Name)
	}
	var rec *record
	for _, r := range s.envs {
		if r.pool == p.def.Name && s.idle(r) {
			rec = r
			break
		}
	}
	if rec == nil {
		p.misses++
		s.mu.Unlock()
		s.kick()
		return Environment{}, false, nil
	}
	// From here the member is the caller's: out of the pool, under the
	// caller's name, coming up until its agent registers as that name.
	member := rec.env.Name
	delete(s.envs, member)
	rec.pool, rec.runtimeName = "", member
	rec.env.Name, rec.env.AgentID, rec.env.State = req.Name, req.Name, StateBooting
	rec.env.Events = appendEvent(rec.env.Events, Event{At: start, Step: "taken",
		Message: fmt.Sprintf("from pool %s (member %s)", p.def.Name, member)})
	rec.unhealthySince = time.Time{}
	if rt := s.runtimes()[rec.env.Runtime]; rt != nil {
		rec.env.Idle = takenPolicy(p.def, rt.Capabilities())
		defer s.pokeIdleKeeper()
	}
	s.envs[req.Name] = rec
	p.hits++
	defer s.forgetPublicPorts(req.Name)
	// The replacement waits a moment: the caller's first commands get the
	// machine, not a refill's boot (a VM under TCG takes a core for
	// seconds; measured in docs/benchmarks.md).
	p.retryAt = later(p.retryAt, start.Add(refillPause))
	s.mu.Unlock()
	time.AfterFunc(refillPause, s.kick)
	s.changed()

	keeper, _ := s.runtimes()[rec.env.Runtime].(ports.IdentityKeeper)
	renamed, err := s.handOver(ctx, member, req.Name, kind, keeper)
	if err != nil {
		s.mu.Lock()
		if s.envs[req.Name] == rec {
			delete(s.envs, req.Name)
		}
		p.hits--
		if !renamed {
			// Nothing changed on the member's side: it is idle again.
			rec.pool, rec.runtimeName = p.def.Name, ""
			rec.env.Name, rec.env.AgentID, rec.env.State = member, member, StateReady
			rec.env.Idle = ports.IdlePolicy{}
			s.envs[member] = rec
		}
		s.mu.Unlock()
		s.changed()
		if errors.Is(err, ports.ErrCredentialExists) {
			return Environment{}, false, fmt.Errorf("%w: an agent named %q already has a credential", ports.ErrEnvExists, req.Name)
		}
		// The caller's environment is provisioned the usual way; a member
		// whose agent may be half renamed goes.
		s.log.ErrorContext(ctx, "a pool member could not be handed over; provisioning instead", "pool", p.def.Name, "member", member, "name", req.Name, "err", err)
		s.mu.Lock()
		p.misses++
		s.mu.Unlock()
		if renamed {
			s.dropRuntimeEnv(rec.env.Runtime, member, req.Name)
		}
		return Environment{}, false, nil
	}
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	if taken, ok := s.envs[req.Name]; ok {
		taken.idleFrom = now // its idle clock starts at the take
	}
	s.mu.Unlock()
	s.update(req.Name, func(e *Environment) {
		e.State, e.Error, e.ReadyAt, e.ProvisionTime = StateReady, "", now, now.Sub(start)
		e.Events = appendEvent(e.Events, Event{At: now, Step: "agent_ready", Message: fmt.Sprintf("after %s (from a pool)", now.Sub(start).Round(time.Microsecond))})
	})
	s.log.InfoContext(ctx, "environment taken from a pool", "name", req.Name, "pool", p.def.Name, "member", member, "take_time", now.Sub(start))
	got, _ := s.Get(req.Name)
	return got, true, nil
}

// handOver makes member's agent the agent name: a fresh credential for
// name, the claim stored, the agent renamed, and once it registered as
// name, the member's credential revoked. renamed says whether the agent
// may have been told (so the member cannot simply go back to its pool).
func (s *Service) handOver(ctx context.Context, member, name string, kind ports.RuntimeKind, keeper ports.IdentityKeeper) (renamed bool, err error) {
	agentSecret, err := secret.New()
	if err != nil {
		return false, err
	}
	if err := s.cfg.Credentials.Create(name, agentSecret); err != nil {
		return false, fmt.Errorf("credential for %q: %w", name, err)
	}
	defer func() {
		if err != nil {
			_ = s.cfg.Credentials.Delete(name)
			if !renamed {
				_ = s.cfg.Pools.DeleteClaim(context.WithoutCancel(ctx), member)
			}
		}
	}()
	if _, err := s.cfg.Credentials.PinKind(name, kind); err != nil {
		return false, err
	}
	if err := s.cfg.Pools.PutClaim(ctx, member, name); err != nil {
		return false, err
	}
	renamed = true
	if err := s.cfg.Renamer.RenameAgent(ctx, member, name, agentSecret); err != nil {
		return renamed, fmt.Errorf("renaming the agent: %w", err)
	}
	// The agent registers again at once; polled finely, as this wait is
	// most of what a take costs.
	deadline := time.NewTimer(takeTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !s.connected(name) {
		select {
		case <-ctx.Done():
			return renamed, ctx.Err()
		case <-s.life.Done():
			return renamed, s.life.Err()
		case <-deadline.C:
			return renamed, fmt.Errorf("the renamed agent did not register within %s", takeTimeout)
		case <-tick.C:
		}
	}
	if keeper != nil {
		// Only a later start of the environment needs it: off the take's
		// path, and the take stands whatever it says.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if err := keeper.KeepIdentity(kctx, member, name, agentSecret); err != nil {
				s.log.Error("the runtime could not keep a taken member's new identity: starting it again after a stop will not connect", "member", member, "name", name, "err", err)
			}
		}()
	}
	if err := s.cfg.Credentials.Delete(member); err != nil {
		s.log.ErrorContext(ctx, "a taken member's credential could not be revoked", "member", member, "err", err)
	}
	if s.cfg.Retire != nil {
		s.cfg.Retire.RetireAgent(ctx, member, ReasonPoolMemberTaken)
	}
	return renamed, nil
}

// recoverPools loads the pools (stored, then those given at start) and
// returns the claims; called by Recover before the runtimes are read.
func (s *Service) recoverPools(ctx context.Context) map[string]string {
	if s.cfg.Pools == nil {
		return nil
	}
	for _, p := range s.cfg.StartPools {
		if err := s.CheckPool(p); err != nil {
			s.log.ErrorContext(ctx, "a pool given at start is refused", "pool", p.Name, "err", err)
			continue
		}
		if err := s.cfg.Pools.PutPool(ctx, p); err != nil {
			s.log.ErrorContext(ctx, "a pool given at start could not be stored", "pool", p.Name, "err", err)
		}
	}
	defs, err := s.cfg.Pools.Pools(ctx)
	if err != nil {
		s.log.ErrorContext(ctx, "pools could not be read: none kept", "err", err)
	}
	s.mu.Lock()
	for _, d := range defs {
		if _, ok := s.runtime(d.Runtime); ok {
			s.pools[d.Name] = &pool{def: d}
		}
	}
	s.mu.Unlock()
	claims, err := s.cfg.Pools.Claims(ctx)
	if err != nil {
		// Without them, taken environments would look like idle members
		// and be handed out again: keep no member at all instead.
		s.log.ErrorContext(ctx, "pool claims could not be read: no pool kept until they can", "err", err)
		s.mu.Lock()
		s.pools = map[string]*pool{}
		s.mu.Unlock()
		return nil
	}
	return claims
}

// startPools starts the keeper of the pools.
func (s *Service) startPools() {
	if s.cfg.Pools == nil {
		return
	}
	s.wg.Add(1)
	go s.keepPools()
}

func (s *Service) kick() {
	select {
	case s.refill <- struct{}{}:
	default:
	}
}

// keepPools keeps each pool at its size: it replaces members that failed
// or lost their agent, drops members beyond the size, and provisions new
// ones, at most RefillConcurrency at once.
func (s *Service) keepPools() {
	defer s.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		s.tendPools()
		select {
		case <-s.life.Done():
			return
		case <-s.refill:
		case <-tick.C:
		}
	}
}

func (s *Service) tendPools() {
	now := s.cfg.Clock.Now()
	var drop []*record
	want := map[string]int{}
	s.mu.Lock()
	live := map[string][]*record{}
	for _, rec := range s.envs {
		if rec.pool == "" || rec.env.State == StateDeleting {
			continue
		}
		broken := rec.env.State == StateFailed || rec.env.State == StateStopped || rec.env.State == StatePaused
		if rec.env.State == StateReady && !s.connected(rec.env.Name) {
			if rec.unhealthySince.IsZero() {
				rec.unhealthySince = now
			}
			broken = now.Sub(rec.unhealthySince) >= memberGrace
		} else {
			rec.unhealthySince = time.Time{}
		}
		if broken {
			drop = append(drop, rec)
			continue
		}
		if s.cfg.Link != nil && rec.env.State == StateReady && !rec.warmed && !rec.warming && s.connected(rec.env.Name) {
			rec.warming = true
			s.wg.Add(1)
			go s.warm(rec, rec.env.Name)
		}
		live[rec.pool] = append(live[rec.pool], rec)
	}
	for name, p := range s.pools {
		members := live[name]
		if extra := len(members) - p.def.Size; extra > 0 {
			// The idle go first: they cost nothing to replace.
			sort.SliceStable(members, func(i, j int) bool { return !s.idle(members[i]) && s.idle(members[j]) })
			drop = append(drop, members[:extra]...)
		}
		if now.After(p.retryAt) {
			want[name] = p.def.Size - len(members)
		}
	}
	s.mu.Unlock()
	for _, rec := range drop {
		s.dropMemberAsync(rec)
	}
	for name, n := range want {
		for ; n > 0; n-- {
			select {
			case s.slots <- struct{}{}:
			default:
				return // all slots busy: a finished refill kicks again
			}
			s.mu.Lock()
			p := s.pools[name]
			var def ports.Pool
			if p != nil {
				def = p.def
			}
			s.mu.Unlock()
			if p == nil {
				<-s.slots
				break
			}
			if !s.startMember(def) {
				<-s.slots
				break
			}
		}
	}
}

// startMember provisions one member of def, holding a refill slot until
// it is ready or failed; false if it could not even start.
func (s *Service) startMember(def ports.Pool) bool {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := def.Name + "-" + hex.EncodeToString(b[:])
	start := s.cfg.Clock.Now()
	env, err := s.create(s.life, poolRequest(def, name), def.Name)
	if err != nil {
		s.log.Error("a pool member could not be provisioned", "pool", def.Name, "err", err)
		s.backOff(def.Name, false)
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { <-s.slots; s.kick() }()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for env.State != StateReady && env.State != StateFailed {
			select {
			case <-s.life.Done():
				return
			case <-tick.C:
			}
			f, ok := s.get(name)
			if !ok || f.pool == "" {
				return // dropped, or (ready meanwhile) taken
			}
			env = f.Environment
		}
		s.backOff(def.Name, env.State == StateReady)
		if env.State == StateReady && s.cfg.ObserveRefill != nil {
			s.cfg.ObserveRefill(def.Name, s.cfg.Clock.Now().Sub(start))
		}
	}()
	return true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// backOff counts a member that came up (ok) or not: after failures in a
// row the pool waits 2 s, 4 s … up to a minute before provisioning again.
func (s *Service) backOff(pool string, ok bool) {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pools[pool]
	switch {
	case p == nil:
	case ok:
		p.failures, p.retryAt = 0, time.Time{}
	default:
		p.failures++
		p.retryAt = now.Add(min(time.Second<<min(p.failures, 6), time.Minute))
	}
}

// dropMemberAsync destroys an untaken member in the background.
func (s *Service) dropMemberAsync(rec *record) {
	s.mu.Lock()
	name := rec.env.Name
	ok := s.envs[name] == rec && rec.pool != "" && rec.env.State != StateDeleting
	s.mu.Unlock()
	if !ok {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.life), 2*time.Minute)
		defer cancel()
		if err := s.delete(ctx, name, true); err != nil && !errors.Is(err, ports.ErrEnvNotFound) {
			s.log.Error("a pool member could not be destroyed", "member", name, "err", err)
		}
		s.kick()
	}()
}

// dropRuntimeEnv destroys what is left of a member on its runtime after
// a failed take or its pool's deletion: its credential (under either
// name), its agent and the environment itself.
func (s *Service) dropRuntimeEnv(runtime, member, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.life), 2*time.Minute)
	defer cancel()
	ids := []string{member}
	if name != member {
		ids = append(ids, name)
	}
	for _, id := range ids {
		_ = s.cfg.Credentials.Delete(id)
		if s.cfg.Retire != nil {
			s.cfg.Retire.RetireAgent(ctx, id, ports.ReasonEnvironmentDeleted)
		}
	}
	if rt := s.runtimes()[runtime]; rt != nil {
		if err := rt.Destroy(ctx, member); err != nil && !errors.Is(err, ports.ErrEnvNotFound) {
			s.log.Error("a pool member could not be destroyed", "member", member, "err", err)
		}
	}
	if s.cfg.Pools != nil {
		_ = s.cfg.Pools.DeleteClaim(ctx, member)
	}
}
