package hostsup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/internal/keylock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// RuntimeConfig configures the host runtime: environments that are plain
// agent processes on this machine, one directory each under StateDir.
type RuntimeConfig struct {
	// StateDir holds <name>/{env.json,agent.pid,agent.log,work}; created 0700.
	StateDir string
	Logger   *slog.Logger
	// ExtraEnv is added to every agent's environment (KEY=VALUE).
	ExtraEnv []string
	// StopTimeout is SIGTERM → SIGKILL in Stop and Destroy (default 5s).
	StopTimeout time.Duration
	// Users, when set (a root server), gives each environment users of its
	// own (see AgentUser); their work dir is then in their own temp dir,
	// outside the state dir.
	Users *Users
}

// Runtime is ports.Runtime for the host tier. Like the supervisor's agents,
// environment agents run in their own session and outlive the server; a
// restarted server finds them through their pid files (Recover).
type Runtime struct {
	cfg RuntimeConfig
	log *slog.Logger

	mu    sync.Mutex
	procs map[string]*proc // live or last known process per environment
	// locks serialises operations per environment name.
	locks keylock.Map
}

var _ ports.Runtime = (*Runtime)(nil)

// envRecord is what StateDir/<name>/env.json keeps: enough to restart the
// agent after Stop or a server restart. It holds the agent's secret, so the
// file is 0600 in a 0700 directory.
type envRecord struct {
	Name      string            `json:"name"`
	Binary    string            `json:"binary"`
	ServerURL string            `json:"server_url"`
	Secret    string            `json:"secret"`
	CreatedAt time.Time         `json:"created_at"`
	Labels    map[string]string `json:"labels,omitempty"`
	// Stopped is set by Stop and cleared by Start: a process that is gone
	// without it crashed.
	Stopped bool `json:"stopped"`
}

// NewRuntime returns the host runtime; nothing happens before a call.
func NewRuntime(cfg RuntimeConfig) *Runtime {
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 5 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Runtime{
		cfg:   cfg,
		log:   log.With("component", "host-runtime"),
		procs: make(map[string]*proc),
	}
}

// RuntimeName is this runtime's catalog name, Capabilities().Runtime and Environment.Runtime.
const RuntimeName = "host"

// Capabilities declares the host runtime: processes share the host;
// nothing is limited or isolated.
func (r *Runtime) Capabilities() ports.RuntimeCapabilities {
	return ports.RuntimeCapabilities{
		Runtime:      RuntimeName,
		Isolation:    ports.KindHost,
		NetworkModes: []ports.NetworkMode{ports.NetworkHost},
	}
}

// Ping checks that the state directory is usable.
func (r *Runtime) Ping(ctx context.Context) error {
	if err := os.MkdirAll(r.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("%w: host state dir: %v", ports.ErrRuntimeUnavailable, err)
	}
	return nil
}

func (r *Runtime) validate(spec ports.EnvironmentSpec) error {
	if err := r.Capabilities().CheckSpec(spec); err != nil {
		return err
	}
	switch {
	case spec.Agent.Binary == "":
		return fmt.Errorf("%w: no agent binary", ports.ErrInvalidSpec)
	case spec.Agent.ServerURL == "":
		return fmt.Errorf("%w: no management server URL", ports.ErrInvalidSpec)
	}
	return nil
}

// Hibernate is not offered: the host's processes cannot be saved apart
// from the host (Capabilities().Hibernate is none).
func (r *Runtime) Hibernate(context.Context, string) (ports.Hibernation, error) {
	return ports.Hibernation{}, fmt.Errorf("%w: the host runtime cannot hibernate", ports.ErrUnsupported)
}

// Wake is not offered either.
func (r *Runtime) Wake(context.Context, string) error {
	return fmt.Errorf("%w: the host runtime cannot hibernate", ports.ErrUnsupported)
}

// Pause is not offered: host processes share the host's cgroup.
func (r *Runtime) Pause(context.Context, string) error {
	return fmt.Errorf("%w: the host runtime cannot pause", ports.ErrUnsupported)
}

// Resume is not offered either.
func (r *Runtime) Resume(context.Context, string) error {
	return fmt.Errorf("%w: the host runtime cannot pause", ports.ErrUnsupported)
}

func (r *Runtime) lock(name string) func() { return r.locks.Lock(name) }

func (r *Runtime) dir(name string) string { return filepath.Join(r.cfg.StateDir, name) }

// tmpDir is an environment's temp dir and tmux server directory.
func (r *Runtime) tmpDir(name string) string { return AgentTmpDir(r.dir(name)) }

func (r *Runtime) recPath(name string) string { return filepath.Join(r.dir(name), "env.json") }
func (r *Runtime) pidPath(name string) string { return filepath.Join(r.dir(name), "agent.pid") }
func (r *Runtime) logPath(name string) string { return filepath.Join(r.dir(name), "agent.log") }

// Provision makes the environment's directory and starts its agent.
func (r *Runtime) Provision(ctx context.Context, spec ports.EnvironmentSpec) (ports.Environment, error) {
	if err := r.validate(spec); err != nil {
		return ports.Environment{}, err
	}
	if err := ctx.Err(); err != nil {
		return ports.Environment{}, err
	}
	bin, err := exec.LookPath(spec.Agent.Binary)
	if err != nil {
		return ports.Environment{}, fmt.Errorf("%w: agent binary: %v", ports.ErrInvalidSpec, err)
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return ports.Environment{}, err
	}
	defer r.lock(spec.Name)()
	progress := spec.Progress
	if progress == nil {
		progress = func(string) {}
	}
	if err := os.MkdirAll(r.cfg.StateDir, 0o700); err != nil {
		return ports.Environment{}, fmt.Errorf("%w: %v", ports.ErrRuntimeUnavailable, err)
	}
	// Mkdir, not MkdirAll: it is the atomic claim on the name.
	if err := os.Mkdir(r.dir(spec.Name), 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return ports.Environment{}, fmt.Errorf("%w: %s", ports.ErrEnvExists, spec.Name)
		}
		return ports.Environment{}, err
	}
	rec := envRecord{Name: spec.Name, Binary: bin, ServerURL: spec.Agent.ServerURL, Secret: spec.Agent.Secret,
		CreatedAt: time.Now().UTC(), Labels: spec.Labels}
	cleanup := func() { _ = os.RemoveAll(r.dir(spec.Name)) }
	if err := os.Mkdir(filepath.Join(r.dir(spec.Name), "work"), 0o700); err != nil {
		cleanup()
		return ports.Environment{}, err
	}
	if err := writeRecord(r.recPath(spec.Name), rec); err != nil {
		cleanup()
		return ports.Environment{}, err
	}
	progress("starting agent process")
	p, err := r.spawn(rec)
	if err != nil {
		cleanup()
		return ports.Environment{}, err
	}
	progress(fmt.Sprintf("agent process %d running", p.pid))
	return r.environment(rec, p), nil
}

// spawn starts rec's agent in its own session, in the environment's work dir.
func (r *Runtime) spawn(rec envRecord) (*proc, error) {
	// The environment's own tmux server and temp files: its sessions are
	// apart from every other agent's and end with it.
	tmpEnv, err := agentTmpEnv(r.tmpDir(rec.Name))
	if err != nil {
		return nil, err
	}
	extra := append(append(append([]string(nil), r.cfg.ExtraEnv...), "AGENT_RUNTIME="+string(ports.KindHost),
		// Where a rename (a pool member taken) is kept, so that a restarted
		// agent comes back under the name it was given.
		"AGENT_IDENTITY_FILE="+filepath.Join(r.tmpDir(rec.Name), ".agent-identity")), tmpEnv...)
	u, err := r.userOf(rec.Name)
	if err != nil {
		return nil, err
	}
	p, err := startAgent(agentLaunch{
		binary: rec.Binary, id: rec.Name, who: "host runtime", user: u, tmpDir: r.tmpDir(rec.Name), secret: rec.Secret,
		env:     agentEnv(os.Environ(), extra, rec.Name, rec.ServerURL),
		dir:     filepath.Join(r.dir(rec.Name), "work"),
		logPath: r.logPath(rec.Name), pidPath: r.pidPath(rec.Name),
	})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.procs[rec.Name] = p
	r.mu.Unlock()
	r.log.Info("environment agent started", "env", rec.Name, "pid", p.pid)
	return p, nil
}

// usersKey names an environment's users apart from the supervisor's agents.
func usersKey(name string) string { return "env/" + name }

// userOf is who name's agent runs as: nil for this server's user.
func (r *Runtime) userOf(name string) (*AgentUser, error) {
	if r.cfg.Users == nil {
		return nil, nil
	}
	return r.cfg.Users.Acquire(usersKey(name), UserHome(r.tmpDir(name)))
}

// current returns the live agent process of name, or nil: the one this
// runtime spawned, or one named by the pid file that is still that agent.
func (r *Runtime) current(rec envRecord) *proc {
	r.mu.Lock()
	p := r.procs[rec.Name]
	r.mu.Unlock()
	if p != nil && p.exited != nil { // our child
		select {
		case <-p.exited:
			return nil // reaped: the pid file names nothing of ours
		default:
		}
		if !p.dying() {
			return p
		}
		// Dead but not yet reaped and its leftovers not yet ended: wait,
		// so that nothing of it meets its successor.
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
		}
		return nil
	}
	if p != nil && !p.gone() {
		return p
	}
	pid, mtime, err := readPidFile(r.pidPath(rec.Name))
	if err != nil {
		return nil
	}
	u, err := r.userOf(rec.Name)
	if err != nil || notAgent(pid, rec.Binary, rec.Name, uidOf(u)) != "" {
		return nil
	}
	st, err := readProcStat(pid)
	if err != nil || st.dead() {
		return nil
	}
	p = &proc{pid: pid, startTicks: st.startTicks, startedAt: mtime, adopted: true, userNS: agentNS(pid), orphanUIDs: u.orphanUIDs()}
	r.mu.Lock()
	r.procs[rec.Name] = p
	r.mu.Unlock()
	return p
}

func (r *Runtime) environment(rec envRecord, p *proc) ports.Environment {
	env := ports.Environment{
		Name: rec.Name, Runtime: RuntimeName, State: ports.EnvRunning, Network: ports.NetworkHost,
		CreatedAt: rec.CreatedAt, Labels: rec.Labels,
	}
	switch {
	case p != nil:
		env.RuntimeID = fmt.Sprint(p.pid)
	case rec.Stopped:
		env.State = ports.EnvStopped
	default:
		env.State = ports.EnvFailed
		env.Detail = "agent process exited"
		r.mu.Lock()
		last := r.procs[rec.Name]
		r.mu.Unlock()
		if last != nil {
			env.Detail = "agent process: " + last.exitDescription()
		}
	}
	return env
}

func (r *Runtime) load(name string) (envRecord, error) {
	if !ports.ValidEnvironmentName(name) {
		return envRecord{}, fmt.Errorf("%w: %q", ports.ErrEnvNotFound, name)
	}
	data, err := os.ReadFile(r.recPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return envRecord{}, fmt.Errorf("%w: %s", ports.ErrEnvNotFound, name)
	}
	if err != nil {
		return envRecord{}, err
	}
	var rec envRecord
	if err := json.Unmarshal(data, &rec); err != nil || rec.Name != name {
		return envRecord{}, fmt.Errorf("environment %s: unreadable record %s", name, r.recPath(name))
	}
	return rec, nil
}

// Start restarts a stopped (or crashed) environment's agent with its secret.
func (r *Runtime) Start(ctx context.Context, name string) error {
	defer r.lock(name)()
	rec, err := r.load(name)
	if err != nil {
		return err
	}
	if r.current(rec) != nil {
		return nil
	}
	rec.Stopped = false
	if err := writeRecord(r.recPath(name), rec); err != nil {
		return err
	}
	_, err = r.spawn(rec)
	return err
}

// Stop ends the agent (SIGTERM to its process group, SIGKILL after
// StopTimeout) and keeps the environment for Start.
func (r *Runtime) Stop(ctx context.Context, name string) error {
	defer r.lock(name)()
	rec, err := r.load(name)
	if err != nil {
		return err
	}
	rec.Stopped = true
	if err := writeRecord(r.recPath(name), rec); err != nil {
		return err
	}
	return r.terminate(ctx, rec)
}

func (r *Runtime) terminate(ctx context.Context, rec envRecord) error {
	p := r.current(rec)
	if p == nil {
		return nil
	}
	// The agent leads its own session and process group; its commands
	// that stay in that group go with it.
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	wait, cancel := context.WithTimeout(ctx, r.cfg.StopTimeout)
	defer cancel()
	if waitGone(wait, p, 50*time.Millisecond) {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	hard, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	if !waitGone(hard, p, 20*time.Millisecond) {
		return fmt.Errorf("agent %s (pid %d) survived SIGKILL", rec.Name, p.pid)
	}
	return nil
}

// Destroy stops the agent and removes the environment's directory.
func (r *Runtime) Destroy(ctx context.Context, name string) error {
	unlock := r.lock(name)
	defer unlock()
	rec, err := r.load(name)
	if err != nil {
		return err
	}
	if err := r.terminate(ctx, rec); err != nil {
		return err
	}
	// Sessions kept in tmux outlive the agent by design; not its
	// environment: every process of its users ends with it.
	if err := r.endUsers(ctx, name); err != nil {
		return err
	}
	if err := os.RemoveAll(r.tmpDir(name)); err != nil {
		return err
	}
	if err := os.RemoveAll(r.dir(name)); err != nil {
		return err
	}
	r.mu.Lock()
	delete(r.procs, name)
	r.mu.Unlock()
	return nil
}

// endUsers ends every process of name's users (its own; of a shared user
// only its tmux server and what runs in its namespaces) and frees them.
func (r *Runtime) endUsers(ctx context.Context, name string) error {
	u, err := r.userOf(name)
	if err != nil || u == nil {
		EndTmux(ctx, r.tmpDir(name), nil)
		return err
	}
	EndTmux(ctx, r.tmpDir(name), u)
	var errs []error
	if !u.Shared {
		errs = append(errs, KillUser(u.UID, u.GID))
	}
	errs = append(errs, KillUser(u.AgentUID, u.AgentGID))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return r.cfg.Users.Release(usersKey(name))
}

// Inspect reports the environment as its process stands now.
func (r *Runtime) Inspect(ctx context.Context, name string) (ports.Environment, error) {
	rec, err := r.load(name)
	if err != nil {
		return ports.Environment{}, err
	}
	return r.environment(rec, r.current(rec)), nil
}

// List returns every environment under StateDir, by name.
func (r *Runtime) List(ctx context.Context) ([]ports.Environment, error) {
	entries, err := os.ReadDir(r.cfg.StateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ports.Environment
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		rec, err := r.load(e.Name())
		if err != nil {
			if !errors.Is(err, ports.ErrEnvNotFound) {
				r.log.Warn("skipping environment", "dir", e.Name(), "err", err)
			}
			continue
		}
		out = append(out, r.environment(rec, r.current(rec)))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Recover finds the environments of an earlier run; their agents kept
// running (own session) and are adopted through their pid files.
func (r *Runtime) Recover(ctx context.Context) ([]ports.Environment, error) {
	return r.List(ctx)
}

func writeRecord(path string, rec envRecord) error {
	data, err := json.MarshalIndent(rec, "", "  ") //nolint:gosec // the record keeps the secret to restart the agent: 0600 in a 0700 dir
	if err != nil {
		return err
	}
	return fsatomic.WriteFile(path, append(data, '\n'), 0o600)
}
