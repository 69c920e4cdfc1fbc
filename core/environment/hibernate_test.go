package environment

import (
	"context"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The fake runtime hibernates by state alone: what it saved is a number.
func (r *fakeRuntime) Hibernate(_ context.Context, n string) (ports.Hibernation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.envs[n]
	if !ok {
		return ports.Hibernation{}, ports.ErrEnvNotFound
	}
	if r.caps == nil || r.caps.Hibernate.Of() == ports.HibernateNone {
		return ports.Hibernation{}, ports.ErrUnsupported
	}
	e.State, e.HibernatedAt, e.SavedBytes = ports.EnvHibernated, time.Now(), 4096
	r.envs[n] = e
	return ports.Hibernation{Mode: r.caps.Hibernate, Bytes: e.SavedBytes, At: e.HibernatedAt}, nil
}

func (r *fakeRuntime) Wake(_ context.Context, n string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.envs[n]
	if !ok {
		return ports.ErrEnvNotFound
	}
	e.State, e.HibernatedAt, e.SavedBytes = ports.EnvRunning, time.Time{}, 0
	r.envs[n] = e
	return nil
}
