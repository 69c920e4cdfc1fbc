package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/docker"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/libvirt"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/promexport"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Runtimes are the runtimes this server provisions environments with.
type Runtimes struct {
	// Available answered at start.
	Available map[string]ports.Runtime
	// Unreachable were asked for (or found) but did not answer, with why.
	Unreachable map[string]error
	// explicit is whether AGENTIC_RUNTIMES chose them.
	explicit bool
	closers  []func()
}

// Isolations are the tiers to advertise: the host tier where host agents
// run, container and VM where the operator configured those runtimes
// (AGENTIC_RUNTIMES) and they answer. Runtimes merely found serve
// environments; their tier is advertised once an agent of that kind is
// connected (see mission.ExecutorCapabilities), since a mission can only
// run on a connected agent.
func (r *Runtimes) Isolations(hostAgents bool) []string {
	var out []string
	if hostAgents {
		out = append(out, ports.IsolationHost)
	}
	if !r.explicit {
		return out
	}
	for _, rt := range r.Available {
		if iso := rt.Capabilities().Isolation; iso != ports.IsolationHost && !slices.Contains(out, iso) {
			out = append(out, iso)
		}
	}
	sort.Strings(out)
	return out
}

// Readiness reports each runtime; one asked for by AGENTIC_RUNTIMES that
// does not answer makes the server unready, one only found does not.
func (r *Runtimes) Readiness() []rest.ReadinessCheck {
	var out []rest.ReadinessCheck
	for name := range r.Available {
		out = append(out, rest.ReadinessCheck{Name: "runtime_" + name, Ready: true, Detail: "reachable"})
	}
	for name, err := range r.Unreachable {
		out = append(out, rest.ReadinessCheck{Name: "runtime_" + name, Ready: !r.explicit, Detail: "unreachable, not used: " + err.Error()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Close releases the engines' connections.
func (r *Runtimes) Close() {
	for _, c := range r.closers {
		c()
	}
}

// owner tells this server's containers and domains from another's on the
// same engine: stable for a data dir.
func owner(cfg Config) string {
	sum := sha256.Sum256([]byte(cfg.DataDir))
	return "as-" + hex.EncodeToString(sum[:6])
}

// provideRuntimes finds the runtimes: AGENTIC_RUNTIMES, else host always
// and Docker and libvirt where DOCKER_HOST / LIBVIRT_DEFAULT_URI or their
// default sockets exist.
func provideRuntimes(cfg Config, log *slog.Logger) *Runtimes {
	r := &Runtimes{Available: map[string]ports.Runtime{}, Unreachable: map[string]error{}, explicit: cfg.Runtimes != nil}
	want := cfg.Runtimes
	if want == nil {
		want = []string{"host"}
		if os.Getenv("DOCKER_HOST") != "" || exists("/var/run/docker.sock") {
			want = append(want, "docker")
		}
		if os.Getenv("LIBVIRT_DEFAULT_URI") != "" || exists("/var/run/libvirt/libvirt-sock") {
			want = append(want, "libvirt")
		}
	}
	for _, name := range want {
		rt, closer, err := newRuntime(name, cfg, log)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = rt.Ping(ctx)
			cancel()
		}
		if closer != nil {
			r.closers = append(r.closers, closer)
		}
		if err != nil {
			r.Unreachable[name] = err
			log.Error("runtime unreachable; its environments and isolation tier are not offered", "runtime", name, "err", err)
			continue
		}
		r.Available[name] = rt
		log.Info("runtime available", "runtime", name, "isolation", rt.Capabilities().Isolation)
	}
	return r
}

func newRuntime(name string, cfg Config, log *slog.Logger) (ports.Runtime, func(), error) {
	switch name {
	case "host":
		return hostsup.NewRuntime(hostsup.RuntimeConfig{StateDir: filepath.Join(cfg.DataDir, "host-envs"), Logger: log}), nil, nil
	case "docker":
		rt, err := docker.New(docker.Config{Owner: owner(cfg)})
		if err != nil {
			return nil, nil, err
		}
		return rt, func() { _ = rt.Close() }, nil
	case "libvirt":
		// QEMU runs as its own user and must reach the VMs' files: the data
		// dir is opened for search only (its files stay 0600, secrets/ 0700).
		if err := os.Chmod(cfg.DataDir, 0o711); err != nil {
			return nil, nil, err
		}
		rt, err := libvirt.New(libvirt.Config{
			Owner: owner(cfg), StateDir: filepath.Join(cfg.DataDir, "vms"), Logger: log,
			ImageDir: cfg.VMImageDir, Accel: cfg.LibvirtAccel,
		})
		if err != nil {
			return nil, nil, err
		}
		return rt, func() { _ = rt.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown runtime %q", name)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func provideProvisionTimes() *promexport.ProvisionTimes { return promexport.NewProvisionTimes() }

func provideEnvironments(cfg Config, rts *Runtimes, svc *agentrpc.Service, creds ports.AgentCredentials, clock ports.Clock, log *slog.Logger, times *promexport.ProvisionTimes) (*environment.Service, error) {
	var bin string
	if len(rts.Available) > 0 {
		b, err := agentBinary(cfg.AgentBinary)
		if err != nil {
			log.Error("environments cannot be provisioned without the agent binary", "err", err)
		}
		bin = b
	}
	return environment.New(environment.Config{
		Runtimes: rts.Available, Agents: svc, Credentials: creds, Clock: clock, Logger: log,
		Bootstrap:        ports.AgentBootstrap{Binary: bin, ServerURL: cfg.agentServerURL(), Socket: cfg.AgentSocket},
		ObserveProvision: times.Observe,
	}), nil
}
