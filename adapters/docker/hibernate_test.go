package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Hibernation against a real dockerd is tested in cmd/internal/runtimetest
// (TestDocker/Hibernate); these need no engine.

func offlineIn(t *testing.T, secrets string) *Runtime {
	t.Helper()
	rt, err := New(Config{Host: "unix://" + filepath.Join(t.TempDir(), "none.sock"), SecretDir: secrets})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// Until a probe of its engine has checkpointed and restored a container
// (criu.go), the adapter claims the filesystem only and needs no quiet link.
func TestHibernateCapabilityIsFilesystem(t *testing.T) {
	rt := offline(t)
	if got := rt.Capabilities().Hibernate; got != ports.HibernateFilesystem {
		t.Errorf("Capabilities().Hibernate = %q, want filesystem (the memory needs a working criu: criu.go)", got)
	}
	if rt.memoryMode() {
		t.Error("memory mode before any probe")
	}
	if done, err := rt.CheckpointProbe(); done || err != nil {
		t.Errorf("CheckpointProbe of an engine never pinged: %v, %v", done, err)
	}
	// A probe that worked on another engine says nothing of this one.
	rt.engine.Store(&engineRuntimes{id: "B", experimental: true})
	rt.criu.Store(&criuState{engineID: "A", done: true})
	if rt.Capabilities().Hibernate != ports.HibernateFilesystem || rt.memoryMode() {
		t.Error("another engine's probe counted for this one")
	}
	rt.criu.Store(&criuState{engineID: "B", done: true})
	if rt.Capabilities().Hibernate != ports.HibernateMemory || !rt.memoryMode() {
		t.Error("this engine's probe worked, and the capability is not memory")
	}
}

// A failed restore loses the saved state only when the checkpoint's files
// are gone; the engine or criu failing with them there leaves it for the
// next Wake.
func TestRestoreLost(t *testing.T) {
	rt := offline(t)
	root := t.TempDir()
	rt.engine.Store(&engineRuntimes{id: "A", experimental: true, rootDir: root})
	dir := rt.checkpointDir("c1", "cp1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "inventory.img"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	engine := errors.New("Error response from daemon: failed to upload checkpoint to containerd: commit failed: content sha256:ab already exists")
	if why := rt.restoreLost("c1", "cp1", engine); why != "" {
		t.Errorf("an engine's failure with the checkpoint present: lost (%s)", why)
	}
	criu := errors.New("Error response from daemon: OCI runtime restore failed: criu failed: type RESTORE errno 0")
	if why := rt.restoreLost("c1", "cp1", criu); why != "" {
		t.Errorf("criu failing with the checkpoint's files there: lost (%s)", why)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if why := rt.restoreLost("c1", "cp1", engine); !strings.Contains(why, "files are gone") {
		t.Errorf("the checkpoint's files gone: %q", why)
	}
	// An engine whose folders cannot be looked at: by its words.
	rt.engine.Store(&engineRuntimes{id: "A", experimental: true})
	if why := rt.restoreLost("c1", "cp1", engine); why != "" {
		t.Errorf("an engine's failure, its folders unknown: lost (%s)", why)
	}
	gone := errors.New("Error response from daemon: checkpoint cp1 does not exist for container c1")
	if why := rt.restoreLost("c1", "cp1", gone); why == "" {
		t.Error("the engine saying the checkpoint does not exist: not lost")
	}
}

// HibernateQuiet asks for the quiet link only once it knows the
// container and decided to save its memory: an unreachable engine does
// not end the agent's link.
func TestHibernateQuietUnreachableEngine(t *testing.T) {
	rt := offline(t)
	rt.engine.Store(&engineRuntimes{id: "A", experimental: true})
	rt.criu.Store(&criuState{engineID: "A", done: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	asked := false
	_, err := rt.HibernateQuiet(ctx, "x", func(context.Context, ports.PlannedSave) (func(), error) { asked = true; return func() {}, nil })
	if !errors.Is(err, ports.ErrRuntimeUnavailable) || asked {
		t.Errorf("HibernateQuiet: %v (link asked for: %v), want ErrRuntimeUnavailable without it", err, asked)
	}
}

func TestHibernateUnreachableEngine(t *testing.T) {
	rt := offline(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rt.Hibernate(ctx, "x"); !errors.Is(err, ports.ErrRuntimeUnavailable) {
		t.Errorf("Hibernate: %v, want ErrRuntimeUnavailable", err)
	}
	if err := rt.Wake(ctx, "x"); !errors.Is(err, ports.ErrRuntimeUnavailable) {
		t.Errorf("Wake: %v, want ErrRuntimeUnavailable", err)
	}
}

// markHibernated: only a container that does not run and has a marker
// naming it is hibernated; the marker survives a new adapter (a restarted
// server) on the same directory; an unreadable one says why.
func TestMarkHibernated(t *testing.T) {
	dir := t.TempDir()
	rt := offlineIn(t, dir)
	at := time.Date(2026, 12, 5, 15, 0, 0, 0, time.UTC)
	stopped := ports.Environment{Name: "dev", RuntimeID: "c1", State: ports.EnvStopped, Detail: "exit code 0"}

	if got := rt.markHibernated(stopped); got.State != ports.EnvStopped {
		t.Errorf("without a marker: %s, want stopped", got.State)
	}
	if err := rt.writeMarker("dev", hibernationMarker{Mode: ports.HibernateFilesystem, At: at, Bytes: 4096, Container: "c1"}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(rt.HibernationFile("dev")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("marker %v, %v; want mode 0600", fi, err)
	}

	restarted := offlineIn(t, dir)
	got := restarted.markHibernated(stopped)
	if got.State != ports.EnvHibernated || !got.HibernatedAt.Equal(at) || got.SavedBytes != 4096 || got.Detail != "" {
		t.Errorf("with its marker: %+v, want hibernated at %s with 4096 bytes", got, at)
	}
	failed := stopped
	failed.State, failed.Detail = ports.EnvFailed, "exit code 137"
	if got := restarted.markHibernated(failed); got.State != ports.EnvHibernated {
		t.Errorf("killed after the stop timeout, with its marker: %s, want hibernated", got.State)
	}
	running := stopped
	running.State = ports.EnvRunning
	if got := restarted.markHibernated(running); got.State != ports.EnvRunning || !got.HibernatedAt.IsZero() {
		t.Errorf("running with a marker: %+v, want running", got)
	}
	reused := stopped
	reused.RuntimeID = "c2"
	if got := restarted.markHibernated(reused); got.State != ports.EnvStopped {
		t.Errorf("another container under the name: %s, want stopped", got.State)
	}
	if got := restarted.markHibernated(ports.Environment{Name: "other", RuntimeID: "c1", State: ports.EnvStopped}); got.State != ports.EnvStopped {
		t.Errorf("another environment: %s, want stopped", got.State)
	}
	// Another owner's markers are apart.
	otherOwner, err := New(Config{Owner: "ci-2", SecretDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer otherOwner.Close()
	if got := otherOwner.markHibernated(stopped); got.State != ports.EnvStopped {
		t.Errorf("another owner's adapter: %s, want stopped", got.State)
	}

	// A memory hibernation names its checkpoint.
	if err := rt.writeMarker("dev", hibernationMarker{Mode: ports.HibernateMemory, Checkpoint: "cp1", At: at, Bytes: 7 << 20, Container: "c1"}); err != nil {
		t.Fatal(err)
	}
	if got := rt.markHibernated(failed); got.State != ports.EnvHibernated || got.SavedBytes != 7<<20 || got.Detail != "" {
		t.Errorf("checkpointed (exit 137) with its marker: %+v, want hibernated with 7 MiB", got)
	}
	for _, corrupt := range []string{"{not json", `{"mode":"filesystem","bytes":1}`, `{"mode":"memory","at":"2026-12-05T15:00:00Z","container":"c1"}`} {
		if err := os.WriteFile(rt.HibernationFile("dev"), []byte(corrupt), 0o600); err != nil {
			t.Fatal(err)
		}
		got := rt.markHibernated(stopped)
		if got.State != ports.EnvHibernated || !strings.HasPrefix(got.Detail, "saved state unusable: ") {
			t.Errorf("marker %q: %+v, want hibernated with the reason its state is unusable", corrupt, got)
		}
	}
	if err := rt.removeMarker("dev"); err != nil {
		t.Fatal(err)
	}
	if err := rt.removeMarker("dev"); err != nil {
		t.Errorf("removing a missing marker: %v", err)
	}
	if got := rt.markHibernated(stopped); got.State != ports.EnvStopped {
		t.Errorf("after the marker's removal: %s", got.State)
	}
}

// A read-only root keeps a renamed agent's identity in a host directory
// beside its secret, not in a tmpfs a stop or a hibernation would empty.
func TestReadOnlyRootKeepsIdentityOnTheHost(t *testing.T) {
	rt := offline(t)
	spec := validSpec(t)
	spec.ReadOnlyRoot = true
	p, err := rt.validate(spec)
	if err != nil {
		t.Fatal(err)
	}
	_, host := rt.containerConfig(p, DefaultTag)
	var found bool
	for _, m := range host.Mounts {
		if m.Target == filepath.Dir(IdentityPath) {
			found = m.Source == rt.identityDir(spec.Name) && !m.ReadOnly
		}
	}
	if !found {
		t.Errorf("mounts %+v: want %s writable from %s", host.Mounts, filepath.Dir(IdentityPath), rt.identityDir(spec.Name))
	}
	if len(host.Tmpfs) != 1 || host.Tmpfs["/tmp"] == "" {
		t.Errorf("tmpfs %v, want /tmp alone", host.Tmpfs)
	}
}
