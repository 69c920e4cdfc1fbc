package docker

// Hibernation on Docker keeps the memory where the engine checkpoints
// containers (criu.go says when: Capabilities().Hibernate is then
// ports.HibernateMemory), else the filesystem only.
//
// With the memory, Hibernate checkpoints the container (criu dumps its
// processes, the container stops, its memory is freed) into a checkpoint
// the engine keeps with the container, and Wake starts it from that
// checkpoint: what ran inside goes on where it was, and the agent, whose
// link the server ended before the dump (HibernateQuiet: criu cannot
// dump a connection to the outside), redials under the same
// identity. SavedBytes is the checkpoint's size on disk. A restore that
// fails is never followed by a fresh start posing as a wake: with the
// checkpoint's files gone it is a saved state lost, with them there the
// container stays hibernated for the next Wake (restoreLost).
// Destroy removes the checkpoint with the container.
//
// With the filesystem, Hibernate stops the container (SIGTERM, then
// SIGKILL after StopTimeout, as Stop) and keeps it: its writable layer,
// with every file written inside, stays on the engine; its memory and CPU
// are freed and its processes end. Wake starts the same container again:
// the processes start afresh and the agent reconnects under the same
// identity and secret, as after Start. SavedBytes is the writable layer's
// size on disk (the engine's SizeRw), read once the container has stopped.
//
// That a container is hibernated rather than stopped is kept in a marker
// file beside its agent secret, in Config.SecretDir
// (<owner>.<name>.hibernated, JSON: mode, checkpoint, time, bytes and the
// container's id): labels cannot change after create, and the secret
// directory is already what a restarted server needs to start its
// containers again, so the marker survives restarts of the server and of
// the engine alike. A container is reported ports.EnvHibernated while it
// has a marker naming its id and does not run; a marker naming another
// container (the name reused after a removal behind the server's back) is
// ignored. Destroy removes the marker with the container.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/checkpoint"
	"github.com/docker/docker/api/types/container"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// hibernationMarker is the content of an environment's marker file.
type hibernationMarker struct {
	Mode ports.HibernateMode `json:"mode"`
	// Checkpoint names the engine's checkpoint of a memory hibernation.
	Checkpoint string    `json:"checkpoint,omitempty"`
	At         time.Time `json:"at"`
	Bytes      int64     `json:"bytes"`
	Container  string    `json:"container"`
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
	if m.Container == "" || m.At.IsZero() || (m.Mode != ports.HibernateFilesystem && (m.Mode != ports.HibernateMemory || m.Checkpoint == "")) {
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

// Hibernate implements ports.Runtime: a running container is
// checkpointed or stopped and kept, marked hibernated (see the top of this
// file). A hibernated one returns its hibernation unchanged; any other
// state is refused. Without a quiet link (HibernateQuiet), a checkpoint
// is tried with the agent's link up (criu then fails while it is).
func (r *Runtime) Hibernate(ctx context.Context, name string) (ports.Hibernation, error) {
	return r.HibernateQuiet(ctx, name, nil)
}

// HibernateQuiet implements ports.QuietLinkHibernator: Hibernate, the mode
// (memory or filesystem) decided once, here, for both the link and the
// save: the checkpoint probe (criu.go) may end at any moment, and a
// hibernation that asked for the link by one mode and saved by the other
// would fail. quiet is told the save before it is made: with the memory
// (no estimate: the use case counts the container's memory), it ends the
// agent's link before the checkpoint (criu cannot dump a connection to
// the outside) and the hold ends once the checkpoint is made or failed;
// with the filesystem, the estimate is the writable layer's size now, the
// measure SavedBytes takes once the container has stopped.
func (r *Runtime) HibernateQuiet(ctx context.Context, name string, quiet ports.QuietLink) (ports.Hibernation, error) {
	memory := r.memoryMode()
	id, err := r.find(ctx, name)
	if err != nil {
		return ports.Hibernation{}, err
	}
	// A filesystem save's estimate comes with this look (the engine walks
	// the writable layer for it).
	c, _, err := r.cli.ContainerInspectWithRaw(ctx, id, !memory && quiet != nil)
	if err != nil {
		return ports.Hibernation{}, r.idErr("inspect", name, err)
	}
	env := r.markHibernated(toEnv(c))
	switch env.State {
	case ports.EnvHibernated:
		if env.Detail != "" {
			return ports.Hibernation{}, fmt.Errorf("docker hibernate %s: %w: %s", name, ports.ErrSavedStateLost, env.Detail)
		}
		m, err := r.readMarker(name)
		if err != nil {
			return ports.Hibernation{}, fmt.Errorf("docker hibernate %s: %w: %w", name, ports.ErrSavedStateLost, err)
		}
		return ports.Hibernation{Mode: m.Mode, Bytes: env.SavedBytes, At: env.HibernatedAt}, nil
	case ports.EnvRunning:
	default:
		return ports.Hibernation{}, fmt.Errorf("docker hibernate %s: the environment is %s; only a running one can hibernate", name, env.State)
	}

	if quiet != nil {
		save := ports.PlannedSave{Mode: ports.HibernateMemory}
		if !memory {
			save.Mode = ports.HibernateFilesystem
			if c.SizeRw != nil {
				save.Bytes = *c.SizeRw
			}
		}
		release, err := quiet(ctx, save)
		if err != nil {
			return ports.Hibernation{}, fmt.Errorf("docker hibernate %s: %w", name, err)
		}
		defer release()
	}
	if memory {
		return r.hibernateMemory(ctx, name, id)
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
	m, err := r.readMarker(name)
	if err != nil {
		return fmt.Errorf("docker wake %s: %w: %w", name, ports.ErrSavedStateLost, err)
	}
	if m.Mode == ports.HibernateMemory {
		if err := r.restore(ctx, id, m.Checkpoint); err != nil {
			if why := r.restoreLost(id, m.Checkpoint, err); why != "" {
				return fmt.Errorf("docker wake %s: %w: %s: %w", name, ports.ErrSavedStateLost, why, err)
			}
			// The checkpoint is still there: the container stays
			// hibernated for the next Wake.
			return fmt.Errorf("docker wake %s: %w", name, err)
		}
		// Woken, the checkpoint is spent: its disk goes back.
		r.deleteCheckpoint(ctx, id, m.Checkpoint)
		return r.removeMarker(name)
	}
	if err := r.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		return r.idErr("wake (start)", name, err)
	}
	return r.removeMarker(name)
}

// restoreLost says why a restore of container id from checkpoint cp that
// failed with err lost the saved state, "" if it did not: the
// checkpoint's files gone (removed behind the engine's back, or the
// engine does not know it). With its files there, a failure is not taken
// for the state's: the engine failing (down, containerd busy) or criu
// failing on this host for a while (a cgroup's limit, a resource taken)
// passes, and criu's images carry no checksum that could tell a garbled
// one apart; the environment stays hibernated, the error shown, and each
// wake tries again until it works or the environment is deleted.
func (r *Runtime) restoreLost(id, cp string, err error) string {
	if dir := r.checkpointDir(id, cp); dir != "" {
		if _, serr := os.Stat(filepath.Join(dir, "inventory.img")); serr != nil {
			return "its checkpoint's files are gone (" + serr.Error() + ")"
		}
		return ""
	}
	// An engine whose folders cannot be looked at here: by its words.
	if cerrdefs.IsNotFound(err) || strings.Contains(err.Error(), "does not exist for container") {
		return "the engine does not have its checkpoint"
	}
	return ""
}

// hibernateMemory checkpoints running container id of environment name
// (its agent's link ended: HibernateQuiet).
func (r *Runtime) hibernateMemory(ctx context.Context, name, id string) (ports.Hibernation, error) {
	at := time.Now().UTC()
	m := hibernationMarker{Mode: ports.HibernateMemory, At: at, Container: id,
		Checkpoint: "agentic-" + strconv.FormatInt(at.UnixNano(), 36)}
	// The marker first, as for the filesystem: a server dying during the
	// dump leaves a stopped container that is hibernated (or, the dump
	// not done, a restore without its checkpoint: a saved state lost).
	if err := r.writeMarker(name, m); err != nil {
		return ports.Hibernation{}, err
	}
	if err := r.checkpoint(ctx, id, m.Checkpoint); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if c, ierr := r.cli.ContainerInspect(cctx, id); ierr != nil || c.State == nil || c.State.Running {
			_ = r.removeMarker(name)
		}
		return ports.Hibernation{}, fmt.Errorf("docker hibernate %s: %w", name, err)
	}
	r.unshareCheckpoint(id, m.Checkpoint)
	m.Bytes = r.checkpointBytes(id, m.Checkpoint)
	if err := r.writeMarker(name, m); err != nil {
		return ports.Hibernation{}, err
	}
	return ports.Hibernation{Mode: m.Mode, Bytes: m.Bytes, At: m.At}, nil
}

// checkpointBytes is the size on disk of container id's checkpoint name
// (checkpointDir), 0 if it cannot be read.
func (r *Runtime) checkpointBytes(id, name string) int64 {
	dir := r.checkpointDir(id, name)
	if dir == "" {
		return 0
	}
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// deleteCheckpoint removes a checkpoint no longer needed; a failure only
// leaves its disk taken until the container is removed.
func (r *Runtime) deleteCheckpoint(ctx context.Context, id, name string) {
	if err := r.cli.CheckpointDelete(ctx, id, checkpoint.DeleteOptions{CheckpointID: name}); err != nil {
		r.log().Warn("docker: a spent checkpoint not deleted; it goes with its container", "container", id, "checkpoint", name, "err", err)
	}
}

// hibernateMode is the capability: memory once the engine's probe worked.
func (r *Runtime) hibernateMode() ports.HibernateMode {
	if r.memoryMode() {
		return ports.HibernateMemory
	}
	return ports.HibernateFilesystem
}
