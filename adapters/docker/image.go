package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"

	"github.com/agentic-sandbox/agentic-sandbox/internal/busyboxroot"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// ensureImage returns the image to create from, building the default one
// or pulling a missing one as configured.
func (r *Runtime) ensureImage(ctx context.Context, ref string) (string, error) {
	if ref == "" {
		return DefaultTag, r.ensureDefaultImage(ctx)
	}
	_, err := r.cli.ImageInspect(ctx, ref)
	if err == nil {
		return ref, nil
	}
	if cerrdefs.IsInvalidArgument(err) {
		return "", fmt.Errorf("%w: image %q: %w", ports.ErrInvalidSpec, ref, err)
	}
	if !cerrdefs.IsNotFound(err) {
		return "", engineErr("image inspect", err)
	}
	if !r.cfg.PullMissing {
		return "", invalid("image %s is not on the engine", ref)
	}
	body, err := r.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) || cerrdefs.IsInvalidArgument(err) {
			return "", fmt.Errorf("%w: pull %s: %w", ports.ErrInvalidSpec, ref, err)
		}
		return "", engineErr("pull "+ref, err)
	}
	if err := readProgress(body); err != nil {
		return "", fmt.Errorf("%w: pull %s: %w", ports.ErrInvalidSpec, ref, err)
	}
	return ref, nil
}

// ensureDefaultImage imports DefaultTag once; the lock makes concurrent
// first Provisions wait for one import instead of racing several.
func (r *Runtime) ensureDefaultImage(ctx context.Context) error {
	r.imageMu.Lock()
	defer r.imageMu.Unlock()
	_, err := r.cli.ImageInspect(ctx, DefaultTag)
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return engineErr("image inspect", err)
	}
	bb, err := findBusybox(r.cfg.Busybox)
	if err != nil {
		return fmt.Errorf("%w: default image: %w", ports.ErrRuntimeUnavailable, err)
	}
	rootfs, err := BusyboxRootfs(bb)
	if err != nil {
		return fmt.Errorf("%w: default image: %w", ports.ErrRuntimeUnavailable, err)
	}
	body, err := r.cli.ImageImport(ctx, image.ImportSource{Source: bytes.NewReader(rootfs), SourceName: "-"}, DefaultTag, image.ImportOptions{
		Message: "agentic-sandbox default image: static busybox",
		Changes: []string{
			"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			`CMD ["/bin/sh"]`,
		},
	})
	if err != nil {
		return engineErr("image import", err)
	}
	if err := readProgress(body); err != nil {
		return engineErr("image import", err)
	}
	return nil
}

// readProgress drains an engine progress stream and returns the error it
// reports, if any (the HTTP status is 200 even when the operation fails).
func readProgress(body io.ReadCloser) error {
	defer body.Close()
	dec := json.NewDecoder(body)
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			return errors.New(m.ErrorDetail.Message)
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}

// findBusybox returns a statically linked busybox: the image has no libc.
func findBusybox(want string) (string, error) { return busyboxroot.Find(want) }

// isStatic reports whether the ELF executable at path needs no dynamic
// loader: images need not have a libc.
func isStatic(path string) (bool, error) { return busyboxroot.IsStatic(path) }

// BusyboxRootfs is the tarball of the default image: busybox at /bin/busybox,
// a symlink per applet, the usual directories, and passwd/group entries for
// root and nobody (internal/busyboxroot, shared with the image archives of
// `make agent-image`).
func BusyboxRootfs(busybox string) ([]byte, error) { return busyboxroot.Rootfs(busybox) }
