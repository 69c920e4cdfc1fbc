package docker

// Whether this engine can hibernate a container with its memory (CRIU):
// dockerd checkpoints only when started with --experimental, and then
// only if the criu in its PATH dumps and restores what environments run
// here. On the machines this was built on each of these failed in turn
// (docs/benchmarks.md, "CRIU 4.1.1 tried"): bookworm's criu 3.17 on a
// kernel >= 6.13 (vDSO), a non-root process where root lacks
// CAP_SYS_RESOURCE (criu's rlimits), a TCP listener on a kernel >= 6.16
// (SO_PASSCRED refused; scripts/criu patches both), and the restore of an
// --init container whose docker-init is a symlink (dockerd --init-path).
// A flag or a version says none of that, so the adapter tries: once per
// engine (by its ID), in the background after the first Ping that finds
// it experimental, it checkpoints and restores a tiny container made as
// environments are (non-root, behind the engine's init, no capabilities,
// no network) running a TCP listener, as a dev server would. Until that
// has worked the capability stays filesystem, never claimed stronger than
// it is; start-up does not wait for the 1-3 s it takes. A failure is
// logged once, with criu's reason, and not tried again until the server
// restarts.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/checkpoint"
	"github.com/docker/docker/api/types/container"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// probeTimeout bounds the whole probe.
const probeTimeout = 2 * time.Minute

// LabelProbe marks the probe's container (its value the owner): never an
// environment, removed when found left by a probe that died.
const LabelProbe = "io.agentic-sandbox.criu-probe"

// criuState is what the adapter knows of an engine's checkpoints.
type criuState struct {
	engineID string
	done     bool  // the probe has ended
	err      error // why it failed (done); nil: memory hibernation works
}

// memoryMode reports whether hibernation keeps the memory on the engine
// as of the last Ping.
func (r *Runtime) memoryMode() bool {
	e := r.engine.Load()
	s := r.criu.Load()
	return e != nil && e.experimental && s != nil && s.engineID == e.id && s.done && s.err == nil
}

var _ ports.QuietLinkHibernator = (*Runtime)(nil)

// CheckpointProbe reports the probe of the engine last pinged: done once
// it has ended, and why memory hibernation does not work there (nil if
// it does). An engine that is not experimental is never probed: done,
// with that reason.
func (r *Runtime) CheckpointProbe() (done bool, err error) {
	e := r.engine.Load()
	if e == nil {
		return false, nil
	}
	if !e.experimental {
		return true, errors.New("dockerd runs without --experimental: no checkpoints")
	}
	s := r.criu.Load()
	if s == nil || s.engineID != e.id {
		return false, nil
	}
	return s.done, s.err
}

// maybeProbe starts the probe of engine e unless it was started already.
func (r *Runtime) maybeProbe(e *engineRuntimes) {
	if !e.experimental || e.id == "" {
		return
	}
	if s := r.criu.Load(); s != nil && s.engineID == e.id {
		return
	}
	started := &criuState{engineID: e.id}
	if !r.criu.CompareAndSwap(r.criu.Load(), started) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		t0 := time.Now()
		err := r.probeCheckpoint(ctx)
		r.criu.CompareAndSwap(started, &criuState{engineID: e.id, done: true, err: err})
		if err != nil {
			r.log().Warn("docker: the engine cannot checkpoint containers here; environments hibernate with their files only (hibernate: filesystem)",
				"engine", e.id, "err", err)
			return
		}
		r.log().Info("docker: the engine checkpoints containers with criu; environments hibernate with their memory (hibernate: memory)",
			"engine", e.id, "probe", time.Since(t0).Round(time.Millisecond))
	}()
}

func (r *Runtime) log() *slog.Logger {
	if r.cfg.Logger != nil {
		return r.cfg.Logger
	}
	return slog.Default()
}

// probeCheckpoint checkpoints and restores a tiny container made as an
// environment is, and checks it runs on after the restore.
func (r *Runtime) probeCheckpoint(ctx context.Context) error {
	if err := r.ensureDefaultImage(ctx); err != nil {
		return fmt.Errorf("probe image: %w", err)
	}
	r.removeProbes(ctx)
	init := true
	pids := int64(32)
	created, err := r.cli.ContainerCreate(ctx, &container.Config{
		Image: DefaultTag,
		User:  nobody,
		// A listener as well, as a dev server inside would be: criu
		// 4.1.1 cannot dump one on kernels from 6.16 unpatched.
		Cmd:    []string{"sh", "-c", "busybox httpd -p 127.0.0.1:8080 -h /tmp; i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.1; done"},
		Labels: map[string]string{LabelProbe: r.cfg.Owner},
	}, &container.HostConfig{
		NetworkMode: "none",
		Init:        &init,
		CapDrop:     []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges"},
		Resources:   container.Resources{PidsLimit: &pids},
	}, nil, nil, "")
	if err != nil {
		return fmt.Errorf("probe container: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = r.cli.ContainerRemove(cctx, created.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}()
	if err := r.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return fmt.Errorf("probe start: %w", err)
	}
	if err := r.checkpoint(ctx, created.ID, "probe"); err != nil {
		return err
	}
	r.unshareCheckpoint(created.ID, "probe")
	if err := r.restore(ctx, created.ID, "probe"); err != nil {
		return err
	}
	// Restored, it must run on (not die at its first instruction).
	time.Sleep(300 * time.Millisecond)
	c, err := r.cli.ContainerInspect(ctx, created.ID)
	if err != nil {
		return fmt.Errorf("probe inspect: %w", err)
	}
	if c.State == nil || !c.State.Running {
		return fmt.Errorf("the restored probe container is not running (%+v)", c.State)
	}
	return nil
}

// removeProbes removes probe containers of this owner left by a server
// that died while probing.
func (r *Runtime) removeProbes(ctx context.Context) {
	list, err := r.cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return
	}
	for _, c := range list {
		if c.Labels[LabelProbe] == r.cfg.Owner {
			_ = r.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		}
	}
}

// checkpoint dumps container id into checkpoint name and stops it. A dump
// that fails leaves the container running (criu thaws it); it is tried
// three times in all, a short while apart: a connection just opened to
// the outside (the agent redialling as its link was being ended) fails a
// dump without failing the next.
func (r *Runtime) checkpoint(ctx context.Context, id, name string) error {
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("checkpoint: %w (after %w)", ctx.Err(), err)
			case <-time.After(500 * time.Millisecond):
			}
			_ = r.cli.CheckpointDelete(ctx, id, checkpoint.DeleteOptions{CheckpointID: name})
		}
		err = r.cli.CheckpointCreate(ctx, id, checkpoint.CreateOptions{CheckpointID: name, Exit: true})
		if err == nil {
			return nil
		}
		if c, ierr := r.cli.ContainerInspect(ctx, id); ierr != nil || c.State == nil || !c.State.Running {
			break // not running any more: nothing to try again on
		}
	}
	return fmt.Errorf("checkpoint (criu dump): %w", err)
}

// checkpointDir is where dockerd keeps container id's checkpoint name
// (<root>/containers/<id>/checkpoints/<name>; the engine runs on this
// machine), "" when the engine's root is unknown.
func (r *Runtime) checkpointDir(id, name string) string {
	e := r.engine.Load()
	if e == nil || e.rootDir == "" {
		return ""
	}
	return filepath.Join(e.rootDir, "containers", id, "checkpoints", name)
}

// unshareCheckpoint adds a file of its own to a checkpoint just made.
// dockerd 20.10 fetches a checkpoint from containerd's content store as a
// tar and, to restore it, sends it back as a tar of the same bytes: until
// containerd's garbage collector has dropped the first (seconds, at
// random), the restore fails ("commit failed: content sha256:… already
// exists"). With one more file the tar is another: the restore goes at
// once. criu reads only the image files it knows. Where the file cannot
// be written (the engine's root unknown), restore's retries remain.
func (r *Runtime) unshareCheckpoint(id, name string) {
	dir := r.checkpointDir(id, name)
	if dir == "" {
		return
	}
	nonce := strconv.FormatInt(time.Now().UnixNano(), 10) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "agentic-saved"), []byte(nonce), 0o600); err != nil {
		r.log().Debug("docker: checkpoint left as the engine made it", "dir", dir, "err", err)
	}
}

// restore starts container id from checkpoint name. dockerd 20.10 with
// containerd 1.6 often fails a restore soon after a checkpoint ("failed
// to upload checkpoint to containerd: commit failed: content sha256:…
// already exists") and takes a later one: such a failure is tried again,
// a little later each time, for a few seconds.
func (r *Runtime) restore(ctx context.Context, id, name string) error {
	var err error
	for attempt := range 6 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("restore from checkpoint %s: %w (after %w)", name, ctx.Err(), err)
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		err = r.cli.ContainerStart(ctx, id, container.StartOptions{CheckpointID: name})
		if err == nil || !strings.Contains(err.Error(), "already exists") {
			break
		}
		r.log().Info("docker: restore refused while containerd still holds the checkpoint; trying again", "container", id, "checkpoint", name, "attempt", attempt+1)
	}
	if err != nil {
		return fmt.Errorf("restore from checkpoint %s (criu restore): %w", name, err)
	}
	return nil
}
