package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// tierRuntime is a runtime that only declares its isolation tier.
type tierRuntime struct {
	ports.Runtime
	iso ports.RuntimeKind
}

func (r tierRuntime) Capabilities() ports.RuntimeCapabilities {
	return ports.RuntimeCapabilities{Runtime: string(r.iso), Isolation: r.iso}
}

func TestIsolationsAdvertiseOnlyConfiguredReachableTiers(t *testing.T) {
	host := hostsup.NewRuntime(hostsup.RuntimeConfig{StateDir: t.TempDir()})
	avail := map[string]ports.Runtime{"host": host, "docker": tierRuntime{iso: ports.KindContainer}}
	unreachable := map[string]error{"libvirt": errors.New("no socket")}
	for _, c := range []struct {
		explicit, hostAgents bool
		want                 []ports.RuntimeKind
	}{
		{false, false, nil},
		{false, true, []ports.RuntimeKind{ports.KindHost}},
		{true, false, []ports.RuntimeKind{ports.KindContainer}},
		{true, true, []ports.RuntimeKind{ports.KindContainer, ports.KindHost}},
	} {
		r := &Runtimes{Available: avail, Unreachable: unreachable, explicit: c.explicit}
		if got := r.Isolations(c.hostAgents); !slices.Equal(got, c.want) {
			t.Errorf("explicit=%v hostAgents=%v: %v, want %v", c.explicit, c.hostAgents, got, c.want)
		}
		checks := r.readiness()
		i := slices.IndexFunc(checks, func(ch rest.ReadinessCheck) bool { return ch.Name == "runtime_libvirt" })
		if i < 0 || checks[i].Ready == c.explicit {
			t.Errorf("explicit=%v: readiness %+v; libvirt must be shown, and fail only when configured", c.explicit, checks)
		}
	}
}

// A runtime that does not answer at start is tried again; until it
// answers, a request naming it is told why and how to get it.
func TestUnreachableRuntimesSayHowToGetThem(t *testing.T) {
	sock := "unix://" + t.TempDir() + "/docker.sock"
	cfg := Config{DataDir: t.TempDir(), Runtimes: []string{"host", "docker"},
		RuntimeOptions: map[string]any{"docker": dockerOptions{Host: sock}}}
	rts, closeRts := provideRuntimes(cfg, slog.New(slog.DiscardHandler), nil)
	defer closeRts()
	if _, ok := rts.snapshot()["host"]; !ok {
		t.Fatalf("host not available: %v", rts.Unreachable)
	}
	if _, ok := rts.Unreachable["docker"]; !ok {
		t.Fatalf("docker with no daemon: unreachable %v", rts.Unreachable)
	}
	why := rts.unavailable("docker")
	for _, want := range []string{"docker does not answer", "make docker", "DOCKER_HOST", "GET /api/v1/runtimes"} {
		if !strings.Contains(why, want) {
			t.Errorf("why docker is missing: %q; want it to say %q", why, want)
		}
	}
	if why := rts.unavailable("libvirt"); !strings.Contains(why, "AGENTIC_RUNTIMES (host,docker) does not name libvirt") {
		t.Errorf("a runtime AGENTIC_RUNTIMES leaves out: %q", why)
	}
	if why := rts.unavailable("nosuch"); !strings.Contains(why, "host, docker, libvirt") {
		t.Errorf("an unknown runtime: %q", why)
	}
	// Still nothing there: tried again at once (it failed fast, so no
	// request waits on it), nothing found, still unreachable.
	stale := errors.New("stale")
	rts.Unreachable["docker"] = stale
	if found := rts.discover(context.Background()); len(found) != 0 {
		t.Fatalf("discover found %v with no daemon", found)
	}
	if err, ok := rts.Unreachable["docker"]; !ok || err == stale {
		t.Fatalf("docker after a second try: %v, %v; want tried again and still unreachable", err, ok)
	}
}
