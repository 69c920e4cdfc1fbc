package main

import (
	"errors"
	"slices"
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
