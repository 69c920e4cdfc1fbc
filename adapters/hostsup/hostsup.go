// Package hostsup is the host supervisor behind the "host" isolation tier:
// agentic-mgmt with AGENTIC_HOST_AGENTS=N keeps N agentic-agent processes,
// host-01 … host-N, running on its own machine.
//
// The agents deliberately outlive agentic-mgmt: each runs in its own session,
// so a Ctrl-C or SIGTERM to the server does not reach it, and Stop leaves it
// running. A restarted server finds them again through their pid files in
// StateDir and adopts them instead of starting duplicates.
package hostsup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/secret"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Config says which agents to run and how.
type Config struct {
	Count       int
	AgentBinary string // path to agentic-agent (a bare name is looked up in PATH)
	// StateDir holds <id>.pid and <id>.log; created 0700.
	StateDir    string
	ServerURL   string // MANAGEMENT_SERVER for the agents
	Credentials ports.AgentCredentials
	Logger      *slog.Logger
	ExtraEnv    []string // KEY=VALUE added to the agents' environment
	// Users, when set (a root server), gives each agent users of its own
	// (see AgentUser); nil runs them as this server's user.
	Users *Users
	// Crash restart backoff doubles from RestartMin to RestartMax (defaults
	// 1s and 30s) and resets once an agent stayed up 30s.
	RestartMin, RestartMax time.Duration
	// PollInterval is how often adopted agents (not our children) are
	// checked for liveness; default 500ms.
	PollInterval time.Duration
}

// HostAgent is the supervisor's view of one agent.
type HostAgent struct {
	ID  string
	PID int // 0 while the agent is down and waiting to be restarted
	// Restarts counts restarts after a crash since this supervisor started.
	Restarts int
	// Adopted is true when the running process was found running at Start
	// rather than spawned by this supervisor.
	Adopted   bool
	StartedAt time.Time
}

// Supervisor runs and restarts the host agents.
type Supervisor struct {
	cfg Config
	log *slog.Logger
	ids []string

	// Fixed by the design; variables so tests need not wait for them.
	stableAfter time.Duration // uptime after which the backoff resets
	killAfter   time.Duration // SIGTERM → SIGKILL in StopAgents

	mu      sync.Mutex
	binary  string // resolved AgentBinary
	agents  map[string]*agentState
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

type agentState struct {
	id       string
	cur      *proc // nil while down
	restarts int
	user     *AgentUser // who it runs as, nil for the server's user
}

// proc is one agent process.
type proc struct {
	pid        int
	startTicks uint64 // for adopted processes: guards against pid reuse
	startedAt  time.Time
	adopted    bool
	// exited is closed once a child we spawned was reaped; nil for adopted
	// processes, which are polled instead.
	exited  chan struct{}
	waitErr error // valid once exited is closed
	// userNS is the agent's own user namespace, where its commands run,
	// or "" when it shares the server's; orphanUIDs are the uids its
	// commands run as there.
	userNS     string
	orphanUIDs []uint32
}

// endOrphans kills what the dead agent left in its namespace (see the
// package function).
func (p *proc) endOrphans() { endOrphans(p.userNS, p.orphanUIDs) }

// dying reports whether our child has exited while its reaper is not yet
// done (reaping it, ending its leftovers).
func (p *proc) dying() bool {
	st, err := readProcStat(p.pid)
	return err != nil || st.dead()
}

// New prepares a supervisor; nothing happens before Start.
func New(cfg Config) *Supervisor {
	if cfg.RestartMin <= 0 {
		cfg.RestartMin = time.Second
	}
	if cfg.RestartMax <= 0 {
		cfg.RestartMax = 30 * time.Second
	}
	if cfg.RestartMax < cfg.RestartMin {
		cfg.RestartMax = cfg.RestartMin
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ids := make([]string, 0, max(cfg.Count, 0))
	for i := 1; i <= cfg.Count; i++ {
		ids = append(ids, AgentID(i))
	}
	return &Supervisor{
		cfg:         cfg,
		log:         log.With("component", "hostsup"),
		ids:         ids,
		stableAfter: 30 * time.Second,
		killAfter:   5 * time.Second,
		agents:      make(map[string]*agentState),
	}
}

// AgentID is the id of the n-th host agent (1-based): host-01, host-02, …
func AgentID(n int) string { return fmt.Sprintf("host-%02d", n) }

// Start adopts or spawns each agent, then supervises them in the background
// until ctx ends or Stop is called. It fails only on configuration problems;
// an agent that cannot be spawned is logged and retried with backoff.
func (s *Supervisor) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started || s.stopped {
		s.mu.Unlock()
		return errors.New("hostsup: Start called twice or after Stop")
	}
	s.started = true
	s.mu.Unlock()
	if len(s.ids) == 0 {
		return nil
	}
	if err := s.prepare(); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		cancel()
		return nil
	}
	s.cancel = cancel
	s.mu.Unlock()

	for _, id := range s.ids {
		a := &agentState{id: id}
		p := s.adopt(id)
		if p != nil {
			a.user, _ = s.userOf(id, AgentTmpDir(s.pidPath(id)))
		} else {
			var err error
			if p, err = s.spawn(runCtx, a); err != nil && runCtx.Err() == nil {
				s.log.Error("host agent failed to start; will retry", "agent", id, "err", err)
			}
		}
		s.mu.Lock()
		a.cur = p
		s.agents[id] = a
		// Stop may run concurrently: once it waits, no goroutine may be added.
		if s.stopped {
			s.mu.Unlock()
			break
		}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.supervise(runCtx, a, p)
	}
	return nil
}

// prepare checks the configuration and creates StateDir.
func (s *Supervisor) prepare() error {
	if s.cfg.Credentials == nil {
		return errors.New("hostsup: no Credentials")
	}
	if s.cfg.ServerURL == "" {
		return errors.New("hostsup: no ServerURL")
	}
	if s.cfg.StateDir == "" {
		return errors.New("hostsup: no StateDir")
	}
	if err := s.resolveBinary(); err != nil {
		return err
	}
	if err := os.MkdirAll(s.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("hostsup: state dir: %w", err)
	}
	return nil
}

// resolveBinary finds and checks the agent binary once, into s.binary.
func (s *Supervisor) resolveBinary() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.binary != "" {
		return nil
	}
	bin := s.cfg.AgentBinary
	if bin == "" {
		return errors.New("hostsup: no AgentBinary")
	}
	if !strings.Contains(bin, "/") {
		p, err := exec.LookPath(bin)
		if err != nil {
			return fmt.Errorf("hostsup: agent binary: %w", err)
		}
		bin = p
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return fmt.Errorf("hostsup: agent binary: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("hostsup: agent binary %s is not an executable file", bin)
	}
	s.binary = bin
	return nil
}

func (s *Supervisor) pidPath(id string) string { return filepath.Join(s.cfg.StateDir, id+".pid") }
func (s *Supervisor) logPath(id string) string { return filepath.Join(s.cfg.StateDir, id+".log") }

// supervise waits for the agent's process to end and restarts it, until ctx
// ends. It never kills the agent.
func (s *Supervisor) supervise(ctx context.Context, a *agentState, p *proc) {
	defer s.wg.Done()
	b := backoff{min: s.cfg.RestartMin, max: s.cfg.RestartMax}
	for {
		if p != nil {
			if !waitGone(ctx, p, s.cfg.PollInterval) {
				return // supervision ended; the agent keeps running
			}
			up := time.Since(p.startedAt)
			s.mu.Lock()
			a.cur = nil
			s.mu.Unlock()
			s.log.Warn("host agent exited", "agent", a.id, "pid", p.pid, "how", p.exitDescription(), "uptime", up.Round(time.Millisecond))
			p.endOrphans()
			if up >= s.stableAfter {
				b.reset()
			}
		}
		delay := b.next()
		s.log.Info("restarting host agent", "agent", a.id, "in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		np, err := s.spawn(ctx, a)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("host agent failed to start", "agent", a.id, "err", err)
			}
			p = nil
			continue
		}
		s.mu.Lock()
		a.cur = np
		a.restarts++
		s.mu.Unlock()
		p = np
	}
}

// backoff doubles the restart delay from min to max.
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	return b.cur
}

func (b *backoff) reset() { b.cur = 0 }

// spawn starts a fresh agent process for id with a fresh secret.
func (s *Supervisor) spawn(ctx context.Context, a *agentState) (*proc, error) {
	id := a.id
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	agentSecret, err := secret.New()
	if err != nil {
		return nil, err
	}
	// Store the secret before the process exists so its first connect works.
	if err := s.cfg.Credentials.Put(id, agentSecret); err != nil {
		return nil, fmt.Errorf("store agent secret: %w", err)
	}
	if kind, err := s.cfg.Credentials.PinKind(id, ports.KindHost); err != nil || kind != ports.KindHost {
		return nil, fmt.Errorf("agent %s: runtime kind %q recorded, want host (%v)", id, kind, err)
	}
	// The id in argv makes the process recognisable in ps and to adopt.
	// Its own tmux server and session files: agents on one host never see,
	// attach to or adopt each other's sessions.
	tmpDir := AgentTmpDir(s.pidPath(id))
	tmpEnv, err := agentTmpEnv(tmpDir)
	if err != nil {
		return nil, err
	}
	u, err := s.userOf(id, tmpDir)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	a.user = u
	s.mu.Unlock()
	p, err := startAgent(agentLaunch{
		binary: s.binary, id: id, who: "host supervisor", user: u, tmpDir: tmpDir, secret: agentSecret,
		env:     agentEnv(os.Environ(), append(append([]string(nil), s.cfg.ExtraEnv...), tmpEnv...), id, s.cfg.ServerURL),
		logPath: s.logPath(id), pidPath: s.pidPath(id),
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("host agent started", "agent", id, "pid", p.pid, "log", s.logPath(id))
	return p, nil
}

// inheritedEnv are the only variables of the server's environment an agent
// inherits (and LC_*): an allowlist, because the server's environment holds
// what its workloads must not see (SECRETS_DIR, AIWG_SERVE_ENDPOINT,
// DOCKER_HOST, the operator token, whatever the operator's shell exports).
var inheritedEnv = map[string]bool{
	"PATH": true, "HOME": true, "LANG": true, "TERM": true, "TZ": true,
	"USER": true, "LOGNAME": true, "SHELL": true,
	// A benchmark's per-hop timeline (internal/hoptrace/hopenv): a
	// directory the agent writes its marks in; unset in production.
	"AGENTIC_HOP_TRACE": true,
	// The operator's choice of how soon host agents retry a lost link.
	"AGENT_RECONNECT_MIN": true,
}

func inherited(k string) bool { return inheritedEnv[k] || strings.HasPrefix(k, "LC_") }

// userOfAgent is who agent id runs as, nil if unknown or the server's user.
func (s *Supervisor) userOfAgent(id string) *AgentUser {
	u, _ := s.userOf(id, AgentTmpDir(s.pidPath(id)))
	return u
}

// userOf is who agent id runs as: nil for this server's user.
func (s *Supervisor) userOf(id, tmpDir string) (*AgentUser, error) {
	if s.cfg.Users == nil {
		return nil, nil
	}
	return s.cfg.Users.Acquire(id, UserHome(tmpDir))
}

// agentEnv is base (the server's environment, filtered), then extra, then
// the agent's own variables; a later entry for a key replaces an earlier one.
// The secret is not among them: it travels over a pipe (startAgent).
func agentEnv(base, extra []string, id, server string) []string {
	var order []string
	vals := make(map[string]string)
	add := func(kv string, filter bool) {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || (filter && !inherited(k)) {
			return
		}
		if _, seen := vals[k]; !seen {
			order = append(order, k)
		}
		vals[k] = kv
	}
	for _, kv := range base {
		add(kv, true)
	}
	for _, kv := range extra {
		add(kv, false)
	}
	add("AGENT_ID="+id, false)
	add("MANAGEMENT_SERVER="+server, false)
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, vals[k])
	}
	return env
}

// adopt returns the running agent named by id's pid file, or nil if there is
// none: no file, a dead pid, or a pid now used by some other process.
func (s *Supervisor) adopt(id string) *proc {
	path := s.pidPath(id)
	pid, mtime, err := readPidFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		s.log.Warn("ignoring unreadable pid file", "agent", id, "err", err)
		return nil
	}
	if why := s.notOurAgent(id, pid); why != "" {
		s.log.Info("ignoring stale pid file", "agent", id, "pid", pid, "reason", why)
		return nil
	}
	st, err := readProcStat(pid)
	if err != nil || st.dead() {
		return nil
	}
	s.log.Info("adopted running host agent", "agent", id, "pid", pid)
	return &proc{pid: pid, startTicks: st.startTicks, startedAt: mtime, adopted: true, userNS: agentNS(pid), orphanUIDs: s.userOfAgent(id).orphanUIDs()}
}

// notOurAgent says why pid is not a live agent process for id, or "".
func (s *Supervisor) notOurAgent(id string, pid int) string {
	u, err := s.userOf(id, AgentTmpDir(s.pidPath(id)))
	if err != nil {
		return err.Error()
	}
	return notAgent(pid, s.binary, id, uidOf(u))
}

// gone reports whether p has ended. An adopted process counts as gone when
// it no longer exists, is a zombie, or its pid now names another process.
func (p *proc) gone() bool {
	if p.exited != nil {
		select {
		case <-p.exited:
			return true
		default:
			return false
		}
	}
	if !processExists(p.pid) {
		return true
	}
	st, err := readProcStat(p.pid)
	return err != nil || st.dead() || st.startTicks != p.startTicks
}

// waitGone waits until p has ended (true) or ctx ends (false).
func waitGone(ctx context.Context, p *proc, poll time.Duration) bool {
	if p.exited != nil {
		select {
		case <-p.exited:
			return true
		case <-ctx.Done():
			return false
		}
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if p.gone() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

func (p *proc) exitDescription() string {
	if p.exited == nil {
		return "adopted process disappeared"
	}
	if p.waitErr == nil {
		return "exit status 0"
	}
	return p.waitErr.Error()
}

// Stop ends supervision without touching the agents: they keep running, and
// a later supervisor adopts them. It waits for the background goroutines.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	s.stopped = true
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

// StopAgents stops supervision, then terminates every agent: SIGTERM to its
// process group, SIGKILL after 5s, and removes the pid files. It also works
// on a supervisor that was never started (an operator tool), finding the
// agents through their pid files. If ctx ends first, the remaining agents
// are killed at once and ctx's error is returned.
func (s *Supervisor) StopAgents(ctx context.Context) error {
	s.Stop()
	if err := s.resolveBinary(); err != nil && len(s.ids) > 0 {
		return err
	}
	type target struct {
		id string
		p  *proc
	}
	var targets []target
	s.mu.Lock()
	for _, id := range s.ids {
		var p *proc
		if a := s.agents[id]; a != nil {
			p = a.cur
		}
		targets = append(targets, target{id, p})
	}
	s.mu.Unlock()

	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, tg := range targets {
		if tg.p == nil && s.cfg.StateDir != "" {
			tg.p = s.adopt(tg.id)
		}
		wg.Go(func() {
			if tg.p != nil {
				errs[i] = s.terminate(ctx, tg.id, tg.p)
			}
			if errs[i] == nil && s.cfg.StateDir != "" {
				if err := os.Remove(s.pidPath(tg.id)); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs[i] = err
				}
			}
		})
	}
	wg.Wait()
	s.mu.Lock()
	for _, a := range s.agents {
		if a.cur != nil && a.cur.gone() {
			a.cur = nil
		}
	}
	s.mu.Unlock()
	return errors.Join(errs...)
}

// terminate sends SIGTERM to p's process group and waits, escalating to
// SIGKILL after killAfter or when ctx ends.
func (s *Supervisor) terminate(ctx context.Context, id string, p *proc) error {
	signal := func(sig syscall.Signal) {
		if p.gone() {
			return
		}
		// Agents lead their own group (Setsid); signal the group so helpers
		// the agent started in it go too, but only if that still holds.
		target := p.pid
		if pg, err := syscall.Getpgid(p.pid); err == nil && pg == p.pid {
			target = -p.pid
		}
		if err := syscall.Kill(target, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			s.log.Warn("signal host agent", "agent", id, "pid", p.pid, "signal", sig, "err", err)
		}
	}
	s.log.Info("stopping host agent", "agent", id, "pid", p.pid)
	signal(syscall.SIGTERM)
	const poll = 20 * time.Millisecond
	killCtx, cancel := context.WithTimeout(ctx, s.killAfter)
	defer cancel()
	if waitGone(killCtx, p, poll) {
		return nil
	}
	s.log.Warn("host agent ignored SIGTERM; killing", "agent", id, "pid", p.pid)
	signal(syscall.SIGKILL)
	// SIGKILL cannot be ignored; bound the wait anyway in case of a
	// process stuck in the kernel.
	waitCtx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if !waitGone(waitCtx, p, poll) {
		return fmt.Errorf("hostsup: %s (pid %d) did not exit after SIGKILL", id, p.pid)
	}
	return ctx.Err()
}

// Agents returns a snapshot of the supervised agents, in id order.
func (s *Supervisor) Agents() []HostAgent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]HostAgent, 0, len(s.agents))
	for _, id := range s.ids {
		a := s.agents[id]
		if a == nil {
			continue
		}
		h := HostAgent{ID: id, Restarts: a.restarts}
		if p := a.cur; p != nil {
			h.PID, h.Adopted, h.StartedAt = p.pid, p.adopted, p.startedAt
		}
		out = append(out, h)
	}
	return out
}
