package runtimetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/docker"
	"github.com/agentic-sandbox/agentic-sandbox/internal/secret"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// dockerHibernate: on a dockerd without --experimental the docker runtime
// hibernates by keeping the filesystem (with the memory where the engine
// checkpoints: e2e TestAContainerHibernatesWithItsMemoryAndWakesWhereItWas). A
// file written inside is there after a hibernation, a restart of the
// server (a new adapter on the same state directory) and a wake; the
// container does not run meanwhile and is reported hibernated with when
// and how much it keeps; the agent comes back under the same identity.
// A corrupt marker, or a container removed behind the server's back, is a
// saved state lost; Destroy removes the marker. It logs hibernate time,
// the saved size and wake → running → agent ready → first output.
func dockerHibernate(t *testing.T, d *dockerd) {
	ctx := context.Background()
	link := StartLink(t, linkDir(t))
	state := t.TempDir()
	cfg := docker.Config{Owner: "hib", StopTimeout: 5 * time.Second, SecretDir: state}
	rt := d.runtimeWith(t, cfg)
	if got := rt.Capabilities().Hibernate; got != ports.HibernateFilesystem {
		t.Fatalf("Capabilities().Hibernate = %q, want filesystem", got)
	}
	marker := func(name string) bool {
		_, err := os.Stat(rt.HibernationFile(name))
		return err == nil
	}

	env := provision(t, rt, envSpec(t, link, "hib-1"))
	before := waitStatus(t, link, "hib-1", patience, "ready")
	// Pinged (by the provision), this dockerd runs without --experimental: it is never probed.
	if done, err := rt.CheckpointProbe(); !done || err == nil || !strings.Contains(err.Error(), "--experimental") {
		t.Errorf("CheckpointProbe on a dockerd without --experimental: %v, %v; want done, saying why", done, err)
	}
	if out, code := runSh(t, link, "hib-1", "echo kept > /tmp/kept && dd if=/dev/urandom of=/tmp/blob bs=1024 count=256 2>/dev/null && echo written"); out != "written\n" || code != 0 {
		t.Fatalf("writing inside: %q exit %d", out, code)
	}

	t0 := time.Now()
	h, err := rt.Hibernate(ctx, "hib-1")
	hibernateTook := time.Since(t0)
	if err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	if h.Mode != ports.HibernateFilesystem || h.Bytes < 256<<10 || h.At.Before(t0.Add(-time.Second)) {
		t.Errorf("Hibernate returned %+v; want filesystem, at least the 256 KiB written, at about %s", h, t0)
	}
	c, err := d.cli.ContainerInspect(ctx, env.RuntimeID)
	if err != nil {
		t.Fatal(err)
	}
	if c.State.Running || c.State.Paused {
		t.Errorf("hibernated container is %s, want not running", c.State.Status)
	}
	waitStatus(t, link, "hib-1", patience, "disconnected")
	got, err := rt.Inspect(ctx, "hib-1")
	if err != nil || got.State != ports.EnvHibernated || !got.HibernatedAt.Equal(h.At) || got.SavedBytes != h.Bytes || got.Detail != "" {
		t.Errorf("Inspect after Hibernate: %+v, %v; want hibernated at %s with %d bytes", got, err, h.At, h.Bytes)
	}
	if again, err := rt.Hibernate(ctx, "hib-1"); err != nil || again.Mode != h.Mode || again.Bytes != h.Bytes || !again.At.Equal(h.At) {
		t.Errorf("Hibernate of a hibernated environment: %+v, %v; want the same hibernation %+v", again, err, h)
	}
	if err := rt.Pause(ctx, "hib-1"); err == nil {
		t.Error("Pause of a hibernated environment succeeded")
	}

	// A restarted server: a new adapter on the same state directory.
	restarted := d.runtimeWith(t, cfg)
	recovered, err := restarted.Recover(ctx)
	if err != nil || len(recovered) != 1 || recovered[0].State != ports.EnvHibernated ||
		!recovered[0].HibernatedAt.Equal(h.At) || recovered[0].SavedBytes != h.Bytes {
		t.Fatalf("Recover after Hibernate: %+v, %v; want hib-1 hibernated at %s with %d bytes", recovered, err, h.At, h.Bytes)
	}

	t1 := time.Now()
	if err := restarted.Wake(ctx, "hib-1"); err != nil {
		t.Fatalf("Wake: %v", err)
	}
	wakeRunning := time.Since(t1)
	var wakeReady time.Duration
	for {
		if info, ok := link.Service.Agent("hib-1"); ok && info.Status == "ready" && info.ConnectedAt.After(t1) {
			wakeReady = time.Since(t1)
			if info.ID != before.ID || info.Hostname != before.Hostname {
				t.Errorf("agent after Wake: %s on %s, want %s on %s", info.ID, info.Hostname, before.ID, before.Hostname)
			}
			break
		}
		if time.Since(t1) > patience {
			t.Fatalf("the agent did not reconnect within %v of Wake", patience)
		}
		time.Sleep(2 * time.Millisecond)
	}
	out, code := runSh(t, link, "hib-1", "cat /tmp/kept; wc -c < /tmp/blob")
	wakeOutput := time.Since(t1)
	if out != "kept\n262144\n" || code != 0 {
		t.Errorf("files after Wake: %q exit %d, want kept and the 262144 bytes", out, code)
	}
	got, err = rt.Inspect(ctx, "hib-1")
	if err != nil || got.State != ports.EnvRunning || !got.HibernatedAt.IsZero() || got.SavedBytes != 0 || marker("hib-1") {
		t.Errorf("Inspect after Wake: %+v, %v, marker left %v; want running, no hibernation", got, err, marker("hib-1"))
	}
	if err := rt.Wake(ctx, "hib-1"); err != nil {
		t.Errorf("Wake of a running environment: %v", err)
	}
	t.Logf("docker hibernate (filesystem) of the default image with 256 KiB written: hibernate %s, saved %d bytes (writable layer); "+
		"wake → running %s → agent ready %s → first output %s",
		hibernateTook.Round(time.Millisecond), h.Bytes, wakeRunning.Round(time.Millisecond),
		wakeReady.Round(time.Millisecond), wakeOutput.Round(time.Millisecond))

	// A corrupt marker: the saved state is lost, and says so.
	if _, err := rt.Hibernate(ctx, "hib-1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rt.HibernationFile("hib-1"), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := rt.Inspect(ctx, "hib-1"); err != nil || got.State != ports.EnvHibernated || !strings.Contains(got.Detail, "saved state unusable") {
		t.Errorf("Inspect with a corrupt marker: %+v, %v; want hibernated, its state unusable", got, err)
	}
	if err := rt.Wake(ctx, "hib-1"); !errors.Is(err, ports.ErrSavedStateLost) {
		t.Errorf("Wake with a corrupt marker: %v, want ErrSavedStateLost", err)
	}
	if c, err := d.cli.ContainerInspect(ctx, env.RuntimeID); err != nil || c.State.Running {
		t.Errorf("a refused Wake started the container (%v)", err)
	}
	if err := rt.Destroy(ctx, "hib-1"); err != nil {
		t.Fatal(err)
	}
	if marker("hib-1") || len(d.leftovers(t, "hib-1")) > 0 {
		t.Errorf("after Destroy: marker %v, containers %v", marker("hib-1"), d.leftovers(t, "hib-1"))
	}

	// Only a running environment hibernates; a stopped one has nothing to wake.
	provision(t, rt, envSpec(t, link, "hib-2"))
	if err := rt.Stop(ctx, "hib-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Hibernate(ctx, "hib-2"); err == nil || !strings.Contains(err.Error(), "only a running one") {
		t.Errorf("Hibernate of a stopped environment: %v, want refused", err)
	}
	if marker("hib-2") {
		t.Error("a refused Hibernate left a marker")
	}
	if err := rt.Wake(ctx, "hib-2"); !errors.Is(err, ports.ErrSavedStateLost) {
		t.Errorf("Wake of a stopped, never hibernated environment: %v, want ErrSavedStateLost", err)
	}
	if err := rt.Start(ctx, "hib-2"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, link, "hib-2", patience, "ready")
	if _, err := rt.Hibernate(ctx, "hib-2"); err != nil {
		t.Fatal(err)
	}
	// Removed behind the server's back while hibernated.
	id2, err := rt.Inspect(ctx, "hib-2")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cli.ContainerRemove(ctx, id2.RuntimeID, container.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Wake(ctx, "hib-2"); !errors.Is(err, ports.ErrSavedStateLost) {
		t.Errorf("Wake of a hibernated environment whose container was removed: %v, want ErrSavedStateLost", err)
	}
	if err := rt.Destroy(ctx, "hib-2"); !errors.Is(err, ports.ErrEnvNotFound) || marker("hib-2") {
		t.Errorf("Destroy of it: %v, marker left %v; want ErrEnvNotFound and the marker gone", err, marker("hib-2"))
	}

	// A hibernated environment destroyed: container, secret and marker go.
	provision(t, rt, envSpec(t, link, "hib-3"))
	if _, err := rt.Hibernate(ctx, "hib-3"); err != nil {
		t.Fatal(err)
	}
	if !marker("hib-3") {
		t.Fatal("no marker after Hibernate")
	}
	if err := rt.Destroy(ctx, "hib-3"); err != nil {
		t.Fatal(err)
	}
	if left := d.leftovers(t, "hib-3"); marker("hib-3") || len(left) > 0 {
		t.Errorf("after Destroy of a hibernated environment: marker %v, containers %v", marker("hib-3"), left)
	}
	// A read-only root whose agent was renamed (a pool member taken): its
	// new identity is kept on the host, not in a tmpfs, so that it comes
	// back as the new one after a wake; without it the wake is refused.
	ro := envSpec(t, link, "hib-ro")
	ro.ReadOnlyRoot = true
	provision(t, rt, ro)
	waitStatus(t, link, "hib-ro", patience, "ready")
	newSecret, err := secret.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := link.Credentials.Put("hib-taken", newSecret); err != nil {
		t.Fatal(err)
	}
	if err := link.Service.RenameAgent(ctx, "hib-ro", "hib-taken", newSecret); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, link, "hib-taken", patience, "ready")
	if err := link.Credentials.Delete("hib-ro"); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Hibernate(ctx, "hib-ro"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, link, "hib-taken", patience, "disconnected")
	t2 := time.Now()
	if err := rt.Wake(ctx, "hib-ro"); err != nil {
		t.Fatal(err)
	}
	waitReconnected(t, link, "hib-taken", t2)
	if out, code := runSh(t, link, "hib-taken", "echo $AGENT_ID"); out != "hib-taken\n" || code != 0 {
		t.Errorf("the woken agent says it is %q (exit %d), want hib-taken", out, code)
	}
	if _, err := rt.Hibernate(ctx, "hib-ro"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(state, "hib.hib-ro.secret")); err != nil {
		t.Fatal(err)
	}
	if err := rt.Wake(ctx, "hib-ro"); !errors.Is(err, ports.ErrSavedStateLost) {
		t.Errorf("Wake without the agent's secret on the host: %v, want ErrSavedStateLost", err)
	}
	if err := rt.Destroy(ctx, "hib-ro"); err != nil {
		t.Fatal(err)
	}

	if entries, err := os.ReadDir(state); err != nil || len(entries) > 0 {
		t.Errorf("state directory after every Destroy: %v, %v; want empty", entries, err)
	}
}

// waitReconnected waits until agent id is ready on a connection made after since.
func waitReconnected(t *testing.T, link *Link, id string, since time.Time) ports.AgentInfo {
	t.Helper()
	for {
		if a, ok := link.Service.Agent(id); ok && a.Status == "ready" && a.ConnectedAt.After(since) {
			return a
		}
		if time.Since(since) > patience {
			t.Fatalf("agent %s did not connect again within %v", id, patience)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
