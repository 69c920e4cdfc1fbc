package docker

// Hibernation on Docker keeps the filesystem, not the memory
// (Capabilities().Hibernate is ports.HibernateFilesystem).
//
// Hibernate stops the container (SIGTERM, then SIGKILL after StopTimeout,
// as Stop) and keeps it: its writable layer, with every file written
// inside, stays on the engine; its memory and CPU are freed and its
// processes end. Wake starts the same container again: the processes start
// afresh and the agent reconnects under the same identity and secret, as
// after Start. SavedBytes is the writable layer's size on disk (the
// engine's SizeRw), read once the container has stopped.
//
// That a container is hibernated rather than stopped is kept in a marker
// file beside its agent secret, in Config.SecretDir
// (<owner>.<name>.hibernated, JSON: mode, time, bytes and the container's
// id): labels cannot change after create, and the secret directory is
// already what a restarted server needs to start its containers again, so
// the marker survives restarts of the server and of the engine alike. A
// container is reported ports.EnvHibernated while it has a marker naming
// its id and does not run; a marker naming another container (the name
// reused after a removal behind the server's back) is ignored. Destroy
// removes the marker with the container.
//
// Why not the memory (CRIU): dockerd checkpoints only when started with
// --experimental and criu works on the host, and neither holds in general.
// On the machines this was built on (Debian 12's criu 3.17.1 on a 6.18
// kernel) every dump fails before touching the container: "vdso:
// Unexpected rt vDSO area bounds" (kernels from 6.13 split the vvar
// mapping, which criu understands from 4.1 on). Even where criu works, the
// agent holds its link to the server open (a unix socket mounted in, or
// established TCP), which criu refuses to dump unless told to
// (--ext-unix-sk, --tcp-established) and dockerd's checkpoint API cannot
// tell it; a memory mode needs the agent to drop its link before the dump
// and redial after the restore. Until both hold the adapter never claims
// the memory mode.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// hibernationMarker is the content of an environment's marker file.
type hibernationMarker struct {
	Mode      ports.HibernateMode `json:"mode"`
	At        time.Time           `json:"at"`
	Bytes     int64               `json:"bytes"`
	Container string              `json:"container"`
}

// HibernationFile is where the marker of a hibernated environment is kept.
func (r *Runtime) HibernationFile(name string) string {
	return filepath.Join(r.cfg.SecretDir, r.cfg.Owner+"."+name+".hibernated")
}

// errNoMarker is an environment without a hibernation marker.
var errNoMarker = errors.New("no hibernation marker")

// readMarker returns name's marker: errNoMarker if there is none, another
// error if it cannot be read or parsed.
func (r *Runtime) readMarker(name string) (hibernationMarker, error) {
	var m hibernationMarker
	b, err := os.ReadFile(r.HibernationFile(name))
	if errors.Is(err, fs.ErrNotExist) {
		return m, errNoMarker
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("hibernation marker %s: %w", r.HibernationFile(name), err)
	}
	if m.Container == "" || m.At.IsZero() || m.Mode != ports.HibernateFilesystem {
		return m, fmt.Errorf("hibernation marker %s: incomplete", r.HibernationFile(name))
	}
	return m, nil
}

func (r *Runtime) writeMarker(name string, m hibernationMarker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(r.cfg.SecretDir, 0o700); err != nil {
		return fmt.Errorf("docker: state dir: %w", err)
	}
	if err := fsatomic.WriteFile(r.HibernationFile(name), b, 0o600); err != nil {
		return fmt.Errorf("docker: hibernation marker: %w", err)
	}
	return nil
}

func (r *Runtime) removeMarker(name string) error {
	if err := os.Remove(r.HibernationFile(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("docker: hibernation marker: %w", err)
	}
	return nil
}

// markHibernated turns env, just read from the engine, into a hibernated
// one when its container does not run and has a marker naming it. An
// unreadable marker still says hibernated, with the reason in Detail: Wake
// then fails with ports.ErrSavedStateLost.
func (r *Runtime) markHibernated(env ports.Environment) ports.Environment {
	if env.State == ports.EnvRunning || env.State == ports.EnvPaused || env.Name == "" {
		return env
	}
	m, err := r.readMarker(env.Name)
	switch {
	case errors.Is(err, errNoMarker):
		return env
	case err != nil:
		env.State, env.Detail = ports.EnvHibernated, "saved state unusable: "+err.Error()
		return env
	case m.Container != env.RuntimeID:
		return env // another container's: the name was reused
	}
	env.State, env.Detail = ports.EnvHibernated, ""
	env.HibernatedAt, env.SavedBytes = m.At, m.Bytes
	return env
}

// Hibernate implements ports.Runtime: a running container is stopped and
// kept, marked hibernated (see the top of this file). A hibernated one
// returns its hibernation unchanged; any other state is refused.
func (r *Runtime) Hibernate(ctx context.Context, name string) (ports.Hibernation, error) {
	id, err := r.find(ctx, name)
	if err != nil {
		return ports.Hibernation{}, err
	}
	c, err := r.cli.ContainerInspect(ctx, id)
	if err != nil {
		return ports.Hibernation{}, r.idErr("inspect", name, err)
	}
	env := r.markHibernated(toEnv(c))
	switch env.State {
	case ports.EnvHibernated:
		if env.Detail != "" {
			return ports.Hibernation{}, fmt.Errorf("docker hibernate %s: %w: %s", name, ports.ErrSavedStateLost, env.Detail)
		}
		return ports.Hibernation{Mode: ports.HibernateFilesystem, Bytes: env.SavedBytes, At: env.HibernatedAt}, nil
	case ports.EnvRunning:
	default:
		return ports.Hibernation{}, fmt.Errorf("docker hibernate %s: the environment is %s; only a running one can hibernate", name, env.State)
	}

	// The marker first: a server that dies during the stop leaves a
	// stopped container that is hibernated, never one that is neither.
	// While the container still runs the marker means nothing.
	m := hibernationMarker{Mode: ports.HibernateFilesystem, At: time.Now().UTC(), Container: id}
	if err := r.writeMarker(name, m); err != nil {
		return ports.Hibernation{}, err
	}
	secs := int((r.cfg.StopTimeout + time.Second - 1) / time.Second)
	if err := r.cli.ContainerStop(ctx, id, container.StopOptions{Timeout: &secs}); err != nil {
		// The stop may have happened all the same (ctx ended while the
		// engine stopped it): a container that stopped keeps its marker.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if c, ierr := r.cli.ContainerInspect(cctx, id); ierr != nil || c.State == nil || c.State.Running {
			_ = r.removeMarker(name)
		}
		return ports.Hibernation{}, r.idErr("hibernate (stop)", name, err)
	}
	// What the engine keeps of it: its writable layer.
	c, _, err = r.cli.ContainerInspectWithRaw(ctx, id, true)
	if err != nil {
		return ports.Hibernation{}, r.idErr("inspect", name, err)
	}
	if c.SizeRw != nil {
		m.Bytes = *c.SizeRw
	}
	if err := r.writeMarker(name, m); err != nil {
		return ports.Hibernation{}, err
	}
	return ports.Hibernation{Mode: m.Mode, Bytes: m.Bytes, At: m.At}, nil
}

// Wake implements ports.Runtime: a hibernated container is started again
// (its processes afresh; its agent reconnects with the same identity and
// secret) and its marker removed. A running one is left as it is. A
// container without a usable marker, whose agent secret is gone, or that
// was removed behind the server's back while hibernated, cannot be woken:
// ports.ErrSavedStateLost.
func (r *Runtime) Wake(ctx context.Context, name string) error {
	id, err := r.find(ctx, name)
	if errors.Is(err, ports.ErrEnvNotFound) {
		if _, merr := r.readMarker(name); !errors.Is(merr, errNoMarker) {
			return fmt.Errorf("docker wake %s: %w: its container was removed (%w)", name, ports.ErrSavedStateLost, err)
		}
	}
	if err != nil {
		return err
	}
	c, err := r.cli.ContainerInspect(ctx, id)
	if err != nil {
		return r.idErr("inspect", name, err)
	}
	env := r.markHibernated(toEnv(c))
	switch {
	case env.State == ports.EnvRunning:
		return r.removeMarker(name)
	case env.State == ports.EnvPaused:
		return fmt.Errorf("docker wake %s: the environment is paused, not hibernated (Resume it)", name)
	case env.State != ports.EnvHibernated:
		return fmt.Errorf("docker wake %s: %w: the environment is %s, not hibernated (no marker %s)", name, ports.ErrSavedStateLost, env.State, r.HibernationFile(name))
	case env.Detail != "":
		return fmt.Errorf("docker wake %s: %w: %s", name, ports.ErrSavedStateLost, env.Detail)
	}
	// What the host keeps for it (the agent's secret, a read-only root's
	// identity) is bind-mounted: without it the engine would refuse the
	// start, and the agent could not prove who it is anyway.
	if c.HostConfig != nil {
		for _, m := range c.HostConfig.Mounts {
			if !strings.HasPrefix(m.Source, r.cfg.SecretDir+string(filepath.Separator)) {
				continue
			}
			if _, err := os.Stat(m.Source); err != nil {
				return fmt.Errorf("docker wake %s: %w: what the agent needs at %s: %w", name, ports.ErrSavedStateLost, m.Target, err)
			}
		}
	}
	if err := r.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		return r.idErr("wake (start)", name, err)
	}
	return r.removeMarker(name)
}
