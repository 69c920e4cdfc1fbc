package environment

// Sleep and wake: an environment hibernates (its runtime saves it to disk
// and frees its memory and CPU) when asked or when its idle policy says so,
// and wakes when asked or when work is aimed at it (Use). One transition at
// a time per environment: concurrent callers of a wake wait for the one
// wake under way.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Errors of Hibernate.
var (
	// ErrWrongState is an operation the environment's state does not allow
	// (hibernating one that is not running).
	ErrWrongState = errors.New("not possible in the environment's state")
	// ErrHibernateLimit is a hibernation that would take the saved states
	// past Config.HibernateMaxBytes.
	ErrHibernateLimit = errors.New("the saved states of hibernated environments would exceed their limit")
)

// Defaults of the sleep and wake settings.
const (
	// DefaultWakeTimeout bounds a wake: the runtime's restore and the
	// agent's return (a VM under TCG restores in about a second).
	DefaultWakeTimeout = 2 * time.Minute
	// DefaultActivitySaveEvery is how often the environments' last
	// activity is written while it changes: a restart loses at most that
	// much of it (the idle clock then runs a little early, never late),
	// and busy environments cost one small write per period in all.
	DefaultActivitySaveEvery = 10 * time.Second
	// DefaultTakenIdleAfter is the idle policy of an environment taken from
	// a pool whose definition names none: a member taken and then left
	// does not hold its memory forever.
	DefaultTakenIdleAfter = 30 * time.Minute
	// Requested is the SleepReason of an explicit Hibernate.
	Requested = "requested"
)

// activity is what the idle clock knows of one environment: when it was
// last used, for what, and how many pieces of work hold it now.
type activity struct {
	last  atomic.Int64 // unix nanoseconds
	kind  atomic.Pointer[string]
	holds atomic.Int32
	// saved is the last written to the activity store (unix nanoseconds).
	saved atomic.Int64
	// sleep is what its record says of its sleep (nil: nothing), kept
	// with its activity; sleepDirty: not written yet. Both change under
	// Service.saveMu, so that a batch never marks a newer one written.
	sleep      atomic.Pointer[ports.Sleep]
	sleepDirty atomic.Bool
}

// useKinds holds one pointer per known kind, so that a touch (once per
// chunk of session output) allocates nothing.
var useKinds = func() map[string]*string {
	m := map[string]*string{}
	for _, k := range []string{ports.UseExec, ports.UseSession, ports.UseViewer, ports.UseFiles, ports.UseTunnel, ports.UsePreview, ports.UseWake} {
		m[k] = &k
	}
	return m
}()

func (a *activity) touch(at time.Time, kind string) {
	a.last.Store(at.UnixNano())
	p, ok := useKinds[kind]
	if !ok {
		p = &kind
	}
	a.kind.Store(p)
}

// restore sets what a store kept, as saved already.
func (a *activity) restore(act ports.Activity) {
	if !act.At.IsZero() { // an entry kept only for its sleep
		a.touch(act.At, act.Kind)
		a.saved.Store(act.At.UnixNano())
	}
	if act.Sleep != (ports.Sleep{}) {
		sl := act.Sleep
		a.sleep.Store(&sl)
	}
}

// stored is its entry in the activity store.
func (a *activity) stored() ports.Activity {
	at, kind := a.lastUse()
	act := ports.Activity{At: at, Kind: kind}
	if sl := a.sleep.Load(); sl != nil {
		act.Sleep = *sl
	}
	return act
}

func (a *activity) lastUse() (time.Time, string) {
	n := a.last.Load()
	if n == 0 {
		return time.Time{}, ""
	}
	kind := ""
	if k := a.kind.Load(); k != nil {
		kind = *k
	}
	return time.Unix(0, n), kind
}

// activityOf is the activity of an environment (not a pool's untaken
// member), nil for an agent that is no environment's.
func (s *Service) activityOf(name string) *activity {
	if a, ok := s.acts.Load(name); ok {
		return a.(*activity)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec, ok := s.envs[name]; !ok || rec.pool != "" {
		return nil
	}
	a, _ := s.acts.LoadOrStore(name, &activity{})
	return a.(*activity)
}

// Touch records a use of agentID's environment that holds nothing (output
// of a session, bytes through a tunnel).
func (s *Service) Touch(agentID, kind string) {
	if a := s.activityOf(agentID); a != nil {
		a.touch(s.cfg.Clock.Now(), kind)
	}
}

// Use wakes agentID's environment when it sleeps and holds it in use by
// kind until release (ports.EnvironmentUse).
func (s *Service) Use(ctx context.Context, agentID, kind string) (func(), error) {
	a := s.activityOf(agentID)
	if a == nil {
		return func() {}, nil
	}
	a.holds.Add(1)
	a.touch(s.cfg.Clock.Now(), kind)
	release := sync.OnceFunc(func() {
		a.touch(s.cfg.Clock.Now(), kind)
		a.holds.Add(-1)
	})
	if _, err := s.wake(ctx, agentID, kind); err != nil {
		release()
		if errors.Is(err, ports.ErrEnvNotFound) {
			return func() {}, nil // deleted meanwhile: the work fails on its own
		}
		return func() {}, err
	}
	return release, nil
}

// Hibernate saves a running environment to disk through its runtime.
func (s *Service) Hibernate(ctx context.Context, name string) (Environment, error) {
	return s.hibernate(ctx, name, Requested)
}

// Wake runs a hibernated environment again and returns once its agent is
// back; an environment that is not asleep is returned as it is.
func (s *Service) Wake(ctx context.Context, name string) (Environment, error) {
	if s.activityOf(name) == nil {
		return Environment{}, fmt.Errorf("%w: %q", ports.ErrEnvNotFound, name)
	}
	s.Touch(name, ports.UseWake)
	return s.wake(ctx, name, ports.UseWake)
}

// Hibernated counts the hibernated environments and the bytes their saved
// states take on disk.
func (s *Service) Hibernated() (count int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rec := range s.envs {
		if rec.env.State == StateHibernated || rec.env.State == StateHibernating {
			count++
			bytes += rec.env.SavedBytes
		}
	}
	return count, bytes
}

// settle waits, with s.mu held on entry and on return, for the transition
// under way on name (a hibernation or a wake) to end; the record may be
// gone after it.
func (s *Service) settle(ctx context.Context, name string) (*record, error) {
	for {
		rec, ok := s.envs[name]
		if !ok || rec.pool != "" {
			return nil, fmt.Errorf("%w: %q", ports.ErrEnvNotFound, name)
		}
		if rec.transition == nil {
			return rec, nil
		}
		done := rec.transition
		s.mu.Unlock()
		select {
		case <-done:
			s.mu.Lock()
		case <-ctx.Done():
			s.mu.Lock()
			return nil, ctx.Err()
		}
	}
}

func (s *Service) hibernate(ctx context.Context, name, reason string) (Environment, error) {
	f, rt, err := s.lookup(name, false)
	if err != nil {
		return Environment{}, err
	}
	mode := rt.Capabilities().Hibernate.Of()
	if mode == ports.HibernateNone {
		return Environment{}, fmt.Errorf("%w: the %s runtime cannot hibernate", ports.ErrUnsupported, f.Runtime)
	}
	s.mu.Lock()
	rec, err := s.settle(ctx, name)
	if err != nil {
		s.mu.Unlock()
		return Environment{}, err
	}
	switch rec.env.State {
	case StateHibernated:
		s.mu.Unlock()
		got, _ := s.Get(name)
		return got, nil
	case StateReady, StateBooting:
	default:
		state := rec.env.State
		s.mu.Unlock()
		return Environment{}, fmt.Errorf("%w: %q is %s; only a running environment hibernates", ErrWrongState, name, state)
	}
	estimate := hibernateEstimate(rec, mode)
	if err := s.overHibernateLimit(rec, estimate); err != nil {
		s.mu.Unlock()
		return Environment{}, err
	}
	// Until its save ends, others count what this one expects to save.
	rec.reserved = estimate
	if rec.cancel != nil {
		rec.cancel() // a wait for its agent: it is going away on purpose
		rec.cancel = nil
	}
	done := make(chan struct{})
	rec.transition = done
	prev := rec.env.State
	start := s.cfg.Clock.Now()
	rec.env.State = StateHibernating
	rec.env.Events = appendEvent(rec.env.Events, Event{At: start, Step: "hibernating", Message: reason})
	s.mu.Unlock()
	s.changed()

	// The caller leaving must not leave the environment half saved.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.WakeTimeout)
	h, err := s.hibernateQuiet(hctx, rt, rec, name, f.runtimeName)
	cancel()
	if err == nil {
		// Written before the transition ends, so that a wake that follows
		// never has its own note overwritten by this one.
		s.noteSleep(name, ports.Sleep{Reason: reason})
	}
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	rec.transition = nil
	close(done)
	// Its saved bytes (or, failed, nothing) count from now instead.
	rec.reserved = 0
	if err != nil {
		rec.env.State = prev
		rec.env.Events = appendEvent(rec.env.Events, Event{At: now, Step: "hibernate_failed", Message: err.Error()})
	} else {
		if h.At.IsZero() {
			h.At = now
		}
		rec.env.State, rec.env.Error, rec.sleptAt = StateHibernated, "", now
		rec.env.HibernatedAt, rec.env.SavedBytes, rec.env.SleepReason = h.At, h.Bytes, reason
		rec.env.Events = appendEvent(rec.env.Events, Event{At: now, Step: "hibernated",
			Message: fmt.Sprintf("%s; %s: %d bytes on disk, after %s", reason, h.Mode, h.Bytes, now.Sub(start).Round(time.Millisecond))})
	}
	s.mu.Unlock()
	s.changed()
	if err != nil {
		s.log.WarnContext(ctx, "environment could not hibernate", "name", name, "err", err)
		return Environment{}, err
	}
	// Asleep, it is not used until its wake: its last use is final now.
	s.saveActivity()
	s.log.InfoContext(ctx, "environment hibernated", "name", name, "reason", reason, "mode", h.Mode, "saved_bytes", h.Bytes, "took", now.Sub(start))
	if s.cfg.ObserveHibernate != nil {
		s.cfg.ObserveHibernate(f.Runtime, now.Sub(start))
	}
	got, _ := s.Get(name)
	return got, nil
}

// hibernateQuiet has rt hibernate rtName, with the link of its agent (name)
// ended and kept ended meanwhile when rt needs it so (a memory save
// cannot keep a connection to the outside). The runtime decides that as
// it saves (ports.QuietLinkHibernator): its mode can change at any time,
// and a look at it before the save could disagree with the save. The
// hold ends as soon as rt has saved it (or failed to): its processes are
// stopped then, and after a wake its agent must be able to reconnect at
// once.
//
// The runtime tells, before the save, its mode and what it expects it to
// take (reserveSave): the limit is checked again there when that is more
// than the look before reserved (the mode changed since, Docker's
// checkpoint probe having ended, or the runtime measured the files a
// filesystem save keeps), and the save refused before it is made.
func (s *Service) hibernateQuiet(ctx context.Context, rt ports.Runtime, rec *record, name, rtName string) (ports.Hibernation, error) {
	q, ok := rt.(ports.QuietLinkHibernator)
	if !ok {
		return rt.Hibernate(ctx, rtName)
	}
	lq := s.cfg.LinkQuiet
	quiet := func(ctx context.Context, save ports.PlannedSave) (func(), error) {
		if err := s.reserveSave(rec, save); err != nil {
			return nil, err
		}
		if save.Mode != ports.HibernateMemory || lq == nil {
			return func() {}, nil
		}
		release, err := lq.QuiesceLink(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("ending the agent's link for the save: %w", err)
		}
		return release, nil
	}
	return q.HibernateQuiet(ctx, rtName, quiet)
}

// reserveSave makes the runtime's estimate of the save it is about to
// make rec's reservation (the guest's memory for a save with the memory
// it gives none for). A reservation grows only through a check: one
// larger than the look's is ErrHibernateLimit when it does not fit.
func (s *Service) reserveSave(rec *record, save ports.PlannedSave) error {
	estimate := save.Bytes
	if estimate <= 0 {
		estimate = hibernateEstimate(rec, save.Mode)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if estimate > rec.reserved {
		if err := s.overHibernateLimit(rec, estimate); err != nil {
			return err
		}
	}
	rec.reserved = estimate
	return nil
}

// hibernateEstimate is what the look before a save expects saving rec by
// mode to take: a memory save about the guest's memory; a filesystem
// one's size only its runtime can tell (ports.PlannedSave), just before
// it is made.
func hibernateEstimate(rec *record, mode ports.HibernateMode) int64 {
	if mode == ports.HibernateMemory {
		return int64(rec.env.Resources.MemoryMB) << 20
	}
	return 0
}

// overHibernateLimit is ErrHibernateLimit when saving rec, expected to
// take estimate bytes, would take the saved states, with the reservations
// of the hibernations under way but rec's own (the estimate replaces it),
// past Config.HibernateMaxBytes (s.mu held).
func (s *Service) overHibernateLimit(rec *record, estimate int64) error {
	max := s.cfg.HibernateMaxBytes
	if max <= 0 {
		return nil
	}
	var saved, reserved int64
	for _, r := range s.envs {
		saved += r.env.SavedBytes
		if r != rec {
			reserved += r.reserved
		}
	}
	if used := saved + reserved; used >= max || used+estimate > max {
		return fmt.Errorf("%w: %d bytes saved, %d reserved by hibernations under way, %d more expected, limit %d (AGENTIC_HIBERNATE_MAX_BYTES): delete or wake a hibernated environment", ErrHibernateLimit, saved, reserved, estimate, max)
	}
	return nil
}

// wake wakes name if it sleeps (why: what asked) and waits for it; every
// caller meanwhile waits for the same wake and gets its outcome. An
// environment that is not asleep comes back at once, as it is. A wake
// that failed leaving the environment hibernated (its saved state intact:
// runWake) is tried again by the next caller, not by those that waited
// for it.
func (s *Service) wake(ctx context.Context, name, why string) (Environment, error) {
	s.mu.Lock()
	waited := false
	if rec, ok := s.envs[name]; ok && rec.transition != nil {
		waited = true
	}
	rec, err := s.settle(ctx, name)
	if err != nil {
		s.mu.Unlock()
		return Environment{}, err
	}
	if waited && (rec.env.State != StateHibernated || rec.env.Error != "") {
		// The outcome of the wake (or hibernation) waited for.
		s.mu.Unlock()
		return s.woken(name)
	}
	if rec.env.State != StateHibernated {
		s.mu.Unlock()
		got, _ := s.Get(name)
		return got, nil
	}
	done := make(chan struct{})
	rec.transition = done
	rec.env.State = StateWaking
	start := s.cfg.Clock.Now()
	rec.env.Events = appendEvent(rec.env.Events, Event{At: start, Step: "waking", Message: "by " + why})
	s.mu.Unlock()
	s.changed()

	s.wg.Add(1)
	go s.runWake(rec, name, start, done)
	select {
	case <-done:
	case <-ctx.Done():
		return Environment{}, ctx.Err()
	}
	return s.woken(name)
}

// woken is name after a wake: ErrWakeFailed with the reason when the
// wake failed (failed, or hibernated with the error of its last wake; a
// successful hibernation clears that error).
func (s *Service) woken(name string) (Environment, error) {
	got, ok := s.Get(name)
	if !ok {
		return Environment{}, fmt.Errorf("%w: %q", ports.ErrEnvNotFound, name)
	}
	if got.State == StateFailed || (got.State == StateHibernated && got.Error != "") {
		return got, fmt.Errorf("%w: %s", ports.ErrWakeFailed, got.Error)
	}
	return got, nil
}

// runWake wakes rec through its runtime and waits for its agent, under the
// service's life (not a caller's: others wait for the same wake). A
// failure leaves it hibernated when its runtime still holds its saved
// state (the failure was the host's: the next wake tries again), failed
// otherwise.
func (s *Service) runWake(rec *record, name string, start time.Time, done chan struct{}) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(s.life, s.cfg.WakeTimeout)
	defer cancel()
	stillAsleep, err := s.wakeRuntime(ctx, rec, name)
	// What its record says of its sleep is written before the callers
	// learn the outcome: a restart then shows a failed wake's error too.
	var why string // a failed wake's error, on the record and in the note alike
	if err != nil {
		why = "wake: " + err.Error()
		s.mu.Lock()
		reason := rec.env.SleepReason
		s.mu.Unlock()
		s.noteSleep(name, ports.Sleep{Reason: reason, WakeError: why, WakeLost: !stillAsleep})
	} else {
		s.noteSleep(name, ports.Sleep{})
	}
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	rec.transition = nil
	close(done)
	var runtime string
	switch {
	case err != nil && stillAsleep:
		rec.env.State, rec.env.Error = StateHibernated, why
		rec.env.Events = appendEvent(rec.env.Events, Event{At: now, Step: "wake_failed", Message: why})
	case err != nil:
		rec.env.State, rec.env.Error = StateFailed, why
		rec.env.Events = appendEvent(rec.env.Events, Event{At: now, Step: "failed", Message: why})
	default:
		rec.env.State, rec.env.Error, rec.env.ReadyAt, rec.idleFrom = StateReady, "", now, now
		rec.env.HibernatedAt, rec.env.SavedBytes, rec.env.SleepReason = time.Time{}, 0, ""
		rec.env.Events = appendEvent(rec.env.Events, Event{At: now, Step: "woke", Message: fmt.Sprintf("after %s", now.Sub(start).Round(time.Millisecond))})
		runtime = rec.env.Runtime
	}
	s.mu.Unlock()
	s.changed()
	if err != nil {
		if stillAsleep {
			s.log.Warn("environment could not be woken; still hibernated, the next wake tries again", "name", name, "err", err)
		} else {
			s.log.Error("environment could not be woken", "name", name, "err", err)
		}
		return
	}
	if a := s.activityOf(name); a != nil {
		a.touch(now, ports.UseWake)
	}
	s.log.Info("environment woke", "name", name, "took", now.Sub(start))
	if s.cfg.ObserveWake != nil {
		s.cfg.ObserveWake(runtime, now.Sub(start))
	}
}

// wakeRuntime asks the runtime to wake name and waits until its agent has
// connected again (a connection made after it went to sleep). On an
// error, asleep says whether the environment is still hibernated, its
// saved state intact (wakeFailedAsleep).
func (s *Service) wakeRuntime(ctx context.Context, rec *record, name string) (asleep bool, err error) {
	s.mu.Lock()
	runtime, rtName, slept := rec.env.Runtime, rec.rtName(), rec.sleptAt
	s.mu.Unlock()
	rt := s.runtimes()[runtime]
	if rt == nil {
		return true, fmt.Errorf("%w: %s is not configured now", ports.ErrRuntimeUnavailable, runtime)
	}
	if err := rt.Wake(ctx, rtName); err != nil {
		return s.wakeFailedAsleep(rt, rtName, err), err
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if a, ok := s.cfg.Agents.Agent(name); ok && a.Status.Working() && a.ConnectedAt.After(slept) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			// Restored, it runs without its agent: not asleep.
			if s.life.Err() != nil {
				return false, errors.New("the server shut down during the wake")
			}
			return false, fmt.Errorf("the agent did not come back within %s of the wake", s.cfg.WakeTimeout)
		case <-tick.C:
		}
	}
}

// wakeFailedAsleep reports whether an environment whose runtime's Wake
// failed with err is still hibernated: not when the runtime said its
// saved state is lost (missing, corrupt, or refused by the restore), nor
// when the runtime no longer reports it hibernated; yes when it does (the
// failure was the host's), or cannot say now (it is unreachable: the
// saved state was not found wanting).
func (s *Service) wakeFailedAsleep(rt ports.Runtime, rtName string, err error) bool {
	if errors.Is(err, ports.ErrSavedStateLost) {
		return false
	}
	// The wake's own context may be spent: a look of its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.life), 30*time.Second)
	defer cancel()
	e, ierr := rt.Inspect(ctx, rtName)
	if ierr != nil {
		return !errors.Is(ierr, ports.ErrEnvNotFound)
	}
	return e.State == ports.EnvHibernated
}

// asleep reports whether st is hibernated or on its way in or out.
func asleep(st State) bool {
	return st == StateHibernated || st == StateHibernating || st == StateWaking
}

// policyOf is the idle policy the labels of an environment keep.
func policyOf(labels map[string]string) ports.IdlePolicy {
	var p ports.IdlePolicy
	if d, err := time.ParseDuration(labels[ports.LabelIdleAfter]); err == nil && d > 0 {
		p.IdleAfter = d
	}
	if d, err := time.ParseDuration(labels[ports.LabelDeleteAfter]); err == nil && d > 0 {
		p.DeleteAfter = d
	}
	return p
}

// policyLabels are the labels that keep p.
func policyLabels(p ports.IdlePolicy, into map[string]string) {
	if p.IdleAfter > 0 {
		into[ports.LabelIdleAfter] = p.IdleAfter.String()
	}
	if p.DeleteAfter > 0 {
		into[ports.LabelDeleteAfter] = p.DeleteAfter.String()
	}
}

// CheckIdlePolicy refuses (ports.ErrInvalidSpec) a policy a runtime with
// capabilities c cannot follow: negative times, or IdleAfter on a runtime
// that cannot hibernate.
func CheckIdlePolicy(p ports.IdlePolicy, c ports.RuntimeCapabilities) error {
	if p.IdleAfter < 0 || p.DeleteAfter < 0 {
		return fmt.Errorf("%w: idle_after and delete_after must not be negative", ports.ErrInvalidSpec)
	}
	if p.IdleAfter > 0 && c.Hibernate.Of() == ports.HibernateNone {
		return fmt.Errorf("%w: idle_after: the %s runtime cannot hibernate (its capabilities say hibernate: none)", ports.ErrInvalidSpec, c.Runtime)
	}
	return nil
}

// takenPolicy is the idle policy of an environment taken from pool def.
func takenPolicy(def ports.Pool, c ports.RuntimeCapabilities) ports.IdlePolicy {
	p := def.Idle
	if p.IdleAfter == 0 && c.Hibernate.Of() != ports.HibernateNone {
		p.IdleAfter = DefaultTakenIdleAfter
	}
	return p
}

// keepIdle follows every environment's idle policy until the service
// closes, looking as often as the shortest policy needs.
func (s *Service) keepIdle() {
	defer s.wg.Done()
	for {
		wait := s.idleRound()
		select {
		case <-s.life.Done():
			return
		case <-time.After(wait):
		case <-s.idlePolicy:
		}
	}
}

// pokeIdleKeeper has the idle keeper look again now: an environment with
// a policy appeared, which its current wait (up to 10s) did not count.
func (s *Service) pokeIdleKeeper() {
	select {
	case s.idlePolicy <- struct{}{}:
	default:
	}
}

// idleRound puts to sleep and deletes what the policies say, and returns
// how long to wait before the next round.
func (s *Service) idleRound() time.Duration {
	const most, least = 10 * time.Second, 50 * time.Millisecond
	wait := most
	now := s.cfg.Clock.Now()
	var sleep, remove []string
	s.mu.Lock()
	for name, rec := range s.envs {
		p := rec.env.Idle
		if rec.pool != "" || rec.transition != nil || (p.IdleAfter == 0 && p.DeleteAfter == 0) {
			continue
		}
		for _, d := range []time.Duration{p.IdleAfter, p.DeleteAfter} {
			if d > 0 {
				wait = min(wait, max(d/8, least))
			}
		}
		switch rec.env.State {
		case StateReady:
			rec.stoppedAt = time.Time{}
			if p.IdleAfter > 0 && s.idleFor(name, rec, now) >= p.IdleAfter {
				sleep = append(sleep, name)
			}
		case StateHibernated:
			if p.DeleteAfter > 0 && !rec.env.HibernatedAt.IsZero() && now.Sub(rec.env.HibernatedAt) >= p.DeleteAfter {
				remove = append(remove, name)
			}
		case StateStopped:
			if rec.stoppedAt.IsZero() {
				rec.stoppedAt = now
			}
			if p.DeleteAfter > 0 && now.Sub(rec.stoppedAt) >= p.DeleteAfter {
				remove = append(remove, name)
			}
		}
	}
	s.mu.Unlock()
	for _, name := range sleep {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if e, ok := s.Get(name); ok {
				_, _ = s.hibernate(s.life, name, fmt.Sprintf("idle for %s", e.Idle.IdleAfter))
			}
		}()
	}
	for _, name := range remove {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.log.Info("deleting an environment asleep past its delete_after", "name", name)
			if err := s.Delete(s.life, name); err != nil && !errors.Is(err, ports.ErrEnvNotFound) {
				s.log.Error("an environment past its delete_after could not be deleted", "name", name, "err", err)
			}
		}()
	}
	return wait
}

// idleFor is how long nothing has used rec (s.mu held): zero while work
// holds it or its agent runs a command.
func (s *Service) idleFor(name string, rec *record, now time.Time) time.Duration {
	last := rec.idleFrom
	if v, ok := s.acts.Load(name); ok {
		a := v.(*activity)
		if a.holds.Load() > 0 {
			return 0
		}
		if t, _ := a.lastUse(); t.After(last) {
			last = t
		}
	}
	// A kept session's shell left open is no work: its output and viewers
	// count, not its being there.
	if a, ok := s.cfg.Agents.Agent(name); ok && a.RunningCommands > a.KeptSessions {
		return 0
	}
	if last.IsZero() {
		return 0
	}
	return now.Sub(last)
}

// loadActivity reads the stored activities for Recover to give back to
// the environments it finds.
func (s *Service) loadActivity(ctx context.Context) {
	if s.cfg.Activity == nil {
		return
	}
	acts, err := s.cfg.Activity.Activities(ctx)
	if err != nil {
		s.log.WarnContext(ctx, "environments' last activity unreadable; their idle clocks start now", "err", err)
		return
	}
	s.mu.Lock()
	s.storedActs = acts
	s.mu.Unlock()
}

// noteSleep sets what name's record says of its sleep, which its runtime
// does not keep, and writes it at once (with the activity that changed
// meanwhile) when it changed.
func (s *Service) noteSleep(name string, sl ports.Sleep) {
	a := s.activityOf(name)
	if a == nil {
		return
	}
	s.saveMu.Lock()
	old := ports.Sleep{}
	if p := a.sleep.Load(); p != nil {
		old = *p
	}
	changed := old != sl
	if changed {
		if sl == (ports.Sleep{}) {
			a.sleep.Store(nil)
		} else {
			a.sleep.Store(&sl)
		}
		a.sleepDirty.Store(true)
	}
	s.saveMu.Unlock()
	if changed {
		s.saveActivity()
	}
}

// recoverSleep gives an environment found hibernated after a restart what
// its record said of its sleep before: why it went to sleep, and the
// error of its last wake if that failed; one whose saved state that wake
// found lost is failed again (as Next keeps it before a restart).
func recoverSleep(env *Environment, sl ports.Sleep) {
	if env.State != StateHibernated {
		return
	}
	env.SleepReason = sl.Reason
	if sl.WakeError != "" {
		env.Error = sl.WakeError
		if sl.WakeLost {
			env.State = StateFailed
		}
	}
}

// keepActivity writes the activity that changed every ActivitySaveEvery
// until the service closes (Close writes the last).
func (s *Service) keepActivity() {
	defer s.wg.Done()
	if s.cfg.Activity != nil {
		s.every(s.cfg.ActivitySaveEvery, s.saveActivity)
	}
}

// saveActivity writes, in one batch, the whole entry of every
// environment used, or whose sleep changed, since its last write.
func (s *Service) saveActivity() {
	if s.cfg.Activity == nil {
		return
	}
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	batch := map[string]ports.Activity{}
	stamps := map[*activity]int64{}
	s.acts.Range(func(k, v any) bool {
		a := v.(*activity)
		if n := a.last.Load(); (n != 0 && n != a.saved.Load()) || a.sleepDirty.Load() {
			act := a.stored()
			batch[k.(string)] = act
			stamps[a] = 0
			if !act.At.IsZero() {
				stamps[a] = act.At.UnixNano()
			}
		}
		return true
	})
	if len(batch) == 0 {
		return
	}
	if err := s.cfg.Activity.PutActivities(context.Background(), batch); err != nil {
		s.log.Warn("environments' last activity not saved; tried again next time", "count", len(batch), "err", err)
		return
	}
	for a, n := range stamps {
		a.saved.Store(n)
		a.sleepDirty.Store(false)
	}
}

// forgetActivity drops a deleted environment's stored activity, so that a
// new one under its name starts afresh.
func (s *Service) forgetActivity(name string) {
	if s.cfg.Activity == nil {
		return
	}
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	if err := s.cfg.Activity.DeleteActivity(context.Background(), name); err != nil {
		s.log.Warn("a deleted environment's last activity not forgotten", "name", name, "err", err)
	}
}
